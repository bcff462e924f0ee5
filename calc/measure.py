"""Real measurement of one training step, in a subprocess.

The child runs ``calc.keras_adapter`` with one JSON request and prints one JSON
result; a crash, an out-of-memory kill or a hang (timeout) in the child becomes a
``MeasurementError`` here, never a crash of the caller.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass

from calc.catalogue import ModelSpec
from calc.requests import config_to_dict, spec_to_dict
from calc.types import Device, TrainingConfig


class MeasurementError(RuntimeError):
    pass


@dataclass(frozen=True)
class Measurement:
    """Allocator peaks of repeated runs, each in a fresh process."""

    peaks_bytes: tuple[int, ...]
    device: str
    tensorflow: str
    keras: str
    threads: str
    seconds: float
    resident_bytes: tuple[int, ...] = ()  # allocator ``current`` just before each measured step
    jit_compile: bool = False  # the step compiled with XLA
    kernels: str = "cpu"  # whose kernels ran it, a calc.types.Device value (local_cpu_device on a CPU)

    @property
    def peak_bytes(self) -> int:
        return int(statistics.median(self.peaks_bytes))

    @property
    def resident_median_bytes(self) -> int:
        """What was allocated before the measured step (weights, optimizer state, ...)."""
        return int(statistics.median(self.resident_bytes)) if self.resident_bytes else 0

    @property
    def spread(self) -> float:
        """(max - min) / median of the repeated peaks."""
        return (max(self.peaks_bytes) - min(self.peaks_bytes)) / self.peak_bytes


def child_env() -> dict[str, str]:
    """Environment for a ``python -m calc.keras_adapter`` child: quiet TF, this checkout importable.

    oneDNN on: TensorFlow tracks the CPU allocator's statistics only through oneDNN's
    allocator ("Allocator stats not available for device 'CPU:0'" without it), and TF 2.21
    turns oneDNN on by default only on CPUs with AVX512 or AMX (seen off on an AMD EPYC
    with AVX2). Every committed CPU measurement ran with it on.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1",
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    return env


def measure_once(spec: ModelSpec, config: TrainingConfig, *, timeout_s: float = 600.0, xla: bool = False,
                 trace: bool | str = False) -> dict:
    """Runs the protocol once in a fresh Python process and returns its JSON result.

    ``xla``: compile the step with XLA (``jit_compile=True``); by default it runs on
    TensorFlow's graph executor, the step the engine models, on a GPU too.
    ``trace``: also return the measured step's allocator events (``"allocations"``,
    from TensorFlow's profiler; ``benchmarks/trace_step.py`` reads them); ``"history"``
    also the events before it, from the model's build on (``"allocations_before"``).
    """
    request = json.dumps({"spec": spec_to_dict(spec), "config": config_to_dict(config), "xla": bool(xla),
                          "trace": trace if trace == "history" else bool(trace)})
    env = child_env()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "calc.keras_adapter", request],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise MeasurementError(f"measurement of {spec.key} ran past {timeout_s:.0f} s and was stopped") from exc
    for line in proc.stdout.splitlines():
        if line.startswith("MEASURED "):
            return json.loads(line[len("MEASURED "):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    reason = "killed (out of memory?)" if proc.returncode < 0 else f"exit status {proc.returncode}"
    raise MeasurementError(f"measurement of {spec.key} failed: {reason}: {' | '.join(tail)}")


def measure_training_step(
    spec: ModelSpec, config: TrainingConfig, *, repeats: int = 3, timeout_s: float = 600.0, xla: bool = False
) -> Measurement:
    """Measures the allocator peak of one training step ``repeats`` times.

    Args:
        spec: the catalogue model.
        config: the training setup (global batch / ``num_gpus`` is run on one device).
        repeats: fresh processes; the median is the measurement.
        timeout_s: per run.
        xla: compile the step with XLA (``jit_compile=True``, Keras 3's default on a GPU).

    Returns:
        A ``Measurement`` with every run's peak.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be a positive integer. Received: repeats={repeats}")
    runs = [measure_once(spec, config, timeout_s=timeout_s, xla=xla) for _ in range(repeats)]
    first = runs[0]
    return Measurement(
        peaks_bytes=tuple(r["peak_bytes"] for r in runs),
        device=first["device"],
        tensorflow=first["tensorflow"],
        keras=first["keras"],
        threads=first["threads"],
        seconds=round(sum(r["seconds"] for r in runs), 1),
        resident_bytes=tuple(r["current_before_bytes"] for r in runs),
        jit_compile=first.get("jit_compile") == "True",
        kernels=Device.GPU.value if first["device"].startswith("GPU") else local_cpu_device().value,
    )


def local_cpu_device(cpuinfo: str = "/proc/cpuinfo") -> Device:
    """Which CPU kernels TensorFlow runs here: ``cpu_fp16`` where the CPU has AVX512-FP16.

    oneDNN takes float16 convolutions and matrix products only on such CPUs; elsewhere
    TensorFlow's own float16 kernels run, with the buffers ``calc.kernels`` counts. Read
    from the kernel's CPU flags (no TensorFlow import); ``cpu`` where they cannot be read.
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return Device.CPU_FP16 if "avx512_fp16" in line.split() else Device.CPU
    except OSError:
        pass
    return Device.CPU
