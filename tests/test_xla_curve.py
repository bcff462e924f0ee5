"""XLA's plan curve (calc/xla/curve.py): drawn points, the rematerialisation limit, the largest batch.

Pure: every plan is made by a formula in this file, shaped as XLA's plans are (a straight
line in the batch until the temporaries reach XLA's scheduler limit, then held at that
limit while recomputation can, then growing again).
"""

from __future__ import annotations

import pytest

from calc.xla import CompiledPoint, PlanCurve, PointSource, settle_width
from calc.xla.plan import XlaPlan, drawn_plan
from calc.xla.search import max_batch_xla, search_curve

GIB = 2**30
MIB = 2**20
MEMORY = 16 * GIB  # the card as XLA sees it
STATE = 300 * MIB  # weights, optimizer state, outputs: the program's inputs and outputs without the batch
INPUT = 600_000  # input bytes per sample
FIXED_TEMP = 40 * MIB
PER_SAMPLE = 80 * MIB  # temporaries per sample while XLA keeps every activation


def limit(io: int) -> int:
    """XLA's scheduler limit on temporaries (xla/service/gpu/gpu_compiler.cc): (80 % of memory - io) x 95 %."""
    return (MEMORY * 80 // 100 - io) * 95 // 100


def region(io: int) -> int:
    """The line region's bound on temporaries: half XLA's limit (its remat pass counts on its own)."""
    return limit(io) // 2


def plan(batch: int, *, holds_until: float = 1.6) -> CompiledPoint:
    """A plan shaped like XLA's: the line until the temporaries reach the limit; then held at the limit
    while recomputation can save enough (up to ``holds_until`` times the limit), then growing again."""
    io = STATE + INPUT * batch
    temp = FIXED_TEMP + PER_SAMPLE * batch
    cap = limit(io)
    if temp > cap:
        temp = cap - 1000 if temp <= holds_until * cap else round(temp / holds_until)
    return CompiledPoint(batch, io + temp, temp)


def line_peak(batch: int) -> int:
    return STATE + INPUT * batch + FIXED_TEMP + PER_SAMPLE * batch


def curve_of(*batches: int) -> PlanCurve:
    return PlanCurve.of([plan(b) for b in batches], MEMORY)


def test_points_between_and_above_two_plans_are_drawn_on_their_line_and_none_below():
    curve = curve_of(8, 32)
    for batch in (9, 20, 31, 50, curve.line_end()):
        point = curve.at(batch)
        assert point is not None and point.source is PointSource.DRAWN and point.through == (8, 32)
        assert point.peak_bytes == line_peak(batch)
    assert curve.at(32).source is PointSource.COMPILED and curve.at(32).peak_bytes == line_peak(32)
    # Small batches move by a few samples' worth with XLA's layout choices: never drawn below the line's start.
    assert curve.line_start() == 8 and curve.at(7) is None and curve.at(1) is None


def test_between_more_plans_each_point_is_drawn_between_its_neighbours():
    wobbly = {8: 10 * MIB, 32: -30 * MIB, 48: 0}  # layout choices move plans a little
    curve = PlanCurve.of([CompiledPoint(b, plan(b).peak_bytes + w, plan(b).temp_bytes + w)
                          for b, w in wobbly.items()], MEMORY)
    assert curve.at(20).through == (8, 32) and curve.at(40).through == (32, 48)
    assert curve.at(60).through == (8, 48)  # above them all: the widest line


def test_the_line_ends_where_the_temporaries_would_reach_half_xlas_limit():
    curve = curve_of(8, 32)
    end = max(b for b in range(1, 1000) if FIXED_TEMP + PER_SAMPLE * b <= region(STATE + INPUT * b))
    assert curve.line_end() == end
    assert curve.at(end + 1) is None  # nearer the card's memory only compiled plans count
    assert curve_of(8, 32, end + 20).at(end + 20).source is PointSource.COMPILED


def test_a_plan_xla_rematerialised_is_not_a_point_of_the_line():
    """Past the limit XLA holds the temporaries just under it: such a plan lies under the line and
    must not bend it, though its temporaries are (just) under the limit; nor does a plan above the
    line region, which XLA's own count may have rematerialised."""
    line_limit = max(b for b in range(1, 1000) if FIXED_TEMP + PER_SAMPLE * b <= limit(STATE + INPUT * b))
    held = plan(line_limit + 30)
    assert held.temp_bytes <= limit(held.io_bytes)
    end = curve_of(8, 32).line_end()
    curve = PlanCurve.of([plan(8), plan(32), plan(end + 5), held], MEMORY)
    assert [p.batch for p in curve.anchors] == [8, 32]
    assert curve.at(end - 10).peak_bytes == line_peak(end - 10)


def test_a_slop_factor_scales_xlas_limit_and_the_line_region_with_it(monkeypatch):
    """``xla_gpu_memory_limit_slop_factor`` (XLA_FLAGS) is the last factor of XLA's limit: a curve of plans
    compiled under 8 % ends its line where (80 % of memory - io) x 8 % would be half full."""
    from calc.xla import known_curve
    from calc.xla.curve import slop_percent
    from calc.catalogue import make_spec
    from calc.types import TrainingConfig

    assert slop_percent("") == 95 and slop_percent("--xla_gpu_memory_limit_slop_factor=95") == 95
    assert slop_percent("--xla_gpu_memory_limit_slop_factor=50 --xla_gpu_memory_limit_slop_factor=8") == 8
    scaled = PlanCurve.of([plan(1), plan(3)], MEMORY, slop=8)
    assert scaled.remat_limit_bytes(STATE) == (MEMORY * 80 // 100 - STATE) * 8 // 100
    end = max(b for b in range(1, 1000)
              if FIXED_TEMP + PER_SAMPLE * b <= (MEMORY * 80 // 100 - STATE - INPUT * b) * 8 // 100 // 2)
    assert scaled.line_end() == end and end * 5 < curve_of(1, 3).line_end()
    assert PlanCurve.of([plan(8), plan(32)], MEMORY, slop=8).anchors == ()  # past a scaled limit: no line
    assert scaled.adding(plan(end + 1)).slop == 8  # a search keeps the curve's factor
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_memory_limit_slop_factor=8")
    assert known_curve(make_spec("MobileNetV2", 96), TrainingConfig(), "t4").slop == 8


def test_near_limit_at_a_scale_reads_a_step_inside_the_bend_with_room():
    from tests.tools import load_tool

    near = load_tool("near_limit")
    from calc.gpus import GPU_PRESETS

    card = GPU_PRESETS["h200"]
    assert near.scaled_region_mib("h200", 95) == (card.memory_bytes - card.overhead_bytes) // MIB
    assert abs(near.scaled_region_mib("h200", 8) * 95 / 8 - near.scaled_region_mib("h200", 95)) < 95 / 8
    line_limit = max(b for b in range(1, 1000) if FIXED_TEMP + PER_SAMPLE * b <= limit(STATE + INPUT * b))
    held = [line_limit + 5, line_limit + 30, line_limit + 60]
    curve = curve_of(8, 32, *held)
    # Held at XLA's limit, the bent plans differ by their inputs alone: the one with 5 % free is taken.
    roomy = int(plan(held[1]).peak_bytes / 0.95) + 1
    assert near.inside_bend(curve, held[-1], roomy) == held[1]
    tight = int(plan(held[0]).peak_bytes / 0.95) + 1
    assert near.inside_bend(curve, held[-1], tight) == held[0]
    assert near.inside_bend(curve, held[0], roomy) is None  # nothing bent below it
    assert near.inside_bend(curve_of(8, 32), 32, roomy * 10) is None  # plans on the line are not in the bend


def test_a_first_plan_near_the_limit_waits_for_two_plans_well_inside_it():
    line_limit = max(b for b in range(1, 1000) if FIXED_TEMP + PER_SAMPLE * b <= limit(STATE + INPUT * b))
    end = curve_of(8, 32).line_end()
    near = PlanCurve.of([plan(line_limit - 2)], MEMORY)
    assert near.anchors == () and near.at(10) is None
    second = near.second_anchor()
    assert second is not None and second & (second - 1) == 0 and second <= end // 2
    both = PlanCurve.of([plan(line_limit - 2), plan(second)], MEMORY)
    assert len(both.anchors) == 1 and both.second_anchor() not in (None, second)


def test_the_second_plan_is_a_power_of_two_far_from_the_first_and_well_inside_the_limit():
    for first in (1, 4, 16):
        point = plan(first)
        # The line region's batch, all the first plan's temporaries taken to grow with the batch.
        region_batch = region(point.io_bytes) // (point.temp_bytes // first)
        top = 1 << region_batch.bit_length() - 1  # the largest power of two up to it
        assert top >= 2 * first
        assert PlanCurve.of([point], MEMORY).second_anchor() == top  # above: the line is drawn upwards
    assert PlanCurve.of([plan(40)], MEMORY).second_anchor() == 8  # no room above: the smallest of 8 or more
    assert curve_of(8, 32).second_anchor() is None


@pytest.mark.parametrize("budget_gib, holds_until", [(13.5, 1.6), (13.5, 1.0), (9.0, 1.6), (15.5, 1.3), (0.2, 1.6)])
def test_the_search_settles_where_a_search_over_every_batch_would(budget_gib, holds_until):
    budget = int(budget_gib * GIB)

    def needed(b):
        return plan(b, holds_until=holds_until)

    brute = max((b for b in range(1, 5000) if needed(b).peak_bytes <= budget), default=0)
    answer, curve, compiled = search_curve(needed, budget, 32, PlanCurve.of([needed(32)], MEMORY))
    assert answer.settled and answer.source is PointSource.COMPILED
    assert brute - settle_width(brute) <= answer.batch <= brute
    if answer.batch:
        assert curve.compiled(answer.batch).peak_bytes <= budget < curve.compiled(answer.exceeds).peak_bytes
        assert answer.exceeds - answer.batch <= settle_width(answer.batch)
    assert len(compiled) <= 12
    assert curve.max_batch(budget) == answer and curve.next_search_batch(budget, 32) is None


def test_before_the_search_settles_the_answer_is_the_best_lower_bound():
    curve = curve_of(8, 32)
    budget = 13 * GIB
    answer = curve.max_batch(budget)
    end = curve.line_end()
    assert answer.source is PointSource.DRAWN and not answer.settled and answer.batch == end
    assert curve_of(8, 32, end + 30).max_batch(budget).batch == end + 30  # a compiled plan past the line fits


def test_past_the_lines_region_the_search_first_compiles_where_the_line_drawn_on_crosses_the_budget():
    """Not at the region's end, which fits by construction: where the straight line would reach the budget
    (XLA's plan lies under it there as it rematerialises, so that compile most often fits and bounds the
    answer from below, or else brackets it)."""
    curve = curve_of(8, 32)
    budget = 13 * GIB
    by_hand = (budget - STATE - FIXED_TEMP) // (INPUT + PER_SAMPLE)  # line_peak(b) <= budget
    assert by_hand > curve.line_end()
    assert curve.line_crossing_drawn_on(budget) == by_hand and curve.next_search_batch(budget, 32) == by_hand
    small = line_peak(20)  # a budget inside the region: the line's own crossing
    assert curve.next_search_batch(small, 32) == curve.line_crossing(small) == 20
    assert curve.line_crossing_drawn_on(line_peak(8) - 1) is None  # not even the line's start fits


@pytest.mark.parametrize("batch", [0, 1, 99, 199, 200, 450, 5000])
def test_the_search_settles_exactly_below_200_and_within_one_percent_above(batch):
    assert settle_width(batch) == (1 if batch < 200 else batch // 100)


def test_max_batch_without_a_line_brackets_b_that_fits():
    def needed(b):  # close to linear, with a layout wobble, as plans are
        return 300 * MIB + 45 * MIB * b + (b % 5) * 100_000

    usable = 15 * GIB
    found = max_batch_xla(needed, usable, 3)
    brute = max(b for b in range(1, 5000) if needed(b) <= usable)
    assert brute - settle_width(brute) <= found.max_batch <= brute
    assert dict(found.compiled)[found.max_batch] <= usable < dict(found.compiled)[found.exceeds]
    assert found.compiles <= 12


def test_a_drawn_plans_parts_sum_to_its_drawn_peak():
    def at(batch):
        return XlaPlan(weights_bytes=100, optimizer_state_bytes=200, input_batch_bytes=64 * batch,
                       temporaries_bytes=1000 * batch, outputs_bytes=8, outside_step_bytes=0, target="t4")

    drawn = drawn_plan(at(8), 8, at(32), 32, 20, 50_000)
    assert drawn.input_batch_bytes == 64 * 20 and drawn.peak_bytes == 50_000
    assert drawn.drawn_through == (8, 32) and not drawn.compiled and at(8).compiled


def test_a_kerashub_budget_without_its_record_keeps_the_other_records_residual_and_the_users_margin_on_top(
        monkeypatch):
    from calc.gpus import GPU_PRESETS
    from calc.validation.margins import PlanMargin
    from calc.xla import budget

    monkeypatch.setattr(budget, "hub_plan_margin", lambda: PlanMargin(0.0, 0, 0.0, "hub_h200"))
    monkeypatch.setattr(budget, "plan_margin", lambda: PlanMargin(0.03, 32, -0.095))
    assert budget.plan_budget(GPU_PRESETS["t4"], 0.05, hub=True).margin == pytest.approx(0.08)
    monkeypatch.setattr(budget, "hub_plan_margin", lambda: PlanMargin(0.01, 8, -0.2, "hub_h200"))
    hub = budget.plan_budget(GPU_PRESETS["t4"], 0.05, hub=True)
    assert hub.margin == pytest.approx(0.06) and hub.measured.record == "hub_h200"
    assert budget.plan_budget(GPU_PRESETS["t4"], 0.0).margin == pytest.approx(0.03)


@pytest.mark.parametrize("lines", [True, False])
def test_shipping_a_curve_compiles_its_line_and_then_its_search(monkeypatch, lines):
    """tools/ship_xla_plans.py: ``--lines`` compiles the first batch and the second plan the line asks for,
    nothing more; without it the search follows until the largest batch is settled."""
    from types import SimpleNamespace

    from calc import xla
    from calc.catalogue import make_spec
    from calc.gpus import GPU_PRESETS
    from calc.types import Device, TrainingConfig
    from tests.tools import load_tool

    ship = load_tool("ship_xla_plans")
    memory = xla.target_for("t4").device_memory_size
    compiled: list[int] = []

    def compute_plan(spec, config, gpu, explained=False):
        compiled.append(config.batch_size)
        point = plan(config.batch_size)
        return SimpleNamespace(peak_bytes=point.peak_bytes, temporaries_bytes=point.temp_bytes)

    monkeypatch.setattr(xla, "compute_plan", compute_plan)
    monkeypatch.setattr(xla, "known_curve", lambda *a, **k: PlanCurve((), memory))
    config = TrainingConfig(batch_size=32, device=Device.GPU)
    line = ship.compile_curve(make_spec("ResNet50"), config, "t4", 0.05, lines=lines)
    second = PlanCurve.of([plan(32)], memory).second_anchor()
    assert second is not None and compiled[:2] == [32, second]
    if lines:
        assert compiled == [32, second] and "largest batch" not in line
        return
    budget = xla.plan_budget(GPU_PRESETS["t4"], 0.05).plan_bytes
    # Beside each sample's plan, as the pages keep it: ResNet50's largest convolution, conv3_block1_0_conv
    # (56x56x256 in, 28x28x512 out), in float32.
    kept = (56 * 56 * 256 + 28 * 28 * 512) * 4
    largest = max(b for b in range(1, 4096) if plan(b).peak_bytes + b * kept <= budget)
    found = int(line.split("largest batch ")[1].split(",")[0])
    assert len(compiled) > 2 and found in compiled and largest - xla.settle_width(largest) <= found <= largest
