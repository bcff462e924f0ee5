"""The mixed_float16 validation cases again, on a CPU with AVX512-FP16 (stop 17).

    python benchmarks/measure_fp16_slice.py [--max-seconds 60] [--jobs 2] [--repeats 3]

Every committed mixed_float16 case of ``calc/data/validation_cpu.json`` was measured on
CPUs without AVX512-FP16, where TensorFlow's own float16 kernels run with the buffers
``calc/kernels.py`` counts. On a CPU with it oneDNN runs float16 itself
(``calc.types.Device.CPU_FP16``). This measures the cases whose committed three runs
took at most ``--max-seconds`` again, here, into ``calc/data/validation_cpu_fp16.json``
(each case records ``kernels``), so that ``python -m calc validate --data
calc/data/validation_cpu_fp16.json`` checks the engine's ``cpu_fp16`` kernels. Refuses
to run on a CPU without the flag.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from threading import Lock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calc.measure import MeasurementError, local_cpu_device, measure_training_step  # noqa: E402
from calc.types import Device, Precision  # noqa: E402
from calc.validation import CPU_DATA, VALIDATION_CASES, case_id, load_measurements, save_measurement  # noqa: E402

FP16_DATA = Path(CPU_DATA).with_name("validation_cpu_fp16.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-seconds", type=float, default=60.0, help="committed time of three runs, at most")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if local_cpu_device() is not Device.CPU_FP16:
        raise SystemExit("this CPU has no AVX512-FP16: its float16 steps are the committed ones already")
    seconds = {c["case"]: c.get("seconds", 0.0) for c in load_measurements(CPU_DATA)["cases"] if "peak_bytes" in c}
    done = {c["case"] for c in load_measurements(FP16_DATA)["cases"]}
    todo = [(s, c) for s, c in VALIDATION_CASES
            if c.precision is Precision.MIXED_FLOAT16 and seconds.get(case_id(s, c), 1e9) <= args.max_seconds
            and case_id(s, c) not in done]
    print(f"{len(todo)} cases to measure", flush=True)
    lock = Lock()

    def one(spec, config):
        m = measure_training_step(spec, config, repeats=args.repeats)
        with lock:
            save_measurement(FP16_DATA, spec, config, m)
        return case_id(spec, config), m

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for f in as_completed([pool.submit(one, s, c) for s, c in todo]):
            try:
                cid, m = f.result()
                print(f"{cid:70s} {m.peak_bytes / 2**20:9.1f} MiB spread {m.spread * 100:4.1f}% {m.seconds:6.1f}s "
                      f"({m.kernels})", flush=True)
            except MeasurementError as exc:
                print(f"FAILED {exc}", flush=True)


if __name__ == "__main__":
    main()
