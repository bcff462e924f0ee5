"""Real measurement of one training step, each in a fresh child process.

The child (job ``measure`` of ``calc.workers.child``) runs ``calc.keras.step.measure_in_process``
on one request and answers its result; a crash, an out-of-memory kill or a hang (timeout)
in the child becomes a ``MeasurementError`` here, never a crash of the caller.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from calc.catalogue import ModelFile, ModelSpec
from calc.requests import config_to_dict, spec_to_dict
from calc.types import Device, TrainingConfig
from calc.workers.budgets import gib
from calc.workers.protocol import child_env, run_once


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


def measure_once(spec: ModelSpec | ModelFile, config: TrainingConfig, *, timeout_s: float = 600.0, xla: bool = False,
                 trace: bool | str = False, max_rss_bytes: int | None = None,
                 env: dict[str, str] | None = None) -> dict:
    """Runs the protocol once in a fresh Python process and returns its JSON result.

    ``xla``: compile the step with XLA (``jit_compile=True``); by default it runs on
    TensorFlow's graph executor, the step the engine models, on a GPU too.
    ``trace``: also return the measured step's allocator events (``"allocations"``,
    from TensorFlow's profiler; ``tools/trace_step.py`` reads them); ``"history"``
    also the events before it, from the model's build on (``"allocations_before"``).
    ``env``: variables set for this run beside the child's own (``XLA_FLAGS``, say).
    """
    request = {"spec": spec_to_dict(spec), "config": config_to_dict(config), "xla": bool(xla),
               "trace": trace if trace == "history" else bool(trace)}
    outcome = run_once("measure", request, env={**child_env(), **(env or {})}, timeout_s=timeout_s,
                       max_rss_bytes=max_rss_bytes)
    if outcome.reply.failure == "time":
        # Its last stage (calc.keras.step's stderr lines) says where the time went.
        raise MeasurementError(f"measurement of {spec.key} ran past {timeout_s:.0f} s and was stopped: "
                               f"{' | '.join(outcome.tail) or 'it printed nothing'}")
    if outcome.reply.failure == "memory" and max_rss_bytes is not None:
        raise MeasurementError(f"measurement of {spec.key} passed its memory budget of {gib(max_rss_bytes)} "
                               "and was stopped")
    if not outcome.reply.failure:
        return outcome.reply.answer
    raise MeasurementError(f"measurement of {spec.key} failed: {outcome.exit_reason}: {' | '.join(outcome.tail)}")


def measure_training_step(spec: ModelSpec | ModelFile, config: TrainingConfig, *, repeats: int = 3,
                          timeout_s: float = 600.0, xla: bool = False, max_rss_bytes: int | None = None,
                          env: dict[str, str] | None = None) -> Measurement:
    """Measures the allocator peak of one training step ``repeats`` times.

    Args:
        spec: the catalogue model.
        config: the training setup (global batch / ``num_gpus`` is run on one device).
        repeats: fresh processes; the median is the measurement.
        timeout_s: per run.
        xla: compile the step with XLA (``jit_compile=True``, Keras 3's default on a GPU).
        max_rss_bytes: each run's memory budget (``calc.workers.budgets``); None: none.
        env: variables set for each run beside the child's own.

    Returns:
        A ``Measurement`` with every run's peak.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be a positive integer. Received: repeats={repeats}")
    runs = [measure_once(spec, config, timeout_s=timeout_s, xla=xla, max_rss_bytes=max_rss_bytes, env=env)
            for _ in range(repeats)]
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
    TensorFlow's own float16 kernels run, with the buffers ``calc.facts.kernels`` counts. Read
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
