"""Splits measured vs predicted peaks into resident-before-step and step parts.

    python benchmarks/probe_split.py SUBSTRING [SUBSTRING ...] [--repeats N]

For each committed validation case whose id contains one of the substrings, runs the
measurement protocol (``calc.measure.measure_once``: a fresh process, 1x1 threads) and
prints, in MiB: the measured peak, what was resident just before the measured step
(weights, optimizer slots, the batch held by Keras, fragmentation) and the step's
increment, against the engine's weights + optimizer slots and its prediction.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calc.estimate import estimate_memory  # noqa: E402
from calc.measure import measure_once  # noqa: E402
from calc.profiles import get_profile  # noqa: E402
from calc.requests import config_from_dict, spec_from_dict  # noqa: E402
from calc.validation import load_measurements  # noqa: E402

MIB = 2 ** 20


def main(argv: list[str]) -> None:
    repeats = 1
    if "--repeats" in argv:
        k = argv.index("--repeats")
        repeats = int(argv[k + 1])
        argv = argv[:k] + argv[k + 2:]
    for case in load_measurements()["cases"]:
        if not any(s in case["case"] for s in argv):
            continue
        spec, config = spec_from_dict(case["spec"]), config_from_dict(case["config"])
        b = estimate_memory(get_profile(spec), config)
        comps = b.components()
        pred_res = comps.get("weights", 0) + comps.get("optimizer_state", 0)
        for _ in range(repeats):
            r = measure_once(spec, config)
            peak, before = r["peak_bytes"], r["current_before_bytes"]
            print(json.dumps({
                "case": case["case"], "peak": round(peak / MIB, 1), "resident": round(before / MIB, 1),
                "step": round((peak - before) / MIB, 1), "pred_peak": round(b.peak_bytes / MIB, 1),
                "pred_resident": round(pred_res / MIB, 1), "pred_step": round((b.peak_bytes - pred_res) / MIB, 1),
                "pred_phase": b.peak_phase,
                "pred_components": {k: round(v / MIB, 1) for k, v in comps.items()},
            }), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
