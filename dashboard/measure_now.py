"""The Validation page's "measure now": bounded, one at a time server-wide, switchable off.

Set ``CALC_MEASURE_NOW=off`` in the server's environment or as a root-level Streamlit
secret to disable it (public hosting).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace

from calc.estimate import estimate_memory
from calc.types import Device, ModelProfile
from calc.workers.measure import MeasurementError, measure_training_step
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
    if server_setting("CALC_MEASURE_NOW", "on").lower() in ("off", "0", "false", "no"):
        return False, "Measuring is switched off on this server (CALC_MEASURE_NOW=off)."
    if inputs.source != "catalogue":
        return False, ("Measuring here is for catalogue models; measure your own on your machine: "
                       "`python -m calc measure --file my_model.keras --batch-size ...` (the same options).")
    if inputs.num_gpus != 1:
        return False, "Measuring runs one device: set GPUs to 1."
    if inputs.device == "gpu" and not server_has_gpu():
        return False, ("This server has no GPU: set Kernels to CPU to measure the step on its CPU "
                       "(the estimate beside it then counts the CPU's kernels too).")
    if inputs.batch_size > MAX_BATCH or inputs.image_size > MAX_IMAGE or profile.total_params > MAX_PARAMS:
        return False, (f"Measuring here is limited to batch ≤ {MAX_BATCH}, image ≤ {MAX_IMAGE}px and models of "
                       f"≤ {MAX_PARAMS:,} parameters, so that one request cannot hold the server.")
    return True, ""


def run_measurement(profile: ModelProfile, inputs: Inputs) -> MeasureResult:
    label = (f"{inputs.model} {inputs.image_size}px b{inputs.batch_size} {inputs.optimizer} {inputs.precision} "
             f"on {inputs.device}")
    if not _one_at_a_time.acquire(blocking=False):
        return MeasureResult(label, error="Another measurement is running on this server; try again in a minute.")
    try:
        spec = spec_for(inputs.model, inputs.image_size, inputs.train_mode == "frozen_backbone")
        config = config_of(inputs)
        m = measure_training_step(spec, config, repeats=1, timeout_s=TIMEOUT_S)
        # Beside it, the estimate for the kernels that ran (a CPU with AVX512-FP16 has no
        # float16 buffers: calc.workers.measure.local_cpu_device).
        ran = replace(config, device=Device(m.kernels))
        return MeasureResult(label, m.peak_bytes, estimate_memory(profile, ran).peak_bytes)
    except (MeasurementError, ValueError) as exc:
        return MeasureResult(label, error=str(exc))
    finally:
        _one_at_a_time.release()
