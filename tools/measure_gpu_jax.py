"""Keras 3 training steps on a GPU under the JAX backend (XLA), against the engine.

    PYTHONPATH=. python tools/measure_gpu_jax.py measure OUT.json [--no-autotune] [SUBSTRING ...]   # on a GPU machine with jax and keras
    PYTHONPATH=. python tools/measure_gpu_jax.py limit OUT.json SEED [DEADLINE_S]   # the steps at the card's limit
    python tools/measure_gpu_jax.py compare calc/data/gpu_jax_h100.json   # here: the engine's error on them

The engine predicts TensorFlow's allocator on its executor; no GPU machine lent to this
project has TensorFlow (only PyTorch and JAX, CUDA 13, and nothing can be installed
beyond 64 MiB of carried wheels), so this is the closest GPU slice it can measure: the
same Keras models, optimizers and precisions, run by Keras' JAX backend, which compiles
the whole step with XLA. Each case runs in a fresh process (``KERAS_BACKEND=jax``,
``XLA_PYTHON_CLIENT_PREALLOCATE=false``): build, compile, two ``train_on_batch`` steps,
then JAX's allocator statistics for the GPU (``peak_bytes_in_use`` over the process,
``bytes_in_use`` before the second step, and the peak after the build). JAX has no
reset of the peak, so the peak also covers the build and XLA's compilation, whose
autotuner allocates convolution workspaces; ``--no-autotune`` turns that off
(``--xla_gpu_autotune_level=0``). The project is not installed on the GPU machine:
``PYTHONPATH=.`` from the repository root makes ``calc`` importable there, for this
script and its children.

``limit`` measures set ``gpu_xla_limit`` of ``validation/planned.json`` (``tools/near_limit.py``:
each model's largest batch whose plan fits the card, and the batch above it, predicted and
committed first; SEED names the card's draw, 3701 for an H100, 3702 for an H200), one step at
a time, each model's fitting batch first, with JAX's allocator allowed 97 % of the card
(``XLA_PYTHON_CLIENT_MEM_FRACTION``; Keras on JAX compiles the step for the allocator's
limit). It saves each case as it ends and starts none after DEADLINE_S (default 480); a
step that does not fit ends in an out-of-memory error, recorded with the case. The
machines hold JAX, so this needs no TensorFlow chunks: one call, nothing carried.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

MIB = 1 << 20

# Validation cases (calc/validation.py ids) that also make a GPU slice: full training,
# frozen backbones, the three precisions, small and large models.
GPU_CASES = (
    "ResNet50-224x224x3-top1000 b32 adam float32",
    "ResNet50-224x224x3-top1000 b16 adam float32",
    "MobileNetV2-224x224x3-top1000 b32 adam float32",
    "EfficientNetB0-224x224x3-top1000 b32 adam float32",
    "EfficientNetB0-224x224x3-top1000 b16 adam mixed_bfloat16",
    "DenseNet121-224x224x3-top1000 b16 adam float32",
    "VGG16-224x224x3-top1000 b8 sgd float32",
    "ConvNeXtTiny-224x224x3-top1000 b8 adamw float32",
    "InceptionV3-299x299x3-top1000 b8 adam float32",
    "ResNet50-128x128x3-top1000 b8 adamw mixed_bfloat16",
    "MobileNetV2-160x160x3-top1000 b64 sgd mixed_float16",
    "ResNet50-224x224x3-head1000 b16 adam float32 frozen_backbone",
    "MobileNetV2-224x224x3-head1000 b16 adamw float32 frozen_backbone",
    "Xception-224x224x3-head1000 b16 adam float32 frozen_backbone",
)

CHILD = r'''
import json, os, sys
import numpy as np
import jax, keras
from calc.keras.build import build_model
from calc.keras.step import keras_optimizer, print_stage
from calc.requests import config_from_dict, spec_from_dict
from calc.types import TrainMode
raw = json.loads(sys.argv[1])
spec, config = spec_from_dict(raw["spec"]), config_from_dict(raw["config"])
import time
t0 = time.perf_counter()
def phase(what):  # a run stopped at its limit says how far it came
    print_stage(t0, what)
model, backbone = build_model(spec, config.precision.value, config.train_mode)
phase("model built")
if config.train_mode is TrainMode.FROZEN_BACKBONE:
    backbone.trainable = False
model.compile(optimizer=keras_optimizer(config), loss="sparse_categorical_crossentropy")
device = jax.devices()[0]
built = device.memory_stats()
rng = np.random.default_rng(0)
x = rng.random((config.per_replica_batch, *spec.input_shape), dtype=np.float32)
y = rng.integers(0, spec.classes, size=(config.per_replica_batch,))
phase(f"inputs made, batch {config.per_replica_batch}")
model.train_on_batch(x, y)
phase("first step done (traced and compiled)")
before = device.memory_stats()["bytes_in_use"]
model.train_on_batch(x, y)
phase("second step done")
stats = device.memory_stats()
print("RESULT", json.dumps({"peak_bytes": int(stats["peak_bytes_in_use"]), "resident_before_step_bytes": int(before),
                            "bytes_limit": int(stats.get("bytes_limit", 0)), "seconds": round(time.perf_counter() - t0, 1),
                            "build_peak_bytes": int(built["peak_bytes_in_use"]), "xla_flags": os.environ.get("XLA_FLAGS", ""),
                            "device": device.device_kind, "jax": jax.__version__, "keras": keras.__version__}))
'''


def _measure_one(case: dict, timeout_s: float = 540.0, **extra_env: str) -> dict:
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_PYTHON_CLIENT_PREALLOCATE="false", TF_CPP_MIN_LOG_LEVEL="3",
               **extra_env)
    if NO_AUTOTUNE:
        # XLA's autotuner tries convolution algorithms with their own workspaces while it
        # compiles; those buffers count in the process's peak.
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(case)], capture_output=True, text=True,
                             timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return {"case": case["case"], "error": f"ran past {timeout_s:.0f} s; last stage: {_last_stage(stderr)}"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return {"case": case["case"], "error": f"{last} (last stage: {_last_stage(out.stderr)})"}
    return {"case": case["case"], "spec": case["spec"], "config": case["config"], **json.loads(lines[-1][7:])}


def _last_stage(stderr: str) -> str:
    """The last stage a child printed (``calc.keras.step.print_stage``)."""
    from calc.keras.step import STAGE_PREFIX

    stages = [line for line in stderr.splitlines() if line.startswith(STAGE_PREFIX)]
    return stages[-1] if stages else "none printed"


NO_AUTOTUNE = False


def measure(path: str, names: list[str]) -> None:
    from calc.requests import config_to_dict, spec_to_dict
    from calc.validation import CPU_DATA, case_id, cases

    wanted = [n for n in GPU_CASES if not names or any(s in n for s in names)]
    cases = [{"case": case_id(s, c), "spec": spec_to_dict(s), "config": config_to_dict(c)}
             for s, c in cases(CPU_DATA) if case_id(s, c) in wanted]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(_measure_one, cases))
    for r in results:
        print(r["case"], r.get("peak_bytes", 0) / MIB if "peak_bytes" in r else r["error"], flush=True)
    json.dump({"environment": {"backend": "jax (XLA)", "protocol": "build, compile, 2 train_on_batch, "
                               "peak_bytes_in_use of the process; fresh process per case"},
               "cases": results}, open(path, "w"), indent=1)


LIMIT_SET, MEM_FRACTION = "gpu_xla_limit", "0.97"


def limit(path: str, seed: int, deadline_s: float) -> None:
    """Set ``gpu_xla_limit``'s steps of the card drawn with ``seed``, one at a time, saved as each ends."""
    import time

    from calc.requests import config_to_dict, spec_to_dict
    from calc.validation import case_id
    from measure_gpu_tf import holdout_cases

    started, results = time.monotonic(), []
    todo = holdout_cases(True, seed, LIMIT_SET)  # each model's fitting batch first
    print(f"{len(todo)} steps at the card's limit, one at a time, allocator {MEM_FRACTION} of the card", flush=True)
    for spec, config in todo:
        left = deadline_s - (time.monotonic() - started)
        if left < 30:
            print(f"SKIPPED {case_id(spec, config)} (deadline)", flush=True)
            continue
        case = {"case": case_id(spec, config), "spec": spec_to_dict(spec), "config": config_to_dict(config)}
        result = _measure_one(case, left, XLA_PYTHON_CLIENT_MEM_FRACTION=MEM_FRACTION)
        results.append(result)
        shown = f"{result['peak_bytes'] / MIB:.1f} MiB in {result['seconds']} s" if "peak_bytes" in result \
            else f"FAILED {result['error']}"
        print(f"{case['case']:60s} {shown}", flush=True)
        json.dump({"environment": {"backend": "jax (XLA)", "set": LIMIT_SET, "seed": seed,
                                   "allocator": f"XLA_PYTHON_CLIENT_MEM_FRACTION={MEM_FRACTION}, no preallocation",
                                   "protocol": "build, compile, 2 train_on_batch, peak_bytes_in_use of the process; "
                                               "fresh process per case, one at a time"},
                   "cases": results}, open(path, "w"), indent=1)


def compare(path: str) -> None:
    from dataclasses import replace

    from calc.estimate import estimate_memory
    from calc.profiles import get_profile
    from calc.requests import config_from_dict, spec_from_dict
    from calc.validation import load_measurements

    cpu = {c["case"]: c["peak_bytes"] for c in load_measurements()["cases"]}
    data = json.load(open(path))
    print(f"{'case':66s} {'GPU (JAX, XLA)':>14s} {'CPU (TF)':>9s} {'engine':>8s} {'engine vs GPU':>13s}   MiB")
    errors = []
    for r in data["cases"]:
        if "peak_bytes" not in r:
            print(f"{r['case']:66s} failed: {r['error']}")
            continue
        predicted = estimate_memory(get_profile(spec_from_dict(r["spec"])),
                                    replace(config_from_dict(r["config"]), device="gpu")).peak_bytes
        err = predicted / r["peak_bytes"] - 1
        errors.append(err)
        print(f"{r['case']:66s} {r['peak_bytes'] / MIB:14.1f} {cpu.get(r['case'], 0) / MIB:9.1f} {predicted / MIB:8.1f}"
              f" {err * 100:+12.1f}%")
    if errors:
        a = sorted(abs(e) for e in errors)
        print(f"{len(a)} cases on {data['cases'][0].get('device', '?')}: the engine (fitted to TensorFlow on the CPU) "
              f"is off by a median {a[len(a) // 2] * 100:.1f}%, from {min(errors) * 100:+.1f}% to {max(errors) * 100:+.1f}%")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "measure":
        NO_AUTOTUNE = "--no-autotune" in sys.argv
        measure(sys.argv[2], [a for a in sys.argv[3:] if a != "--no-autotune"])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "limit":
        limit(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) == 5 else 480.0)
    elif len(sys.argv) == 3 and sys.argv[1] == "compare":
        compare(sys.argv[2])
    else:
        raise SystemExit(__doc__)
