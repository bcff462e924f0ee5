"""The Validation page's "measure now": off unless the operator turns it on, bounded in
size and memory, one at a time server-wide.

It runs real training steps on the host, so it is off by default: set ``CALC_MEASURE_NOW=on``
in the server's environment or as a root-level Streamlit secret to offer it. A step whose
predicted need (the estimate plus what TensorFlow itself holds) passes the measurement's
memory budget (``CALC_MEASURE_GIB``, ``calc.workers.budgets``) is refused before it starts,
and a run that passes it anyway is stopped.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace

from calc.estimate import estimate_memory
from calc.types import Device, ModelProfile
from calc.workers.budgets import TENSORFLOW_RESIDENT_BYTES, budget_bytes, gib
from calc.workers.measure import MeasurementError, measure_training_step
from dashboard.i18n import tr
from dashboard.loaders import spec_for
from dashboard.state import Inputs
from dashboard.views import config_of

MAX_BATCH = 64
MAX_IMAGE = 320
MAX_PARAMS = 150_000_000
TIMEOUT_S = 240.0
_one_at_a_time = threading.Lock()


@dataclass(frozen=True)
class MeasureResult:
    label: str
    measured_bytes: int = 0
    predicted_bytes: int = 0
    error: str = ""

    @property
    def error_fraction(self) -> float:
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes


def server_setting(name: str, default: str) -> str:
    """A server-wide switch: the environment, else a root-level Streamlit secret, else ``default``.

    Hosting services take settings as secrets; Streamlit exports root-level secrets to
    the environment only once ``st.secrets`` is read, so it is read here.
    """
    if name in os.environ:
        return os.environ[name]
    try:
        import streamlit as st

        return str(st.secrets.get(name, default))
    except Exception:  # no secrets file, or an unreadable one: the default holds
        return default


def server_has_gpu() -> bool:
    """An NVIDIA driver's device node, without importing TensorFlow."""
    return os.path.exists("/dev/nvidiactl")


def measure_now_allowed(profile: ModelProfile, inputs: Inputs) -> tuple[bool, str]:
    if server_setting("CALC_MEASURE_NOW", "off").lower() not in ("on", "1", "true", "yes"):
        return False, tr("Measuring is off on this server: it runs real training steps on the host. Its operator "
                         "can turn it on with CALC_MEASURE_NOW=on; on your own machine, `python -m calc measure` "
                         "runs it.")
    if inputs.source != "catalogue":
        return False, tr("Measuring here is for catalogue models; measure your own on your machine: "
                         "`python -m calc measure --file my_model.keras --batch-size ...` (the same options).")
    if inputs.num_gpus != 1:
        return False, tr("Measuring runs one device: set GPUs to 1.")
    if inputs.device == "gpu" and not server_has_gpu():
        return False, tr("This server has no GPU: set Kernels to CPU to measure the step on its CPU "
                         "(the estimate beside it then counts the CPU's kernels too).")
    if inputs.batch_size > MAX_BATCH or inputs.image_size > MAX_IMAGE or profile.total_params > MAX_PARAMS:
        return False, tr("Measuring here is limited to batch ≤ {batch}, image ≤ {image}px and models of "
                         "≤ {params:,} parameters, so that one request cannot hold the server.",
                         batch=MAX_BATCH, image=MAX_IMAGE, params=MAX_PARAMS)
    need, budget = predicted_need_bytes(profile, inputs), budget_bytes("measure")
    if need > budget:
        return False, tr("This step would need about {need} on this server (the estimate for its CPU plus "
                         "{tensorflow} for TensorFlow itself); the measurement's budget is {budget} "
                         "(CALC_MEASURE_GIB). Try a smaller batch or image.",
                         need=gib(need), tensorflow=gib(TENSORFLOW_RESIDENT_BYTES), budget=gib(budget))
    return True, ""


def predicted_need_bytes(profile: ModelProfile, inputs: Inputs) -> int:
    """What a measurement of this step would hold at its peak: the estimate for the kernels it
    runs here, plus what TensorFlow's process holds besides."""
    config = config_of(inputs)
    if config.device is Device.GPU:  # measured on the server's GPU: its process still holds TensorFlow
        return TENSORFLOW_RESIDENT_BYTES
    return estimate_memory(profile, config).peak_bytes + TENSORFLOW_RESIDENT_BYTES


def run_measurement(profile: ModelProfile, inputs: Inputs) -> MeasureResult:
    label = tr("{model} {image_size}px b{batch_size} {optimizer} {precision} on {device}", model=inputs.model,
               image_size=inputs.image_size, batch_size=inputs.batch_size, optimizer=inputs.optimizer,
               precision=inputs.precision, device=inputs.device)
    if not _one_at_a_time.acquire(blocking=False):
        return MeasureResult(label, error=tr("Another measurement is running on this server; try again in a "
                                             "minute."))
    try:
        spec = spec_for(inputs.model, inputs.image_size, inputs.train_mode == "frozen_backbone")
        config = config_of(inputs)
        m = measure_training_step(spec, config, repeats=1, timeout_s=TIMEOUT_S, max_rss_bytes=budget_bytes("measure"))
        # Beside it, the estimate for the kernels that ran (a CPU with AVX512-FP16 has no
        # float16 buffers: calc.workers.measure.local_cpu_device).
        ran = replace(config, device=Device(m.kernels))
        return MeasureResult(label, m.peak_bytes, estimate_memory(profile, ran).peak_bytes)
    except (MeasurementError, ValueError) as exc:
        return MeasureResult(label, error=str(exc))
    finally:
        _one_at_a_time.release()
