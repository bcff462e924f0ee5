"""The workers' side: how a Dask worker of this project sets itself up, and the work it runs.

A worker is one of two kinds, named by the Dask resource it offers (``calc.cluster.engine``
starts them; on another machine ``python -m calc.cluster worker`` does):

- ``plan``: XLA's plan of a training step, compiled on Keras's JAX backend for a CUDA card
  without a GPU (``calc.keras.plan``). The worker keeps the last model it built, so a further
  batch or card of the same configuration costs tracing and XLA's compile only.
- ``build``: a catalogue model built on TensorFlow's Keras and read into its ledger
  (``calc.keras.build``).

Keras picks its backend once a process, when it is first imported, so the two kinds are two
processes. ``dask_setup`` (Dask's preload hook, run in the worker before any task) sets the
backend, XLA's flags and the folder XLA dumps compiled steps to, lowers the worker's CPU
priority below the pages', and has the kernel end the worker when its nanny ends, however it
ends (``PR_SET_PDEATHSIG``). Each worker runs one task at a time (one thread), under the memory
limit its nanny enforces (the nanny restarts it past that).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from typing import Any

from calc.cluster.settings import BUILD, KINDS, PLAN

NICE = 10  # below the pages' CPU priority: a compile must not slow a slider
DUMP_ENV = "CALC_XLA_DUMP"  # the plan worker's dump folder (calc.keras.plan reads it)
QUIET_ENV = "CALC_WORKER_QUIET"  # set for a process's own cluster: its workers' chatter stays out of its stderr
STARTED: dict[str, float] = {}  # task key -> when it started here (time.time()); read by ``executing``


def kind_of(resources: dict[str, float]) -> str:
    """The kind a worker with Dask ``resources`` is: the one resource of ``KINDS`` it offers."""
    kinds = [k for k in KINDS if resources.get(k)]
    if len(kinds) != 1:
        raise ValueError(f"a worker offers exactly one of the resources {', '.join(KINDS)}. Received: {resources}")
    return kinds[0]


def kind_env(kind: str, dump_dir: str = "") -> dict[str, str]:
    """The environment a worker of ``kind`` needs before Keras is first imported.

    A plan worker: Keras on JAX, JAX on the CPU, XLA compiling for CUDA with its autotuner off
    (the autotuner would run candidate convolutions on a device; XLA then picks each
    convolution's algorithm without trying it, with no workspace), and, with ``dump_dir``, the
    compiled step with its buffer assignment dumped there (``calc.xla.peak`` reads what fills
    the peak from it; ``calc.keras.plan`` empties it after each plan). A build worker: Keras on
    TensorFlow, quiet.
    """
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
    if kind == BUILD:
        return {**env, "KERAS_BACKEND": "tensorflow"}
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0"
    if dump_dir:
        flags += f" --xla_dump_to={dump_dir} --xla_dump_hlo_as_proto --xla_dump_hlo_module_re=jit_train_step"
        env[DUMP_ENV] = dump_dir  # the folder the worker reads and empties: its own, never one a user set
    return {**env, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags.strip()}


def dask_setup(worker: Any) -> None:
    """Dask's preload hook: the worker's environment for its kind, before any task runs."""
    kind = kind_of(dict(worker.state.total_resources))
    dump = tempfile.mkdtemp(prefix="calc-xla-dump-") if kind == PLAN else ""
    os.environ.update(kind_env(kind, dump))
    follow_nanny()
    if os.environ.get(QUIET_ENV):  # TensorFlow's and XLA's C++ logging writes to the file descriptor itself
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 2)
        os.close(quiet)
    if dump:
        import atexit
        import shutil

        atexit.register(shutil.rmtree, dump, True)


def follow_nanny() -> None:
    """A lower CPU priority, and this process ended by its nanny alone: by the kernel when the nanny's process
    ends, also by SIGKILL (Linux ``PR_SET_PDEATHSIG``; Dask's own watch needs a Python thread to run, which a
    compile holding the interpreter can delay), and deaf to the SIGTERM and SIGINT a service manager or a
    terminal sends the server's whole process group (its nanny would start it again while the server ends)."""
    try:
        os.nice(NICE)
    except OSError:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before the signal was asked for
        os._exit(1)


class _Started:
    """Notes when the task ``key`` started on this worker, for ``executing``, while it runs."""

    def __init__(self) -> None:
        from distributed import get_worker

        self.key = str(get_worker().get_current_task())

    def __enter__(self) -> None:
        STARTED[self.key] = time.time()

    def __exit__(self, *exc: object) -> None:
        STARTED.pop(self.key, None)


def executing(dask_worker: Any) -> dict[str, tuple[float, str]]:
    """What the worker executes now: task key -> (when it started, the worker's state of it: "executing", or
    "cancelled" once the scheduler has released it). ``Client.run`` calls this on each worker."""
    return {str(ts.key): (STARTED.get(str(ts.key), time.time()), str(ts.state)) for ts in dask_worker.state.executing}


def wanted_on_scheduler(dask_scheduler: Any, keys: list[str]) -> list[str]:
    """Of ``keys``, the tasks some client of the scheduler still wants. ``Client.run_on_scheduler`` calls this."""
    return [key for key in keys if (task := dask_scheduler.tasks.get(key)) is not None and task.who_wants]


def plan(request: dict[str, Any]) -> dict[str, Any]:
    """XLA's plan of the request's step (``calc.xla.cache.plan_request``): the answer ``calc.xla.plan``
    reads, with how long it took here and whether the worker held the model already.

    Raises:
        PlanError: XLA refused the step, or the model cannot be built; one line.
    """
    from calc.xla.plan import PlanError

    with _Started():
        started = time.monotonic()
        try:
            answer = plan_here(request)
        except Exception as exc:  # noqa: BLE001 - a layer XLA cannot compile, a model that cannot be built
            raise PlanError(_refusal(f"{type(exc).__name__}: {exc}")) from None
        return {**answer, "task_seconds": round(time.monotonic() - started, 2), "worker_rss_bytes": _resident()}


def plan_here(request: dict[str, Any]) -> dict[str, Any]:
    """XLA's plan of the request's step, compiled in this process (a plan worker, or a fresh child of
    ``calc.workers.plans``); the model is kept for the next request of the same configuration."""
    from calc.hub import HubSpec
    from calc.keras.codegen import CODEGEN
    from calc.keras.plan import _WARM, plan_in_process
    from calc.requests import config_from_dict, plan_spec_from_dict

    # The model is kept across requests that differ only in the batch or the card.
    family = json.dumps([request["spec"], {**request["config"], "batch_size": 0}, request.get("remat")],
                        sort_keys=True)
    if family not in _WARM:  # another model: the kept one goes, and what it held goes back to the system
        _WARM.clear()
        _release_memory()
    spec = plan_spec_from_dict(request["spec"])
    build = None
    if isinstance(spec, HubSpec):
        from calc.keras.hub import HubPlanModel  # keras_hub is imported for KerasHub models alone

        build = HubPlanModel
    # "codegen": how much of XLA's code generation the compile runs (benchmarks/xla_codegen.py; the same plan).
    codegen = request.get("codegen", "none")
    if codegen not in CODEGEN:
        raise ValueError(f"unknown code generation {codegen!r} (one of {', '.join(CODEGEN)})")
    return plan_in_process(spec, config_from_dict(request["config"]), request["target_config"], request.get("remat"),
                           family=family, build=build, codegen=codegen)


def _refusal(text: str) -> str:
    """XLA's or Keras's refusal as the page's one line."""
    import re

    if "ALG_DOT_BF16_BF16_F32" in text:  # xla/service/algorithm_util.cc: cuBLAS from Ampere on
        return ("XLA cannot compile this step for this card: it multiplies bfloat16 matrices with float32 sums, "
                "which XLA runs only on compute capability 8.0 (Ampere) or newer. A real card of this kind refuses "
                "it too; choose float32 or mixed_float16 for it")
    if "custom_partitioner" in text and "fused_attention" in text:  # jax/_src/cudnn/fused_attention_stablehlo.py
        said = re.findall(r"ValueError: ([^\n]+)", text)
        return ("XLA could not split this step over the mesh: cuDNN's flash attention, which Keras takes on this card "
                f"for 16-bit attention, refuses these shardings ({said[-1].strip() if said else 'no reason given'}); "
                "a real mesh of these cards refuses it too. Choose float32, or a data-parallel mesh (DATAx1)")
    line = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", text).split())[:300]
    return f"XLA could not compile this step: {line}"


def build(spec: dict[str, Any]) -> dict[str, Any]:
    """A catalogue model's ledger (``calc.profile_json`` form), built with ``weights=None``, with how long
    it took here.

    Raises:
        BuildError: Keras could not build it; one line.
    """
    from calc.keras.build import profile_catalogue_model
    from calc.profile_json import profile_to_dict
    from calc.requests import spec_from_dict

    with _Started():
        started = time.monotonic()
        try:
            profile = profile_to_dict(profile_catalogue_model(spec_from_dict(spec)))
        except Exception as exc:  # noqa: BLE001 - the request's answer; the worker goes on
            raise BuildError(f"{type(exc).__name__}: {exc}"[:500]) from None
        _release_memory()
        from distributed import get_worker

        return {"profile": profile, "task_seconds": round(time.monotonic() - started, 2),
                "worker_rss_bytes": _resident(), "worker": get_worker().address}


class BuildError(ValueError):
    """Keras could not build the model (the reason is in the message)."""


def _release_memory() -> None:
    """What a build leaves behind, given back: Keras's graph, Python's garbage and glibc's free lists
    (TensorFlow's CPU allocator keeps what it freed otherwise; a build worker that held every catalogue
    model grew to 2.3 GiB)."""
    import gc

    from calc.keras import clear_session

    try:
        clear_session()  # Keras's, with its full collection
    except ImportError:  # a worker without Keras
        gc.collect()
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass


def _resident() -> int:
    """This worker's resident memory (Linux /proc), 0 where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
