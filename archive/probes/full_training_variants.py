"""Full training: the engine's chunk allowance against the allocator simulation (a study).

    python benchmarks/full_training_variants.py [SUBSTRING]

For each measured full-training validation case this computes the engine's prediction
(the walk, every tracked request plus ``calc.estimate.FRAGMENTATION``), the walk with no
allowance ("exact": the requested bytes), the BFC simulation of the walk's events as the
engine runs it for frozen steps, and the simulation after a simulated first step with the
optimizer's slot copies (``benchmarks/warmup_sim.py``). It prints each case's errors,
then, for every case and for those with no caveat (``calc.estimate.spread_caveats``), the
summary of each predictor and of ``max(exact + a share of the allowance, simulation)``.
Profiler traces (``benchmarks/trace_step.py``) put the real chunk overhead of a step at
1-14 % of its requests; this asks whether the simulation predicts it case by case.
A study, not the engine: ``docs/MEASUREMENTS.md`` (stop 11).
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from warmup_sim import warmed_peak  # noqa: E402

from calc import estimate as E  # noqa: E402
from calc.profiles import get_profile  # noqa: E402
from calc.validation import VALIDATION_CASES, case_id, load_measurements  # noqa: E402


def _clear_caches() -> None:
    for value in vars(E).values():
        if hasattr(value, "cache_clear"):
            value.cache_clear()


def _summary(label: str, errors: list[float]) -> str:
    a = sorted(map(abs, errors))
    return (f"  {label:30s} median |error| {statistics.median(a):5.2f} %, p90 {a[round(0.9 * (len(a) - 1))]:5.1f} %, "
            f"max {a[-1]:5.1f} %, beyond 10 %: {sum(x > 10 for x in a):2d}, under {sum(e < 0 for e in errors):2d} "
            f"(more than 5 %: {sum(e < -5 for e in errors):2d}, worst {min(errors):+.1f} %)")


def main(substring: str) -> None:
    measured = {c["case"]: c["peak_bytes"] for c in load_measurements()["cases"]}
    cases = [(s, c) for s, c in VALIDATION_CASES
             if c.train_mode.value == "all" and case_id(s, c) in measured and substring in case_id(s, c)]
    rows = []
    for spec, config in cases:
        profile = get_profile(spec)
        rows.append({
            "case": case_id(spec, config), "measured": measured[case_id(spec, config)],
            "engine": E.estimate_memory(profile, config).peak_bytes,
            "sim": E._allocator_peak(profile, E._without_batch(config), config.per_replica_batch),
            "warm": warmed_peak(profile, config, config.per_replica_batch),
            "caveat": bool(E.spread_caveats(profile, config)),
        })
    default = E.FRAGMENTATION
    try:
        E.FRAGMENTATION = 0.0
        _clear_caches()
        for row, (spec, config) in zip(rows, cases):
            row["exact"] = E.estimate_memory(get_profile(spec), config).peak_bytes
    finally:
        E.FRAGMENTATION = default
        _clear_caches()

    def err(row, value):
        return (value - row["measured"]) / row["measured"] * 100

    for row in rows:
        print(f"{row['case']:74s} engine {err(row, row['engine']):+6.1f}  exact {err(row, row['exact']):+6.1f}  "
              f"sim {err(row, row['sim']):+6.1f}  warmed {err(row, row['warm']):+6.1f}{'  (caveat)' if row['caveat'] else ''}")

    def allowance(row, share):  # exact plus ``share`` of the engine's allowance
        return row["exact"] + (row["engine"] - row["exact"]) * share / default

    predictors = {
        f"engine (exact + {default:.0%})": lambda r: r["engine"],
        "exact": lambda r: r["exact"],
        "simulation": lambda r: r["sim"],
        "warmed simulation": lambda r: r["warm"],
        **{f"exact + {s:.0%}": (lambda r, s=s: allowance(r, s)) for s in (0.04, 0.05)},
        **{f"max(exact + {s:.0%}, simulation)": (lambda r, s=s: max(allowance(r, s), r["sim"])) for s in (0.0, 0.03, 0.04)},
    }
    for group, selected in (("every case", rows), ("no caveat", [r for r in rows if not r["caveat"]])):
        if not selected:
            continue
        print(f"{group}: {len(selected)} cases")
        for label, predict in predictors.items():
            print(_summary(label, [err(r, predict(r)) for r in selected]))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
