"""The validation set with a smaller chunk allowance for optimizers that only assign.

    python benchmarks/fragmentation_by_optimizer.py [FRACTION ...]

The engine adds ``calc.estimate.FRAGMENTATION`` (8 %) to every tracked request. Stop 9's
traces found whole chunks adding 0.6-2.5 % to the steps of SGD momentum and RMSprop,
against 4.5-13.7 % with Adam, whose first step copies its slots among its activations
(``docs/BFC_SIM.md``). This prints the whole set's figures when the full-training cases
of the optimizers whose updates assign (no ``assign_add`` on a slot: SGD, RMSprop, Lion,
Adadelta, Ftrl, Adafactor) get each FRACTION instead (default: 0.08 0.06 0.05 0.04);
every other case keeps 8 %. A study, not the engine: ``docs/MEASUREMENTS.md`` (stop 10).
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calc import estimate  # noqa: E402
from calc.profiles import get_profile  # noqa: E402
from calc.validation import VALIDATION_CASES, case_id, load_measurements  # noqa: E402

ASSIGN_ONLY = {"sgd", "rmsprop", "lion", "adadelta", "ftrl", "adafactor"}


def _clear_caches() -> None:
    for value in vars(estimate).values():
        if hasattr(value, "cache_clear"):
            value.cache_clear()


def main(fractions: list[float]) -> None:
    measured = {c["case"]: c["peak_bytes"] for c in load_measurements()["cases"]}
    cases = [(s, c, measured[case_id(s, c)]) for s, c in VALIDATION_CASES if case_id(s, c) in measured]
    in_group = [c.optimizer.value in ASSIGN_ONLY and c.train_mode.value == "all" for _, c, _ in cases]
    default = estimate.FRAGMENTATION
    try:
        for fraction in fractions:
            errors = []
            for (spec, config, peak), grouped in zip(cases, in_group):
                estimate.FRAGMENTATION = fraction if grouped else default
                _clear_caches()
                errors.append((estimate.estimate_memory(get_profile(spec), config).peak_bytes - peak) / peak * 100)
            group = [e for e, g in zip(errors, in_group) if g]
            a = sorted(map(abs, errors))
            print(f"{fraction:.2f}: {len(a)} cases median |error| {statistics.median(a):.2f} %, "
                  f"p90 {a[round(0.9 * (len(a) - 1))]:.2f} %, beyond 10 %: {sum(x > 10 for x in a)}, "
                  f"under {sum(e < 0 for e in errors)} (more than 5 %: {sum(e < -5 for e in errors)}) | "
                  f"the {len(group)} assigning cases: median {statistics.median(group):+.2f} %, "
                  f"under {sum(e < 0 for e in group)}, worst {min(group):+.1f} %", flush=True)
    finally:
        estimate.FRAGMENTATION = default
        _clear_caches()


if __name__ == "__main__":
    main([float(a) for a in sys.argv[1:]] or [0.08, 0.06, 0.05, 0.04])
