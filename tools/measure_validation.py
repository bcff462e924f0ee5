"""Measures the planned validation cases that are not in their data file yet.

    python tools/measure_validation.py [--jobs 2] [--repeats 3] [--only SUBSTRING] [--redo] [--custom | --fp16-slice SECONDS]

The cases to measure are those of ``validation/planned.json`` (drawn and predicted by
``tools/sample_holdout.py`` and committed before measuring) for the set, and with
``--redo`` the set's measured cases again. Each case runs ``repeats`` times, each in a
fresh single-threaded process, and the median peak is stored with every run's peak in
``calc/data/validation_cpu.json`` (``--custom``: the own models, saved files, in
``validation_custom_cpu.json``).

``--fp16-slice SECONDS``: the committed mixed_float16 cases whose three runs
took at most SECONDS, again, into ``validation_cpu_fp16.json``, on a CPU with
AVX512-FP16 only. Every committed mixed_float16 case ran on CPUs without it, where
TensorFlow's own float16 kernels hold the buffers ``calc/facts/kernels.py`` counts; with it
oneDNN runs float16 (``calc.types.Device.CPU_FP16``), and each case records which
kernels ran, so that ``python -m calc validate --data calc/data/validation_cpu_fp16.json``
estimates it for them.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor, as_completed
from threading import Lock

from calc.types import Device, Precision
from calc.validation import CPU_DATA, CUSTOM_DATA, FP16_DATA, case_id, cases, load_measurements, save_measurement
from calc.validation.planned import planned_cases
from calc.workers.measure import MeasurementError, local_cpu_device, measure_training_step


def _fp16_slice(max_seconds: float) -> list:
    if local_cpu_device() is not Device.CPU_FP16:
        raise SystemExit("this CPU has no AVX512-FP16: its float16 steps are the committed ones already")
    seconds = {c["case"]: c.get("seconds", 0.0) for c in load_measurements(CPU_DATA)["cases"] if "peak_bytes" in c}
    return [(s, c) for s, c in cases(CPU_DATA)
            if c.precision is Precision.MIXED_FLOAT16 and seconds.get(case_id(s, c), float("inf")) <= max_seconds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="")
    parser.add_argument("--redo", action="store_true", help="measure cases already in the file again")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--custom", action="store_true", help="the own-model cases (saved files) instead")
    which.add_argument("--fp16-slice", type=float, metavar="SECONDS",
                       help="the quick mixed_float16 cases again, on a CPU with AVX512-FP16")
    args = parser.parse_args()
    if args.fp16_slice is not None:
        wanted, data = _fp16_slice(args.fp16_slice), FP16_DATA
    else:
        data = CUSTOM_DATA if args.custom else CPU_DATA
        wanted = planned_cases("custom" if args.custom else "cpu") + (cases(data) if args.redo else [])
    done = {c["case"] for c in load_measurements(data)["cases"]}
    todo = [
        (s, c) for s, c in wanted
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
                print(f"{cid:70s} {m.peak_bytes / 2**20:9.1f} MiB spread {m.spread * 100:4.1f}% {m.seconds:6.1f}s "
                      f"({m.kernels} kernels)", flush=True)
            except MeasurementError as exc:
                print(f"FAILED {exc}", flush=True)


if __name__ == "__main__":
    main()
