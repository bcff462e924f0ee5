"""Pure view helpers of the dashboard (no Streamlit run)."""

import os
from dataclasses import replace

import numpy as np
import pytest

from calc.catalogue import make_spec
from calc.estimate import memory_curve
from calc.profiles import get_profile
from calc.types import TrainingConfig
from dashboard.views import curve_batches


@pytest.mark.parametrize("top, step, marks", [(4096, 1, (32, 269, 270)), (32768, 4, (64, 1000, 1004)),
                                              (4096, 3, (33, 30, 33)), (10, 1, (5,)), (4096, 1, (0, 9999))])
def test_curve_batches_are_multiples_of_the_gpus_and_keep_the_marks(top, step, marks):
    b = curve_batches(top, step, marks)
    assert list(b) == sorted(set(b)) and all(x % step == 0 and 0 < x <= top for x in b)
    assert b[-1] == top // step * step and b[0] == step
    assert {m for m in marks if 0 < m <= top and m % step == 0} <= set(b)
    assert len(b) <= 32 + 97 + len(marks)


@pytest.mark.parametrize("model, optimizer", [("ResNet50", "adam"), ("MobileNetV2", "sgd"), ("VGG16", "adamw")])
def test_the_sampled_curve_draws_the_full_curve(model, optimizer):
    profile = get_profile(make_spec(model))  # shipped: no Keras
    config = TrainingConfig(batch_size=32, optimizer=optimizer)
    every = np.arange(1, 4097, 3)
    full = np.array(memory_curve(profile, config, every.tolist()), dtype=float)
    sampled = curve_batches(4096, 1, (32,))
    drawn = np.interp(every, sampled, memory_curve(profile, config, list(sampled)))
    off = np.abs(drawn - full) / full
    # Drawn points 5 % apart: the walk is linear between the allocator's chunk-rule
    # switches (ResNet50: batch 167 -> 168 steps down 1.2 %), and the simulated allocator
    # raises some batches by a few % over their neighbours (calc.engine.floors.floored), so
    # the line between drawn points is a guide to within a step of either.
    assert np.quantile(off, 0.99) < 0.01 and off.max() < 0.03


@pytest.mark.keras
def test_breakdown_shows_the_allocator_part_only_when_simulated_and_no_part_of_zero_bytes():
    from calc.estimate import estimate_memory
    from dashboard.figures import LABELS, breakdown_figure

    frozen = get_profile(make_spec("MobileNetV2", 224, include_top=False))
    config = TrainingConfig(batch_size=28, optimizer="adamw", train_mode="frozen_backbone")
    parts = estimate_memory(frozen, config).components()
    assert parts["allocator"] > 0  # the measured jump at batch 28 (docs/notes/allocator.md)
    names = [t.name for t in breakdown_figure(parts, 0, 16 << 30, 2**30, "GiB").data]
    assert LABELS["allocator"] in names
    assert names == [str(LABELS[k]) for k, v in parts.items() if v]  # no overhead (0 here), no empty part
    full = {**parts, "allocator": 0}
    assert LABELS["allocator"] not in [t.name for t in breakdown_figure(full, 0, 16 << 30, 2**30, "GiB").data]


def test_the_plan_decides_the_verdict_with_the_overhead_and_the_margin():
    from calc.gpus import GPU_PRESETS
    from calc.xla import KnownPlans, PlanCurve, XlaPlan, plan_budget
    from calc.xla.curve import CompiledPoint
    from dashboard.state import Inputs
    from dashboard.views import estimate_view, max_batch_value, verdict
    from dashboard.xla_view import shown_xla, xla_answer
    from tests.tools import xla_margin

    gpu = GPU_PRESETS["t4"]
    inputs = Inputs(model="ResNet50", image_size=224, batch_size=32, gpu="t4", remat="full")
    view = estimate_view(get_profile(make_spec("ResNet50")), inputs, gpu)
    usable = int(gpu.memory_bytes * (1 - xla_margin(inputs.margin / 100)))
    verdicts = []
    for temporaries in (usable - gpu.overhead_bytes - 1008, usable - gpu.overhead_bytes - 1007):  # needed: usable, +1
        plan = XlaPlan(400, 500, 100, temporaries, 8, 0, target="t4", remat="full")
        known = KnownPlans({32: plan}, PlanCurve.of([CompiledPoint(32, plan.peak_bytes, temporaries)], 16 * 2**30))
        shown = shown_xla(view, inputs, xla_answer(known, 32, plan_budget(gpu, inputs.margin / 100)),
                          base_peak_bytes=plan.peak_bytes + 7)
        assert shown.needed_bytes == 400 + 500 + 100 + temporaries + 8 + gpu.overhead_bytes
        assert shown.usable_bytes == usable and shown.fits == (shown.needed_bytes <= usable)
        assert verdict(shown, inputs).startswith("Fits" if shown.fits else "Does not fit")
        assert sum(shown.components.values()) == shown.peak_bytes and shown.remat_saving_bytes == 7
        assert shown.curve.compiled == ((32, plan.peak_bytes + gpu.overhead_bytes),)
        # One plan and no search yet: the largest batch is the plans' bound, and says so.
        assert shown.searching and "searching" in shown.max_batch_label
        off = shown_xla(view, inputs, xla_answer(known, 32, plan_budget(gpu, inputs.margin / 100)),
                        base_peak_bytes=None, compiling=False)  # a server with compiles off: nothing searches
        assert off.searching and off.max_batch_label == "Largest batch that fits (XLA plans known, not settled)"
        assert max_batch_value(shown) == ("≥ 32" if shown.fits else "< 32")
        verdicts.append(shown.fits)
    assert verdicts == [True, False]
    # Settled with not even one sample fitting: the metric says none rather than a batch of 0.
    assert max_batch_value(replace(shown, searching=False, max_batch=0)) == "none"
    assert max_batch_value(replace(shown, searching=False, max_batch=1234)) == "1,234"


def test_the_formula_pages_xla_line_writes_the_largest_batch_as_the_estimator_does():
    from calc.gpus import GPU_PRESETS
    from calc.xla import KnownPlans, MaxBatch, PlanCurve, XlaPlan, plan_budget
    from calc.xla.curve import CompiledPoint, PointSource
    from dashboard.state import Inputs
    from dashboard.xla_view import lesson_line, xla_answer

    gpu = GPU_PRESETS["t4"]
    inputs = Inputs(model="ResNet50", image_size=224, batch_size=64, gpu="t4", num_gpus=2)
    plan = XlaPlan(400, 500, 100, 20 * 2**30, 8, 0, target="t4")
    known = KnownPlans({32: plan}, PlanCurve.of([CompiledPoint(32, plan.peak_bytes, plan.temporaries_bytes)],
                                                 16 * 2**30))
    answer = xla_answer(known, 32, plan_budget(gpu, 0.05))

    def line(batch: int, settled: bool) -> str:
        best = MaxBatch(batch, PointSource.COMPILED, settled, batch or None, batch + 1)
        return lesson_line(replace(answer, max_batch=best), inputs, gpu)

    assert "its largest batch on Tesla T4 16 GB, none, with" in line(0, True)  # not "0", as the Estimator says
    assert "its largest batch on Tesla T4 16 GB, 2,468, with" in line(1234, True)  # both GPUs' batch
    assert "at least 2,468 (not settled yet)" in line(1234, False)


def _every_figure():
    """Each figure builder of dashboard.figures, on small numbers, with every optional part drawn."""
    from dashboard import figures
    from dashboard.views import CurveView

    gib = 2**30
    parts = {"weights": gib, "gradients": gib, "optimizer_state": 2 * gib, "activations": 3 * gib, "allocator": gib}
    return {
        "breakdown": figures.breakdown_figure(parts, gib // 2, 16 * gib, gib, "GiB"),
        "curve": figures.curve_figure(CurveView(walk=((1, gib), (2, 2 * gib), (4, 4 * gib), (8, 8 * gib)),
                                                drawn=((2, gib), (4, 2 * gib)), compiled=((2, gib), (6, 3 * gib)),
                                                current=(4, 2 * gib), best=(8, 4 * gib), x_max=10),
                                      16 * gib, 15 * gib, "8", gib, "GiB"),
        "layers": figures.layers_figure(["conv", "dense"], [1000, 2000], gib, "GiB"),
        "timeline": figures.timeline_figure(["forward conv", "loss", "backward conv", "update"],
                                            [gib, 3 * gib, 2 * gib, gib], gib, "GiB"),
        "validation": figures.validation_figure([gib, 2 * gib], [gib, 3 * gib], ["a", "b"], gib, "GiB",
                                                extra=[(gib, 2 * gib, "now")]),
        "curves": figures.curves_figure({"m": ([1, 2], [gib, 2 * gib])}, {"T4": 16 * gib}, gib, "GiB"),
    }


def test_no_figure_draws_in_black_or_white_or_on_an_opaque_legend():
    """Streamlit's dark theme has a near-black background and its light theme a white one:
    a black line or a white legend box vanishes or glares on one of them."""
    import json
    import re

    for name, fig in _every_figure().items():
        spec = fig.to_plotly_json()
        spec["layout"].pop("template", None)  # Streamlit's theme replaces Plotly's template
        text = json.dumps(spec).lower()
        for colour in ('"black"', '"white"', '"#000"', '"#000000"', '"#fff"', '"#ffffff"'):
            assert colour not in text, (name, colour)
        # Black or white at any opacity but none (a transparent legend box is rgba(0,0,0,0)).
        assert not re.search(r"rgba?\((0,0,0|255,255,255)(\)|,(?!0\))[\d.]+\))", text.replace(" ", "")), name
        bgcolor = fig.layout.legend.bgcolor
        assert bgcolor is None or bgcolor.replace(" ", "").endswith(",0)"), (name, bgcolor)


def test_every_figure_is_drawn_by_the_basic_bundle_in_the_pages_theme():
    """The browser draws the figures with plotly.js's basic bundle (dashboard/charts.py): a trace
    type it lacks would draw nothing; Plotly's template would override the page's theme."""
    import json

    from dashboard.charts import BASIC_TRACES, figure_json

    for name, fig in _every_figure().items():
        assert {trace.type for trace in fig.data} <= BASIC_TRACES, name
        spec = json.loads(figure_json(fig))
        assert "template" not in spec["layout"] and spec["data"] == json.loads(fig.to_json())["data"], name


def test_the_bundle_is_the_plotly_js_the_figures_are_written_for():
    from plotly.offline import get_plotlyjs_version

    from dashboard.charts import STATIC_DIR, bundle_name, bundle_version

    version = get_plotlyjs_version()  # the installed plotly (Python) writes figure JSON for this plotly.js
    assert bundle_version() == version, "run python tools/vendor_plotly.py"
    with open(os.path.join(STATIC_DIR, bundle_name()), encoding="utf-8") as f:
        assert f"plotly.js (basic - minified) v{version}" in f.read(300)
    assert os.path.exists(os.path.join(STATIC_DIR, "plotly-LICENSE.txt"))


def test_the_bundle_is_fetched_under_the_servers_base_path(monkeypatch):
    import streamlit as st

    from dashboard import charts

    options = {"server.baseUrlPath": ""}
    monkeypatch.setattr(st, "get_option", lambda key: options[key])
    assert charts.bundle_url() == f"/app/static/{charts.bundle_name()}"
    options["server.baseUrlPath"] = "/memory/"
    assert charts.bundle_url() == f"/memory/app/static/{charts.bundle_name()}"


def test_the_breakdown_table_in_markdown_escapes_names_and_formats_numbers():
    from dashboard.views import markdown_table

    table = markdown_table([{"component": "a | b [x](y)", "bytes": 1234567, "GiB": 0.0011},
                            {"component": "total", "bytes": 1234567890, "GiB": 1.14978}])
    assert table.splitlines() == [
        "| component | bytes | GiB |",
        "| :--- | ---: | ---: |",
        "| a \\| b \\[x\\]\\(y\\) | 1,234,567 | 0.001 |",
        "| **total** | **1,234,567,890** | **1.150** |",
    ]


def test_the_curve_legend_sits_below_the_plot_where_it_covers_no_marker():
    legend = _every_figure()["curve"].layout.legend
    assert legend.orientation == "h" and legend.y < 0 and legend.yanchor == "top"


def test_the_gpu_memory_label_sits_beside_the_bar_not_on_it():
    fig = _every_figure()["breakdown"]
    (note,) = fig.layout.annotations
    assert note.text.startswith("GPU memory")
    widths = {bar.width for bar in fig.data}
    assert len(widths) == 1 and widths.pop() == pytest.approx(0.5)
    # The one bar is centred on category 0: its right edge is at width / 2, and the label starts past it.
    assert note.xref == "x" and note.xanchor == "left" and note.x > fig.data[0].width / 2
    assert fig.layout.xaxis.range[1] > note.x + 0.5  # and the axis leaves room for the text


def test_the_breakdown_table_lists_the_charts_parts_and_the_download_keeps_the_engines_names():
    from calc.gpus import GPU_PRESETS
    from dashboard.figures import breakdown_figure
    from dashboard.state import Inputs
    from dashboard.views import breakdown_table, estimate_view, shown_table, shown_walk

    inputs = Inputs(model="MobileNetV2", image_size=224, batch_size=16, gpu="t4", unit="GB")
    shown = shown_walk(estimate_view(get_profile(make_spec("MobileNetV2")), inputs, GPU_PRESETS["t4"]), inputs)
    rows = shown_table(shown, inputs)
    names = [t.name for t in breakdown_figure(shown.components, shown.overhead_bytes, shown.capacity_bytes, 1e9,
                                              "GB").data]
    labels = [r["component"] for r in rows]
    assert labels == [*names[:-1], shown.peak_label, names[-1], "Needed on the GPU (peak + overhead)"]
    assert [r["GB"] for r in rows] == [round(r["bytes"] / 1e9, 3) for r in rows]
    assert rows[-1]["bytes"] == shown.needed_bytes == sum(r["bytes"] for r in rows[:-1]) - shown.peak_bytes
    english = breakdown_table(shown)
    assert [r["component"] for r in english] == [*shown.components, "predicted allocator peak",
                                                 "framework overhead (not in the peak)", "needed on the GPU"]


def test_the_dashboard_shows_no_emoji_and_names_its_icons_from_material():
    """Emoji show as boxes where no emoji font is installed; Streamlit's Material icons are a web font."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    emoji = re.compile("[\U0001F000-\U0001FFFF\u2600-\u27BF\u2B00-\u2BFF\uFE0F]")
    sources = [root / "app.py", *sorted((root / "pages").glob("*.py")), *sorted((root / "dashboard").glob("*.py")),
               *sorted((root / "dashboard" / "locales").glob("*.json")), root / "calc" / "caveats.py"]
    for path in sources:
        text = path.read_text(encoding="utf-8")
        assert not emoji.search(text), (path.name, emoji.findall(text))
        for icon in re.findall(r"""icon=(["'][^"']*["'])""", text):
            assert icon.strip("\"'").startswith(":material/"), (path.name, icon)


def test_without_a_plan_of_the_batch_a_compiled_plan_decides_the_verdict_where_it_can(monkeypatch):
    """Plans grow with the batch: a larger compiled batch that fits says a smaller one fits; a smaller
    one that does not fit says a larger one does not; between them the walk stands in without a verdict."""
    from calc.gpus import GPU_PRESETS
    from calc.xla import KnownPlans, PlanCurve, XlaPlan, plan_budget
    from calc.xla.curve import CompiledPoint
    from dashboard.state import Inputs
    from dashboard.views import estimate_view, verdict
    from dashboard.xla_view import shown_pending, xla_answer

    gpu, gib = GPU_PRESETS["t4"], 2**30

    def plan(peak):
        return XlaPlan(100, 200, 300, peak - 608, 8, 0, target="t4")

    plans = {8: plan(2 * gib), 64: plan(20 * gib)}  # 20 GiB: more than a T4
    known = KnownPlans(plans, PlanCurve.of([CompiledPoint(b, p.peak_bytes, 20 * gib) for b, p in plans.items()],
                                           16 * gib))  # temporaries past XLA's limit: no line
    profile = get_profile(make_spec("MobileNetV2"))
    import dashboard.xla_view

    real = dashboard.xla_view.walk_to_xla_range()
    monkeypatch.setattr(dashboard.xla_view, "walk_to_xla_range", lambda: (0.5, 10.0, 32))  # a range that decides nothing
    for batch, fits in ((4, True), (30, None), (100, False)):
        inputs = Inputs(model="MobileNetV2", batch_size=batch, gpu="t4")
        view = estimate_view(profile, inputs, gpu)
        shown = shown_pending(view, inputs, xla_answer(known, batch, plan_budget(gpu, 0.05)))
        assert not shown.final and shown.peak_bytes == view.breakdown.peak_bytes  # the walk's peak, named so
        assert "walk" in shown.peak_label and shown.max_batch == 8 and shown.searching and shown.below == 64
        if fits is None:
            assert shown.decided_by is None and verdict(shown, inputs).startswith("XLA's plan of this batch is not known")
        else:
            assert shown.decided_by == ((8, 2 * gib + gpu.overhead_bytes) if fits else (64, 20 * gib + gpu.overhead_bytes))
            assert shown.fits is fits and verdict(shown, inputs).startswith("Fits" if fits else "Does not fit")
    # With the range XLA's step took of the walk's peak on the measured steps, batch 30 is decided at once: even
    # the highest share of its walk's peak fits the card.
    monkeypatch.setattr(dashboard.xla_view, "walk_to_xla_range", lambda: real)
    inputs = Inputs(model="MobileNetV2", batch_size=30, gpu="t4")
    view = estimate_view(profile, inputs, gpu)
    shown = shown_pending(view, inputs, xla_answer(known, 30, plan_budget(gpu, 0.05)))
    assert shown.bound_by_walk and shown.decided_by == (30, round(view.breakdown.peak_bytes * real[1]) + gpu.overhead_bytes)
    assert shown.fits and verdict(shown, inputs).startswith(
        f"Fits: on the {real[2]} steps measured on an H100, TensorFlow's XLA step took at most {real[1]:.0%} of the "
        "graph-executor walk's peak")
    assert shown.usable_bytes == plan_budget(gpu, 0.05).usable_bytes  # one usable number: XLA's budget


def test_a_largest_batch_that_fits_only_by_recomputation_says_so_and_that_it_is_unmeasured():
    from calc.gpus import GPU_PRESETS
    from calc.xla import KnownPlans, PlanCurve, XlaPlan, plan_budget
    from calc.xla.curve import CompiledPoint
    from dashboard.state import Inputs
    from dashboard.xla_view import remat_note, xla_answer

    gib, mib, memory = 2**30, 2**20, 16 * 2**30
    gpu = GPU_PRESETS["t4"]

    def plan(batch, temp):
        return XlaPlan(100 * mib, 200 * mib, batch * mib, temp, 8, 0, target="t4")

    # On the line at 8 and 16 (80 MiB a sample); past XLA's limit the plans are held at about 11 GiB.
    plans = {8: plan(8, 8 * 80 * mib), 16: plan(16, 16 * 80 * mib), 200: plan(200, 11 * gib), 201: plan(201, 11 * gib)}
    plans[202] = plan(202, 13 * gib)  # recomputation no longer saves enough
    known = KnownPlans(plans, PlanCurve.of([CompiledPoint(b, p.peak_bytes, p.temporaries_bytes)
                                            for b, p in plans.items()], memory))
    answer = xla_answer(known, 16, plan_budget(gpu, 0.05))
    assert answer.max_batch.settled and answer.max_batch.batch == 201
    line = known.curve.line_peak(201)
    note = remat_note(answer, Inputs(batch_size=16, gpu="t4"))
    assert note is not None and f"{1 - plans[201].peak_bytes / line:.0%} under the straight line" in note
    assert "No training step has been measured" in note
    on_line = KnownPlans({b: plans[b] for b in (8, 16)}, PlanCurve.of(
        [CompiledPoint(b, plans[b].peak_bytes, plans[b].temporaries_bytes) for b in (8, 16)], memory))
    assert remat_note(xla_answer(on_line, 16, plan_budget(gpu, 0.05)), Inputs(batch_size=16, gpu="t4")) is None


def test_a_kerashub_lesson_gives_each_setup_s_weights_their_arithmetic():
    """The weight terms of dashboard.hub_lesson for LoRA with a new head, a frozen backbone and full
    training, on made-up plans: the arithmetic from the parameter counts, and what the plan holds
    beyond it named; the terms add up to the plan's weights."""
    from calc.hub import hub_models, lora_counts, make_hub_spec
    from calc.xla import XlaPlan
    from dashboard.hub_lesson import weight_terms
    from dashboard.state import Inputs

    def plan(weights, trainable):
        return XlaPlan(weights_bytes=weights, optimizer_state_bytes=0, input_batch_bytes=0, temporaries_bytes=0,
                       outputs_bytes=0, outside_step_bytes=0, target="t4", trainable_weights_bytes=trainable)

    bert = hub_models()["bert_base_en_uncased"]
    adapters, biases = lora_counts(bert, 8)
    head = 4 * (768 * 2 + 2)  # a new Dense(2) over the 768 features, float32
    lora = 4 * adapters + 4 * biases
    frozen = 4 * (bert.params - biases) + 8 * 13  # the rest, and 13 dropout seeds
    terms = weight_terms(plan(frozen + lora + head, lora + head), make_hub_spec("bert_base_en_uncased", 128, 8,
                                                                                "float32"),
                         Inputs(source="hub", hub="bert_base_en_uncased", lora_rank=8))
    assert [t.symbol for t in terms] == [r"W_{frozen}", r"W_{train}"]
    assert terms[0].nbytes + terms[1].nbytes == frozen + lora + head
    assert f"({bert.params:,} - {biases:,}) x 4 B" in terms[0].how and "dropout layer's seed" in terms[0].how
    assert f"{adapters:,} x 4 B + {biases:,} x 4 B" in terms[1].how and "the new head of 2 classes" in terms[1].how
    frozen_backbone = weight_terms(plan(4 * bert.params + head, head), make_hub_spec("bert_base_en_uncased", 128),
                                   Inputs(source="hub", hub="bert_base_en_uncased", hub_frozen=True))
    assert [t.nbytes for t in frozen_backbone] == [4 * bert.params, head]
    assert f"{bert.params:,} x 4 B" in frozen_backbone[0].how and "alone" in frozen_backbone[1].how
    gpt2 = hub_models()["gpt2_base_en"]
    full = weight_terms(plan(2 * gpt2.params + 8 * 37, 2 * gpt2.params), make_hub_spec("gpt2_base_en", 128),
                        Inputs(source="hub", hub="gpt2_base_en", lora_rank=0))
    assert len(full) == 1 and full[0].nbytes == 2 * gpt2.params + 8 * 37
    assert f"{gpt2.params:,} x 2 B" in full[0].how and "dropout layer's seed" in full[0].how
    classifier = weight_terms(plan(4 * bert.params + head + 8 * 13, 4 * bert.params + head),
                              make_hub_spec("bert_base_en_uncased", 128), Inputs(source="hub", hub="bert_base_en_uncased",
                                                                                   lora_rank=0))
    assert len(classifier) == 1 and "the new head of 2 classes and other non-trainable variables" in classifier[0].how


def test_compare_opens_on_the_sidebar_s_card_and_a_preset_of_another_family_beside_the_sidebar_s():
    from calc.hub import hub_models
    from dashboard.hub_compare import compared_hubs, hub_inputs
    from dashboard.state import Inputs
    from dashboard.views import compared_gpus

    assert compared_gpus(Inputs(gpu="l4")) == ["l4", "t4", "a10", "a100-40", "h100-80"]
    assert compared_gpus(Inputs(gpu="t4")) == ["t4", "a10", "a100-40", "h100-80"]
    assert compared_gpus(Inputs(gpu="custom")) == ["t4", "a10", "a100-40", "h100-80"]
    assert compared_gpus(Inputs(gpu="l4", gpus="rtx-4090")) == ["rtx-4090"]
    # Gemma 2 2B (2.61 B): the causal LMs of other families nearest it are Qwen 2.5 3B (3.09 B) and
    # Llama 3.2 3B (3.61 B); Qwen is the nearer. BERT base: RoBERTa base, not BERT large.
    assert compared_hubs(Inputs(hub="gemma2_2b_en")) == ["gemma2_2b_en", "qwen2.5_3b_en"]
    assert compared_hubs(Inputs(hub="bert_base_en_uncased")) == ["bert_base_en_uncased", "roberta_base_en"]
    assert compared_hubs(Inputs(hub="gemma2_2b_en", hubs="gpt2_base_en")) == ["gpt2_base_en"]
    # The sidebar's 4,096 tokens: GPT-2 has 1,024 learned positions, Gemma takes them all.
    assert hub_inputs(Inputs(seq_len=4096), "gpt2_base_en").seq_len == 1024
    assert hub_inputs(Inputs(seq_len=4096), "gemma2_2b_en").seq_len == 4096
    assert hub_models()["gpt2_base_en"].max_sequence == 1024


def test_compare_says_none_where_the_estimator_does():
    """A card where not even one sample's plan fits: Compare's cells (catalogue and KerasHub) read "none", as
    the Estimator's metric does; a settled batch reads as a number."""
    from calc.gpus import GPU_PRESETS
    from calc.xla import KnownPlans, PlanCurve, XlaPlan, plan_budget
    from calc.xla.curve import CompiledPoint
    from dashboard.hub_compare import largest_cell
    from dashboard.xla_view import CompareCell, largest_batch_cell, xla_answer

    gpu = GPU_PRESETS["t4"]
    huge = XlaPlan(400, 500, 100, 2 * gpu.memory_bytes, 8, 0, target="t4")
    known = KnownPlans({1: huge}, PlanCurve.of([CompiledPoint(1, huge.peak_bytes, huge.temporaries_bytes)],
                                               gpu.memory_bytes))
    answer = xla_answer(known, 1, plan_budget(gpu, 0.05))
    assert answer.max_batch.settled and answer.max_batch.batch == 0
    assert largest_batch_cell(answer, 0, 1) == "none"
    assert largest_cell(CompareCell(answer), 1) == "none"
    small = XlaPlan(400, 500, 100, 1000, 8, 0, target="t4")
    fits = KnownPlans({1: small, 2: huge}, PlanCurve.of([CompiledPoint(1, small.peak_bytes, 1000),
                                                         CompiledPoint(2, huge.peak_bytes, huge.temporaries_bytes)],
                                                        gpu.memory_bytes))
    assert largest_batch_cell(xla_answer(fits, 1, plan_budget(gpu, 0.05)), 0, 2) == "2"  # per device 1, two GPUs
