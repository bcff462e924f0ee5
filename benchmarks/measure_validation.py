"""Measures the validation cases that are not in the data file yet.

    python benchmarks/measure_validation.py [--jobs 2] [--repeats 3] [--only SUBSTRING] [--custom]

Each case runs ``repeats`` times, each in a fresh single-threaded process, and the
median peak is stored with every run's peak in ``calc/data/validation_cpu.json``
(``--custom``: the own-model cases, ``CUSTOM_CASES``, in ``validation_custom_cpu.json``).
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from threading import Lock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calc.measure import MeasurementError, measure_training_step  # noqa: E402
from calc.validation import (CPU_DATA, CUSTOM_CASES, CUSTOM_DATA, VALIDATION_CASES, case_id,  # noqa: E402
                             load_measurements, save_measurement)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="")
    parser.add_argument("--redo", action="store_true", help="measure cases already in the file again")
    parser.add_argument("--custom", action="store_true", help="the own-model cases (saved files) instead")
    args = parser.parse_args()
    cases, data = (CUSTOM_CASES, CUSTOM_DATA) if args.custom else (VALIDATION_CASES, CPU_DATA)
    done = {c["case"] for c in load_measurements(data)["cases"]}
    todo = [
        (s, c) for s, c in cases
        if args.only in case_id(s, c) and (args.redo or case_id(s, c) not in done)
    ]
    print(f"{len(todo)} cases to measure", flush=True)
    lock = Lock()

    def one(spec, config):
        m = measure_training_step(spec, config, repeats=args.repeats)
        with lock:
            save_measurement(data, spec, config, m)
        return case_id(spec, config), m

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(one, s, c) for s, c in todo]
        for f in as_completed(futures):
            try:
                cid, m = f.result()
                print(f"{cid:70s} {m.peak_bytes / 2**20:9.1f} MiB spread {m.spread * 100:4.1f}% {m.seconds:6.1f}s", flush=True)
            except MeasurementError as exc:
                print(f"FAILED {exc}", flush=True)


if __name__ == "__main__":
    main()
