"""XLA's plan of a training step, found or compiled once: the package's entry points.

A plan known already (shipped or on disk, ``calc.xla.cache``) is read; otherwise one child
compiles it (``calc.workers.plans``), one compile at a time per machine, one flight for
identical requests. Imports neither JAX nor Keras.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import replace
from typing import Any, Callable

import calc.xla.cache as cache
from calc.catalogue import ModelFile, ModelSpec
from calc.types import TrainingConfig
from calc.workers import plans as plan_child
from calc.xla.plan import TIMEOUT_S, PlanError, XlaPlan, plan_from_analysis
from calc.xla.targets import target_for

_flights: dict[str, threading.Lock] = {}
_flights_guard = threading.Lock()
COMPILES: list[str] = []  # cache keys compiled by this process, in order (tests check single flight)


def _machine_lock(timeout_s: float) -> Any:
    """One compile at a time on this machine, across processes: an exclusive lock on a file."""
    import fcntl  # POSIX only: imported here so that the rest of the module imports anywhere

    folder = cache.cache_dir()
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
    if (reason := cache.unavailable_reason()) is not None:
        raise PlanError(reason)
    request = cache.plan_request(spec, config, target, remat)
    key = cache.cache_key(request, cache.plan_versions() or {})
    if (raw := cache.read_cached(key)) is not None:
        return plan_from_analysis(raw, target.key, remat)
    with _flights_guard:
        flight = _flights.setdefault(key, threading.Lock())
    with flight:  # a second identical request waits here, then finds the first one's answer
        if (raw := cache.read_cached(key)) is None:
            lock = _machine_lock(wait_s)
            try:
                if (raw := cache.read_cached(key)) is None:  # another process may have compiled it meanwhile
                    raw = (runner or functools.partial(plan_child.compile_plan, timeout_s=timeout_s))(request)
                    COMPILES.append(key)
                    cache.write_cached(key, raw)
            finally:
                lock.close()
    return plan_from_analysis(raw, target.key, remat)


def cached_plan(spec: ModelSpec | ModelFile, config: TrainingConfig, gpu_key: str, remat: str = "") -> XlaPlan | None:
    """The plan if it is already known (shipped or on disk), without compiling; None otherwise."""
    try:
        target = target_for(gpu_key)
        versions = cache.plan_versions()
        if versions is None:
            return None
        raw = cache.read_cached(cache.cache_key(cache.plan_request(spec, config, target, remat), versions))
    except (PlanError, OSError):
        return None
    return None if raw is None else plan_from_analysis(raw, target.key, remat)


def known_peaks(spec: ModelSpec | ModelFile, config: TrainingConfig, gpu_key: str, batches: list[int],
                remat: str = "", versions: dict[str, str] | None = None) -> dict[int, int]:
    """Per-device batch -> planned peak bytes, for the batches whose plans are already known.

    Never compiles. ``versions`` (``calc.xla.cache.plan_versions()``, read once by the caller) saves reading
    the packages' metadata for each of a curve's hundred batches.
    """
    versions = versions or cache.plan_versions()
    try:
        target = target_for(gpu_key)
    except PlanError:
        return {}
    if versions is None:
        return {}
    peaks = {}
    for batch in sorted(set(batches)):
        request = cache.plan_request(spec, replace(config, batch_size=batch, num_gpus=1), target, remat)
        if (raw := cache.read_cached(cache.cache_key(request, versions))) is not None:
            peaks[batch] = plan_from_analysis(raw, target.key, remat).peak_bytes
    return peaks
