"""Pure view helpers of the dashboard (no Streamlit run)."""

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
def test_breakdown_shows_the_allocator_part_only_when_simulated():
    from calc.estimate import estimate_memory
    from dashboard.figures import LABELS, breakdown_figure

    frozen = get_profile(make_spec("MobileNetV2", 224, include_top=False))
    config = TrainingConfig(batch_size=28, optimizer="adamw", train_mode="frozen_backbone")
    parts = estimate_memory(frozen, config).components()
    assert parts["allocator"] > 0  # the measured jump at batch 28 (docs/notes/allocator.md)
    names = [t.name for t in breakdown_figure(parts, 0, 16 << 30, 2**30, "GiB").data]
    assert LABELS["allocator"] in names and len(names) == len(parts) + 1
    full = {**parts, "allocator": 0}
    assert LABELS["allocator"] not in [t.name for t in breakdown_figure(full, 0, 16 << 30, 2**30, "GiB").data]


def test_the_plan_decides_the_verdict_with_the_overhead_and_the_margin():
    from calc.gpus import GPU_PRESETS
    from calc.xla import XlaPlan
    from dashboard.state import Inputs
    from dashboard.views import estimate_view, shown_plan, verdict

    gpu = GPU_PRESETS["t4"]
    inputs = Inputs(model="ResNet50", image_size=224, batch_size=32, gpu="t4", remat="full")
    view = estimate_view(get_profile(make_spec("ResNet50")), inputs, gpu)
    usable = int(gpu.memory_bytes * (1 - inputs.margin / 100))
    verdicts = []
    for temporaries in (usable - gpu.overhead_bytes - 1008, usable - gpu.overhead_bytes - 1007):  # needed: usable, +1
        plan = XlaPlan(400, 500, 100, temporaries, 8, 0, target="t4", remat="full")
        shown = shown_plan(view, inputs, plan, plan_peaks={32: plan.peak_bytes}, max_batch=None,
                           base_peak_bytes=plan.peak_bytes + 7)
        assert shown.needed_bytes == 400 + 500 + 100 + temporaries + 8 + gpu.overhead_bytes
        assert shown.fits == (shown.needed_bytes <= usable)
        assert verdict(shown, inputs).startswith("Fits" if shown.fits else "Does not fit")
        assert sum(shown.components.values()) == shown.peak_bytes and shown.remat_saving_bytes == 7
        assert shown.max_batch == view.max_batch and "walk" in shown.max_batch_label  # no search: the walk's
        assert shown.plan_points == ((32, plan.peak_bytes + gpu.overhead_bytes),)
        verdicts.append(shown.fits)
    assert verdicts == [True, False]
