"""The measured validation data: one JSON file per set, each case with its spec, config and runs.

A data file is ``{"environment": {...}, "cases": [...]}``; each case carries the TensorFlow
and Keras versions, device and thread settings of its set (``environment``), its spec and
config as ``calc.requests`` writes them, every run's peak and their median. The files are
the case lists: ``cases(path)`` reads a set's (spec, config) pairs from its file.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from calc.catalogue import ModelFile, ModelSpec
from calc.requests import config_from_dict, config_to_dict, spec_from_dict, spec_to_dict
from calc.types import Device, TrainingConfig

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
# TensorFlow's graph executor on this project's CPUs (the validation set proper).
CPU_DATA = DATA_DIR / "validation_cpu.json"
# The mixed_float16 cases again on a CPU with AVX512-FP16 (oneDNN's float16 kernels).
FP16_DATA = DATA_DIR / "validation_cpu_fp16.json"
# Models users build themselves, saved as files in MODEL_FILES_DIR (tools/custom_models.py).
CUSTOM_DATA = DATA_DIR / "validation_custom_cpu.json"
MODEL_FILES_DIR = "calc/data/models"
# TensorFlow on an H100: its graph executor (jit_compile=False), and XLA (Keras 3's default there).
GPU_TF_DATA = DATA_DIR / "gpu_tf_h100.json"
GPU_TF_XLA_DATA = DATA_DIR / "gpu_tf_h100_xla.json"
# KerasHub steps run on an H200 as a user runs them (tools/measure_gpu_hub.py, XLA's autotuner on), against
# their plans on record (validation/planned.json, set hub_gpu).
HUB_GPU_DATA = DATA_DIR / "hub_gpu_h200.json"
# Keras's JAX backend on an H100 (XLA compiles every step), XLA's autotuner off and on.
GPU_JAX_DATA = DATA_DIR / "gpu_jax_h100_noautotune.json"
GPU_JAX_AUTOTUNE_DATA = DATA_DIR / "gpu_jax_h100.json"
# Every data file whose cases are estimated by the walk (``python -m calc validate --data``).
WALK_DATA = (CPU_DATA, FP16_DATA, CUSTOM_DATA, GPU_TF_DATA, GPU_TF_XLA_DATA, GPU_JAX_DATA, GPU_JAX_AUTOTUNE_DATA)

PROTOCOL = ("build, compile, train_on_batch until a step has applied its update (one step, except under "
            "mixed_float16 loss scaling), reset_memory_stats, one train_on_batch that applies its update, "
            "read peak; each run a fresh process")


def case_id(spec: ModelSpec | ModelFile, config: TrainingConfig) -> str:
    opts = config.optimizer_options
    flags = [f for f in ("momentum", "amsgrad", "centered", "use_ema") if getattr(opts, f)]
    parts = [spec.key, f"b{config.batch_size}", config.optimizer.value, *flags, config.precision.value]
    if config.gradient_accumulation_steps > 1:
        parts.append(f"accumulate_{config.gradient_accumulation_steps}")
    if config.train_mode.value == "last_n":
        parts.append(f"last_{config.last_n_layers}_layers")
    elif config.train_mode.value != "all":
        parts.append(config.train_mode.value)
    return " ".join(parts)


def load_measurements(path: Path = CPU_DATA) -> dict[str, Any]:
    """Reads a validation data file: ``{"environment": {...}, "cases": [...]}``.

    Raises:
        ValueError: in one line, naming the file (and the case) that is not of that shape.
    """
    if not path.exists():
        return {"environment": {}, "cases": []}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path.name} cannot be read as a validation data file: {exc}") from None
    check_cases(data, path.name)
    return data


def check_cases(data: Any, name: str) -> None:
    """A data file's shape: an object whose "cases" are objects with a "case" name and, where
    measured, a "spec", a "config" and a positive whole "peak_bytes" (a run that failed keeps
    its name and its error)."""
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise ValueError(f"{name} is not a validation data file: expected an object with a list of \"cases\"")
    if not isinstance(data.get("environment", {}), dict):
        raise ValueError(f"{name}: \"environment\" must be an object")
    for i, case in enumerate(data["cases"]):
        fine = isinstance(case, dict) and isinstance(case.get("case"), str)
        if fine and "peak_bytes" in case:
            peak = case["peak_bytes"]
            fine = (type(peak) is int and peak > 0 and isinstance(case.get("spec"), dict)
                    and isinstance(case.get("config"), dict))
        if not fine:
            raise ValueError(f"{name}, case {i + 1}: expected an object with a \"case\" name and, where measured, "
                             "a positive whole \"peak_bytes\", a \"spec\" and a \"config\"")


def cases(path: Path = CPU_DATA) -> list[tuple[ModelSpec | ModelFile, TrainingConfig]]:
    """The (spec, config) of every case in a data file, in the file's order."""
    return [(spec_from_dict(c["spec"]), config_from_dict(c["config"])) for c in load_measurements(path)["cases"]]


def save_measurement(path: Path, spec: ModelSpec | ModelFile, config: TrainingConfig, measurement: Any) -> None:
    data = load_measurements(path)
    data["environment"] = {
        "device": measurement.device,
        "tensorflow": measurement.tensorflow,
        "keras": measurement.keras,
        "threads": measurement.threads,
        "protocol": PROTOCOL,
    }
    cid = case_id(spec, config)
    data["cases"] = [c for c in data["cases"] if c["case"] != cid]
    data["cases"].append(
        {
            "case": cid,
            "spec": spec_to_dict(spec),
            "config": config_to_dict(config),
            "peaks_bytes": list(measurement.peaks_bytes),
            "resident_before_step_bytes": list(measurement.resident_bytes),
            "peak_bytes": measurement.peak_bytes,
            "spread": round(measurement.spread, 4),
            "seconds": measurement.seconds,
            "kernels": measurement.kernels,
        }
    )
    path.write_text(json.dumps(data, indent=1) + "\n")


def measured_device(data: dict[str, Any], case: dict[str, Any] | None = None) -> Device:
    """The kernels a data file's step ran with: the case's ``kernels`` where recorded (CPUs
    with AVX512-FP16 run other float16 kernels), else the environment's ``device``
    (``CPU:0``, or ``GPU:0 (...)``)."""
    if case is not None and case.get("kernels") in {d.value for d in Device}:
        return Device(case["kernels"])
    return Device.GPU if str(data.get("environment", {}).get("device", "")).startswith("GPU") else Device.CPU


def measured_cases(path: Path) -> list[tuple[dict[str, Any], ModelSpec | ModelFile, TrainingConfig]]:
    """Every case of a data file with a measured peak, its spec and its config on the
    kernels it was measured with (a run that failed is kept in the file with its error)."""
    data = load_measurements(path)
    out = []
    for case in data["cases"]:
        if "peak_bytes" not in case:
            continue
        try:
            spec, config = spec_from_dict(case["spec"]), config_from_dict(case["config"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path.name}, case {case['case']}: not a model and training setup ({exc!r})") from None
        out.append((case, spec, replace(config, device=measured_device(data, case))))
    return out
