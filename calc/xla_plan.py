"""XLA's own memory plan of the training step Keras runs on a GPU, computed without a GPU.

Keras 3 compiles the training step with XLA on a GPU (``jit_compile="auto"``), and XLA
decides every buffer of the compiled program at compile time. JAX can compile for a
CUDA target with no GPU present, so a child process (``KERAS_BACKEND=jax``) builds the
model, jits Keras's own ``train_step`` for the target and reads the program's
``memory_analysis()`` (``calc.keras_adapter.plan_in_process``). This module is the
parent side: GPU targets, the child with a time and memory limit, one compile at a time
per machine, single flight for identical requests, and a disk cache keyed by everything
that changes the plan. It imports neither JAX nor Keras.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from calc.catalogue import ModelFile, ModelSpec
from calc.requests import config_to_dict, spec_to_dict
from calc.types import TrainingConfig

TARGETS_PATH = Path(__file__).parent / "data" / "gpu_targets.json"
SHIPPED_PLANS = Path(__file__).parent / "data" / "xla_plans.json.gz"
PLAN_FORMAT = 1  # bump when the child's answer or the request's meaning changes
# keras.RematScope modes the plan answers. "larger_than" is not one: Keras 3.15 measures a
# layer's output with compute_output_spec inside the traced step, which fails under JAX
# ("DynamicJaxprTracer has no attribute sparse"); "list_of_layers" needs layer names.
REMAT_MODES = ("full", "activations")
# The packages the child needs; their versions are part of every cache key (XLA's version
# moves plans by 1-2 %).
PLAN_PACKAGES = ("jax", "jaxlib", "jax-cuda12-plugin", "keras")
TIMEOUT_S = 600.0
MAX_RSS_BYTES = 8 * 2**30  # one compile peaked at 0.9-2.4 GiB resident on catalogue models
CACHE_ENTRIES = 2000


class PlanError(ValueError):
    """The plan could not be computed; the message is one line for the user."""


# --- GPU targets -------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuTarget:
    """A CUDA card as XLA's compiler sees it (``stream_executor.GpuTargetConfigProto``)."""

    key: str
    name: str
    compute_capability: str
    core_count: int
    l2_cache_size: int
    memory_bandwidth: int
    clock_rate_ghz: float
    device_memory_size: int
    shared_memory_per_core: int
    shared_memory_per_block_optin: int
    threads_per_core_limit: int
    fpus_per_core: int
    source: str

    def config_text(self) -> str:
        """The target in the text form ``jax.experimental.topologies.get_topology_desc`` takes."""
        major, minor = self.compute_capability.split(".")
        return "\n".join([
            "gpu_device_info {",
            "  threads_per_block_limit: 1024",
            "  threads_per_warp: 32",
            "  shared_memory_per_block: 49152",
            f"  shared_memory_per_core: {self.shared_memory_per_core}",
            f"  threads_per_core_limit: {self.threads_per_core_limit}",
            f"  core_count: {self.core_count}",
            f"  fpus_per_core: {self.fpus_per_core}",
            "  block_dim_limit_x: 2147483647",
            "  block_dim_limit_y: 65535",
            "  block_dim_limit_z: 65535",
            f"  memory_bandwidth: {self.memory_bandwidth}",
            f"  l2_cache_size: {self.l2_cache_size}",
            f"  clock_rate_ghz: {self.clock_rate_ghz}",
            f"  device_memory_size: {self.device_memory_size}",
            f"  shared_memory_per_block_optin: {self.shared_memory_per_block_optin}",
            f"  cuda_compute_capability {{ major: {int(major)} minor: {int(minor)} }}",
            "  registers_per_core_limit: 65536",
            "  registers_per_block_limit: 65536",
            "  thread_dim_limit_x: 1024",
            "  thread_dim_limit_y: 1024",
            "  thread_dim_limit_z: 64",
            "}",
            'platform_name: "CUDA"',
            "dnn_version_info { major: 9 minor: 10 }",
            f'device_description_str: "{self.name}"',
            "",
        ])


@functools.cache
def gpu_targets() -> dict[str, GpuTarget]:
    """Every target, keyed by GPU preset key (``calc.gpus.GPU_PRESETS``)."""
    data = json.loads(TARGETS_PATH.read_text())
    limits = data["limits_by_compute_capability"]
    targets = {key: GpuTarget(key=key, **{**limits[t["compute_capability"]], **t})
               for key, t in data["targets"].items()}
    for preset, same in data["presets"].items():
        targets[preset] = targets[same]
    return targets


def target_for(gpu_key: str) -> GpuTarget:
    """The target of a GPU preset; ``PlanError`` for one without (a custom size)."""
    target = gpu_targets().get(gpu_key)
    if target is None:
        raise PlanError(f"no XLA target for GPU {gpu_key!r} (a custom size names no card): choose a preset")
    return target


# --- the plan ----------------------------------------------------------------------------


@dataclass(frozen=True)
class XlaPlan:
    """The peak of the compiled step on one device, in bytes; the components sum to it.

    ``outputs_bytes`` is what the step returns beyond the state it updates in place (the
    donated state aliases its outputs): the loss and the metrics.
    """

    weights_bytes: int
    optimizer_state_bytes: int  # the optimizer's variables, and the metrics' (a few bytes)
    input_batch_bytes: int
    temporaries_bytes: int  # XLA's temporary buffers: activations, gradients, update scratch
    outputs_bytes: int
    outside_step_bytes: int  # what the runtime holds beside the compiled program
    target: str
    remat: str = ""
    compile_seconds: float = 0.0
    versions: str = ""

    @property
    def peak_bytes(self) -> int:
        return sum(self.components().values())

    def components(self) -> dict[str, int]:
        return {
            "weights": self.weights_bytes,
            "optimizer_state": self.optimizer_state_bytes,
            "input_batch": self.input_batch_bytes,
            "xla_temporaries": self.temporaries_bytes,
            "step_outputs": self.outputs_bytes,
            "outside_step": self.outside_step_bytes,
        }


def plan_from_analysis(raw: dict[str, Any], target: str, remat: str = "") -> XlaPlan:
    """The plan from the child's answer: peak = arguments + temporaries + outputs - aliased.

    With the state donated (``donate_argnums=0``) its outputs take the arguments' buffers,
    so the aliased bytes equal the state's. What TensorFlow's runtime holds beside the
    compiled program is counted as 0: before its XLA step the allocator held the state
    and 0.01-7.9 MiB more in the 22 H100 cases (calc/data/gpu_tf_h100_xla.json), nothing
    that follows from the model's size (docs/XLA_PLAN.md).
    """
    weights = raw["trainable_bytes"] + raw["non_trainable_bytes"]
    optimizer = raw["optimizer_bytes"] + raw["metrics_bytes"]
    batch = raw["batch_bytes"]
    peak = raw["argument_bytes"] + raw["temp_bytes"] + raw["output_bytes"] - raw["alias_bytes"]
    return XlaPlan(
        weights_bytes=weights,
        optimizer_state_bytes=optimizer,
        input_batch_bytes=batch,
        temporaries_bytes=raw["temp_bytes"],
        outputs_bytes=peak - weights - optimizer - batch - raw["temp_bytes"],
        outside_step_bytes=0,
        target=target,
        remat=remat,
        compile_seconds=float(raw.get("compile_seconds", 0.0)) + float(raw.get("build_seconds", 0.0)),
        versions=f"jax {raw.get('jax', '?')}, keras {raw.get('keras', '?')}",
    )


def plan_versions() -> dict[str, str] | None:
    """Installed versions of what the child needs, read without importing; None if one is missing."""
    try:
        return {name: metadata.version(name) for name in PLAN_PACKAGES}
    except metadata.PackageNotFoundError:
        return None


def unavailable_reason() -> str | None:
    """Why no plan can be computed here (one line), or None."""
    if sys.version_info < (3, 12):
        return (f"the XLA plan needs Python 3.12 or newer for jax 0.11 (this is {sys.version_info.major}."
                f"{sys.version_info.minor}); install the project in a Python 3.12 environment")
    if plan_versions() is None:
        missing = [n for n in PLAN_PACKAGES if not _installed(n)]
        return f"the XLA plan needs {', '.join(missing)} (pip install -r requirements.txt)"
    return None


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def plan_request(spec: ModelSpec | ModelFile, config: TrainingConfig, target: GpuTarget,
                 remat: str = "") -> dict[str, Any]:
    """The child's request: everything that decides the plan."""
    if remat and remat not in REMAT_MODES:
        raise PlanError(f"remat must be one of {', '.join(REMAT_MODES)} or empty. Received: remat={remat!r}")
    config_data = config_to_dict(config)
    # The plan is of one device's step: the per-device batch decides it, and the kernels
    # (calc.types.Device) are the GPU's by construction.
    config_data.update(batch_size=config.per_replica_batch, num_gpus=1, device="gpu")
    spec_data = spec_to_dict(spec)
    if isinstance(spec, ModelFile):
        spec_data["sha256"] = _file_digest(spec.resolved())
    return {"spec": spec_data, "config": config_data, "target": target.key,
            "target_config": target.config_text(), "remat": remat or None}


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_key(request: dict[str, Any], versions: dict[str, str]) -> str:
    """A digest of the request (the file's content, not its path), the versions and the format."""
    spec = dict(request["spec"])
    if "sha256" in spec:
        spec.pop("file", None)
    keyed = {**request, "spec": spec, "target": None, "versions": versions, "format": PLAN_FORMAT}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:32]


def cache_dir() -> Path:
    from calc.profiles import cache_dir as profiles_cache_dir

    return profiles_cache_dir() / "xla-plans"


@functools.cache
def _shipped() -> dict[str, dict[str, Any]]:
    """Plans committed with the project (the validation cases, the dashboard's first page)."""
    try:
        with gzip.open(SHIPPED_PLANS, "rt") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _read_cached(key: str) -> dict[str, Any] | None:
    if key in _shipped():
        return _shipped()[key]
    path = cache_dir() / f"{key}.json"
    try:
        raw = json.loads(path.read_text())
        os.utime(path)  # least recently used goes first when the cache is full
        return raw
    except (OSError, ValueError):
        return None


def _write_cached(key: str, raw: dict[str, Any]) -> None:
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(raw))
        os.replace(tmp, folder / f"{key}.json")
        entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in entries[: max(0, len(entries) - CACHE_ENTRIES)]:
            old.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only or full disk costs a recompile next time, nothing else


def worker_env() -> dict[str, str]:
    """The child's environment: Keras on JAX, JAX on the CPU, XLA compiling for CUDA.

    The autotuner would run candidate convolution algorithms on a device, so it is off:
    XLA then picks each convolution's algorithm without trying it, with no workspace.
    """
    from calc.measure import child_env

    env = child_env()
    flags = env.get("XLA_FLAGS", "")
    env.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               XLA_FLAGS=(flags + " --xla_gpu_autotune_level=0").strip())
    return env


def run_child(request: dict[str, Any], *, timeout_s: float = TIMEOUT_S, max_rss_bytes: int = MAX_RSS_BYTES,
              poll_s: float = 0.25) -> dict[str, Any]:
    """Compiles in a child process; stops it past ``timeout_s`` or ``max_rss_bytes`` resident."""
    from calc.build_worker import resident_bytes

    proc = subprocess.Popen([sys.executable, "-m", "calc.keras_adapter", "--plan-xla"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=worker_env(), text=True)
    reader = threading.Thread(target=lambda: setattr(proc, "_answer", proc.communicate(json.dumps(request))),
                              daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    stopped, peak_rss = "", 0
    while reader.is_alive():
        reader.join(poll_s)
        if not reader.is_alive():
            break
        peak_rss = max(peak_rss, resident_bytes(proc.pid))
        if time.monotonic() > deadline:
            stopped = f"the compile ran past {timeout_s:.0f} s and was stopped"
        elif peak_rss > max_rss_bytes:
            stopped = f"the compile passed its memory budget of {max_rss_bytes / 2**30:.1f} GiB and was stopped"
        if stopped:
            proc.kill()
            reader.join()
            raise PlanError(stopped)
    stdout, stderr = getattr(proc, "_answer", ("", ""))
    for line in stdout.splitlines():
        kind, _, payload = line.partition(" ")
        if kind == "PLAN":
            return {**json.loads(payload), "worker_peak_rss_bytes": peak_rss}
        if kind == "REFUSED":
            raise PlanError(f"XLA could not compile this step: {_one_line(json.loads(payload))}")
    tail = _one_line(" | ".join((stderr or "").strip().splitlines()[-2:]))
    reason = "killed (out of memory?)" if proc.returncode and proc.returncode < 0 else f"exit status {proc.returncode}"
    raise PlanError(f"the compile failed: {reason}: {tail}")


def _one_line(text: str, limit: int = 300) -> str:
    """A child's message as one plain line: no terminal colours, no line breaks, bounded."""
    import re

    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(text)).split())[:limit]


_flights: dict[str, threading.Lock] = {}
_flights_guard = threading.Lock()
COMPILES: list[str] = []  # cache keys compiled by this process, in order (tests check single flight)


def _machine_lock(timeout_s: float):
    """One compile at a time on this machine, across processes: an exclusive lock on a file."""
    import fcntl  # POSIX only: imported here so that the rest of the module imports anywhere

    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    f = open(folder / "compile.lock", "w")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except BlockingIOError:
            if time.monotonic() > deadline:
                f.close()
                raise PlanError(f"another compile held this machine for more than {timeout_s:.0f} s") from None
            time.sleep(0.2)


def compute_plan(spec: ModelSpec | ModelFile, config: TrainingConfig, gpu_key: str, remat: str = "", *,
                 timeout_s: float = TIMEOUT_S, wait_s: float = 2 * TIMEOUT_S,
                 runner: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> XlaPlan:
    """XLA's plan of one training step for a GPU preset, from the cache or compiled once.

    Args:
        spec: a catalogue model or a saved file.
        config: the training setup; the per-device batch is compiled.
        gpu_key: a GPU preset key (``calc.gpus.GPU_PRESETS``).
        remat: a ``keras.RematScope`` mode (``REMAT_MODES``) or "" for none.
        timeout_s: the compile's time limit.
        wait_s: how long to wait for other compiles on this machine first.
        runner: runs the child (tests replace it).

    Returns:
        An ``XlaPlan`` whose components sum to ``peak_bytes``.

    Raises:
        PlanError: with a one-line reason (no jax here, no target, XLA refused, time-out).
    """
    target = target_for(gpu_key)
    if (reason := unavailable_reason()) is not None:
        raise PlanError(reason)
    request = plan_request(spec, config, target, remat)
    key = cache_key(request, plan_versions() or {})
    if (raw := _read_cached(key)) is not None:
        return plan_from_analysis(raw, target.key, remat)
    with _flights_guard:
        flight = _flights.setdefault(key, threading.Lock())
    with flight:  # a second identical request waits here, then finds the first one's answer
        if (raw := _read_cached(key)) is None:
            lock = _machine_lock(wait_s)
            try:
                if (raw := _read_cached(key)) is None:  # another process may have compiled it meanwhile
                    raw = (runner or functools.partial(run_child, timeout_s=timeout_s))(request)
                    COMPILES.append(key)
                    _write_cached(key, raw)
            finally:
                lock.close()
    return plan_from_analysis(raw, target.key, remat)


def cached_plan(spec: ModelSpec | ModelFile, config: TrainingConfig, gpu_key: str, remat: str = "") -> XlaPlan | None:
    """The plan if it is already known (shipped or on disk), without compiling; None otherwise."""
    try:
        target = target_for(gpu_key)
        versions = plan_versions()
        if versions is None:
            return None
        raw = _read_cached(cache_key(plan_request(spec, config, target, remat), versions))
    except (PlanError, OSError):
        return None
    return None if raw is None else plan_from_analysis(raw, target.key, remat)


def known_peaks(spec: ModelSpec | ModelFile, config: TrainingConfig, gpu_key: str, batches: list[int],
                remat: str = "", versions: dict[str, str] | None = None) -> dict[int, int]:
    """Per-device batch -> planned peak bytes, for the batches whose plans are already known.

    Never compiles. ``versions`` (``plan_versions()``, read once by the caller) saves reading
    the packages' metadata for each of a curve's hundred batches.
    """
    from dataclasses import replace

    versions = versions or plan_versions()
    try:
        target = target_for(gpu_key)
    except PlanError:
        return {}
    if versions is None:
        return {}
    peaks = {}
    for batch in sorted(set(batches)):
        request = plan_request(spec, replace(config, batch_size=batch, num_gpus=1), target, remat)
        if (raw := _read_cached(cache_key(request, versions))) is not None:
            peaks[batch] = plan_from_analysis(raw, target.key, remat).peak_bytes
    return peaks


@dataclass(frozen=True)
class XlaMaxBatch:
    """The largest batch whose compiled plan fits, and how it was found."""

    max_batch: int  # 0: not even one sample fits
    compiled: tuple[tuple[int, int], ...]  # (per-device batch, needed bytes) of every plan consulted

    @property
    def compiles(self) -> int:
        return len(self.compiled)


def max_batch_xla(needed: Callable[[int], int], usable_bytes: int, start: int, *, limit: int = 1 << 16) -> XlaMaxBatch:
    """The largest per-device batch B with ``needed(B) <= usable_bytes`` and ``needed(B + 1) > usable_bytes``.

    ``needed`` compiles (or reads) the plan at a batch. ``start`` (the walk's answer) is the
    first guess; until a batch that does not fit is known the guess is the last one scaled
    to the budget, and at least half as large again. Inside the
    bracket each guess is where the line between its two ends crosses the budget (regula
    falsi), and a bisection follows any guess that did not halve the bracket: near the
    card's memory XLA's plans stop growing in a straight line (docs/XLA_PLAN.md), so the
    search cannot rely on one. B and B + 1 are both compiled.
    """
    known: dict[int, int] = {}

    def at(b: int) -> int:
        if b not in known:
            known[b] = needed(b)
        return known[b]

    lo, hi = 0, limit + 1  # lo fits (0 trivially), hi does not
    b, bisect = min(max(1, start), limit), False
    while hi - lo > 1:
        width = hi - lo
        if at(b) <= usable_bytes:
            lo = b
        else:
            hi = b
        if hi - lo <= 1:
            break
        if hi > limit:  # no batch that does not fit yet: scale to the budget, growing by half at least
            b = min(max(lo * usable_bytes // max(known[lo], 1), lo + max(1, lo // 2)), limit)
        elif lo == 0 or bisect:
            b = (lo + hi) // 2
        else:
            m_lo, m_hi = known[lo], known[hi]
            b = lo + int((usable_bytes - m_lo) * (hi - lo) / (m_hi - m_lo)) if m_hi > m_lo else (lo + hi) // 2
        b = min(max(b, lo + 1), hi - 1)
        bisect = (hi - lo) * 2 > width
    if 1 <= lo < limit:
        at(lo + 1)
    return XlaMaxBatch(lo, tuple(sorted(known.items())))


def plan_max_batch(spec: ModelSpec | ModelFile, config: TrainingConfig, gpu_key: str, usable_bytes: int,
                   start: int, remat: str = "", **kwargs: Any) -> XlaMaxBatch:
    """``max_batch_xla`` over compiled plans: the largest per-device batch whose plan fits ``usable_bytes``."""
    from dataclasses import replace

    def needed(per_device: int) -> int:
        one = replace(config, batch_size=per_device, num_gpus=1)
        return compute_plan(spec, one, gpu_key, remat, **kwargs).peak_bytes

    return max_batch_xla(needed, usable_bytes, start)
