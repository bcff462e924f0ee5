"""Full training: two ways of letting the allocator simulation raise the walk (a study, stop 15).

    python benchmarks/full_training_floors.py [calc/data/validation_cpu.json ...]

For every full-training case of each data file (estimated with the file's device) this
prints the engine's error and two variants, then a summary of each:

- ``floor``: the walk floored by the smaller of the two simulated pool histories' peaks
  (``calc.estimate._allocator_peaks``), as frozen steps take the larger;
- ``resident``: the variables and slots counted as the simulated pool holds them (the
  drawn-kernels history, ``calc.estimate._resident_state``) where that is more than the
  walk counts.

Neither is the engine (docs/MEASUREMENTS.md, stop 15: the floor did not help a holdout
predicted both ways and made the dashboard's curve ~0.9 s slower per configuration; the
resident count helped own models and not the catalogue set).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from calc import estimate as E  # noqa: E402
from calc.allocator import BFC  # noqa: E402
from calc.profiles import get_profile  # noqa: E402
from calc.validation import CPU_DATA, config_from_dict, load_measurements, measured_device, spec_from_dict  # noqa: E402
from full_training_variants import _summary  # noqa: E402  (errors in percent)


def study(path: Path) -> None:
    data = load_measurements(path)
    device = measured_device(data)
    errors: dict[str, list[float]] = {"engine": [], "floor": [], "resident": []}
    print(f"{path.name}: full-training cases, error of the engine / floor / resident")
    for case in data["cases"]:
        if "peak_bytes" not in case:
            continue
        spec, config = spec_from_dict(case["spec"]), replace(config_from_dict(case["config"]), device=device)
        if config.train_mode.value != "all":
            continue
        profile, measured = get_profile(spec), case["peak_bytes"]
        b = E.estimate_memory(profile, config)
        base = E._without_batch(config)
        floor = max(b.peak_bytes, min(E._allocator_peaks(profile, base, config.per_replica_batch)))
        walk_resident = b.weights_bytes + b.optimizer_state_bytes
        pool_resident = BFC.restored(E._resident_state(profile, base, True)).in_use
        resident = b.peak_bytes - walk_resident + max(walk_resident, pool_resident)
        for key, value in (("engine", b.peak_bytes), ("floor", floor), ("resident", resident)):
            errors[key].append(value / measured - 1)
        print(f"  {case['case'][:66]:66s} {100 * errors['engine'][-1]:+6.1f} {100 * errors['floor'][-1]:+6.1f} "
              f"{100 * errors['resident'][-1]:+6.1f} %", flush=True)
    for key, values in errors.items():
        if values:
            print(_summary(key, [100 * e for e in values]))


if __name__ == "__main__":
    for arg in sys.argv[1:] or [str(CPU_DATA)]:
        study(Path(arg))
