"""Timings of the engine: profile (one Keras build), plan, one estimate, the curve, max batch.

    python benchmarks/bench_engine.py [ResNet50 EfficientNetB0 ...]

Prints one line per model trained whole, then the same models as frozen backbones.
Every estimate replays the step through the allocator simulation (calc.engine.allocator,
``calc.engine.floors.floored``) at its batch; the walk's own curve over every batch 1..4096
is vectorized. Columns: the walk with its allocation events, one estimate from warm
caches, the walk alone at every batch 1..4096, the dashboard's curve (~130 batches over
1..4096, each an estimate) and the largest batch on an 80 GiB card from cold simulation
caches. Timings are wall-clock on this machine, median of runs.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import calc.estimate as engine
from calc.engine import floors, prune, training
from calc.engine.plan import cached_plan
from calc.catalogue import make_spec
from calc.estimate import estimate_memory, max_batch_size, memory_curve, plan_step
from calc.types import TrainingConfig
from dashboard.views import curve_batches

# A fresh profile cache unless one is given (calc reads it at the first lookup).
os.environ.setdefault("CALC_CACHE_DIR", tempfile.mkdtemp(prefix="calc-bench-"))


def timed(fn, runs=5):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(names):
    import tensorflow  # noqa: F401  (import cost is reported apart from the build)

    from calc.keras.build import build_model, profile_catalogue_model

    print(f"{'model':18s} {'layers':>6s} {'build':>8s} {'profile':>8s} {'plan':>8s} {'estimate':>9s} "
          f"{'walk 1..4096':>13s} {'curve ~130':>11s} {'max-batch':>10s}")
    for name in names:
        spec = make_spec(name)
        t_build = timed(lambda: build_model(spec), runs=1)
        t0 = time.perf_counter()
        profile = profile_catalogue_model(spec)
        t_profile = time.perf_counter() - t0
        config = TrainingConfig(batch_size=32, optimizer="adam")
        t0 = time.perf_counter()
        plan_step(profile, config)
        floors.allocator_events(profile, training.without_batch(config))
        t_plan = time.perf_counter() - t0
        t_est = timed(lambda: estimate_memory(profile, config), runs=200)
        step = plan_step(profile, config)
        t_walk = timed(lambda: prune.totals(step.moments, range(1, 4097)).max(axis=0), runs=5)
        t_curve = cold(lambda: memory_curve(profile, config, curve_batches(4096, 1, (32,))))
        t_max = cold(lambda: max_batch_size(profile, config, 80 << 30))
        print(f"{name:18s} {len(profile.layers):6d} {t_build:7.2f}s {t_profile:7.2f}s {t_plan * 1e3:6.1f}ms "
              f"{t_est * 1e6:7.1f}us {t_walk * 1e3:11.1f}ms {t_curve * 1e3:9.1f}ms {t_max * 1e3:8.1f}ms", flush=True)


def cold(fn, keep_events=True):
    """Median time of ``fn`` with the simulation's per-batch caches (and the events) cleared."""
    def run():
        floors.history_peak.cache_clear()
        floors.fresh_peak.cache_clear()
        if not keep_events:
            cached_plan.cache_clear()
            floors.allocator_events.cache_clear()
        fn()
    return timed(run, runs=5)


def frozen(names):
    from calc.profiles import get_profile

    print(f"\n{'frozen backbone':18s} {'events':>8s} {'replay':>8s} {'estimate':>9s} {'curve ~130':>11s} {'max-batch':>10s}")
    for name in names:
        profile = get_profile(make_spec(name, include_top=False))
        config = TrainingConfig(batch_size=32, optimizer="adam", train_mode="frozen_backbone")
        t_events = cold(lambda: engine.allocator_peak(profile, config), keep_events=False)
        t_replay = cold(lambda: engine.allocator_peak(profile, config))
        t_est = timed(lambda: estimate_memory(profile, config), runs=200)
        batches = curve_batches(4096, 1, (32,))
        t_curve = cold(lambda: memory_curve(profile, config, batches))
        t_max = cold(lambda: max_batch_size(profile, config, 80 << 30))
        print(f"{name:18s} {t_events * 1e3:6.1f}ms {t_replay * 1e3:6.2f}ms {t_est * 1e6:7.1f}us "
              f"{t_curve * 1e3:9.1f}ms {t_max * 1e3:8.1f}ms  ({len(batches)} batches)", flush=True)


if __name__ == "__main__":
    models = sys.argv[1:] or ["ResNet50", "EfficientNetB0", "ConvNeXtTiny"]
    main(models)
    frozen(models + ["DenseNet201", "NASNetLarge"])
