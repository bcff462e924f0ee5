"""Full training: the walk against the allocator simulation's floors (a study, stops 15 and 17).

    python benchmarks/full_training_floors.py [calc/data/validation_cpu.json ...]

For every full-training case of each data file (estimated with the file's device) this
prints the error of three predictions, then a summary of each:

- ``walk``: the step's walk alone (the engine until stop 16);
- ``two``: the walk floored by the smaller of the two simulated pool histories'
  peaks (``calc.estimate._history_peak``, drawn kernels and one value per variable:
  stop 15's floor, not adopted then);
- ``engine``: the engine, which floors by the smallest of those two and the step
  replayed in fresh regions past the variables (``calc.estimate._fresh_peak``).

For the CPU set it also summarises the full-training cases of holdouts 13-15, drawn at
random and measured before stop 17, of the sixteenth, drawn after the floor went in, and of
the seventeenth and eighteenth (stop 18) (cases -84..-42, -42..-28, -28..-14 and the last 14 of
``VALIDATION_CASES``).
Only rows where the three differ by more than a point are printed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from calc import estimate as E  # noqa: E402
from calc.profiles import get_profile  # noqa: E402
from calc.validation import CPU_DATA, VALIDATION_CASES, case_id, config_from_dict, load_measurements, measured_device, spec_from_dict  # noqa: E402
from full_training_variants import _summary  # noqa: E402  (errors in percent)

HOLDOUTS = {"holdouts 13-15": slice(-154, -112), "holdout 16": slice(-112, -98), "holdout 17": slice(-98, -84),
            "holdout 18": slice(-84, -70), "holdout 19": slice(-70, -56), "holdout 20": slice(-56, -42),
            "holdout 21": slice(-42, -28), "holdout 22": slice(-28, -14), "holdout 23": slice(-14, None)}


def study(path: Path) -> None:
    data = load_measurements(path)
    cpu = path.resolve() == Path(CPU_DATA).resolve()
    groups = {name: {case_id(s, c) for s, c in VALIDATION_CASES[part]} for name, part in HOLDOUTS.items()} if cpu else {}
    errors: dict[str, list[float]] = {"walk": [], "two": [], "engine": []}
    holdout = {name: {key: [] for key in errors} for name in groups}
    print(f"{path.name}: full-training cases, error of the walk / two histories / engine")
    for case in data["cases"]:
        if "peak_bytes" not in case:
            continue
        spec, config = spec_from_dict(case["spec"]), replace(config_from_dict(case["config"]), device=measured_device(data, case))
        if config.train_mode.value != "all":
            continue
        profile, measured = get_profile(spec), case["peak_bytes"]
        b = E.estimate_memory(profile, config)
        walk = b.peak_bytes - b.allocator_bytes
        base, batch = E._without_batch(config), config.per_replica_batch
        two = max(walk, min(E._allocator_peaks(profile, base, batch)))
        row = {"walk": walk, "two": two, "engine": b.peak_bytes}
        for key, value in row.items():
            errors[key].append(100 * (value / measured - 1))
            for name, ids in groups.items():
                if case["case"] in ids:
                    holdout[name][key].append(errors[key][-1])
        if max(row.values()) - min(row.values()) > 0.01 * measured:
            print(f"  {case['case'][:66]:66s} " + " ".join(f"{errors[k][-1]:+6.1f}" for k in errors) + " %", flush=True)
    for key, values in errors.items():
        if values:
            print(_summary(key, values))
    for name, per_key in holdout.items():
        if per_key["walk"]:
            print(f"  full training in {name} ({len(per_key['walk'])} cases):")
            for key, values in per_key.items():
                print(_summary(key, values))


if __name__ == "__main__":
    for arg in sys.argv[1:] or [str(CPU_DATA)]:
        study(Path(arg))
