"""XLA's plan of a training step, found or compiled once, and a configuration's curve: the
package's entry points.

A plan known already (shipped or on disk, ``calc.xla.cache``) is read; otherwise a worker of the
engine compiles it (``calc.cluster``: this process's own cluster, or ``CALC_DASK_SCHEDULER``'s; the
worker keeps the model built for the next batch), one compile at a time per machine where the
cluster is this process's own, one flight for identical requests. Imports neither JAX nor Keras.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import calc.xla.cache as cache
from calc.catalogue import ModelFile, ModelSpec
from calc.cluster.engine import run_plan
from calc.cluster.settings import shared_cluster
from calc.hub import HubSpec
from calc.types import TrainingConfig
from calc.xla.curve import PlanCurve, compiled_point, slop_percent
from calc.xla.plan import TIMEOUT_S, PlanError, XlaPlan, drawn_plan, plan_from_analysis
from calc.xla.targets import target_for

LOCK_HANDOFF_S = 0.5
_flights: dict[tuple[str, int], threading.Lock] = {}
_flights_guard = threading.Lock()
COMPILES: list[tuple[str, int]] = []  # (family, batch) compiled by this process, in order (tests check single flight)


def _machine_lock(timeout_s: float) -> Any | None:
    """One compile at a time on this machine, across processes: an exclusive lock on a file."""
    import fcntl  # POSIX only: imported here so that the rest of the module imports anywhere

    folder = cache.cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        f = open(folder / "compile.lock", "w")
    except OSError:
        return None  # no cache folder to lock in (read-only, or not a folder): compile without the lock
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


def family_request(spec: ModelSpec | ModelFile | HubSpec, config: TrainingConfig, gpu_key: str,
                   remat: str = "") -> tuple[dict[str, Any], str]:
    """(the child's request at the config's one-device batch, its family's cache key).

    Raises:
        PlanError: no XLA here, no target for ``gpu_key``, an unknown remat mode.
    """
    target = target_for(gpu_key)
    if (reason := cache.unavailable_reason()) is not None:
        raise PlanError(reason)
    request = cache.plan_request(spec, config, target, remat)
    return request, cache.family_key(request, cache.plan_versions() or {})


def compile_request(request: dict[str, Any], key: str, *, timeout_s: float = TIMEOUT_S, wait_s: float = 2 * TIMEOUT_S,
                    runner: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                    exclusive: bool = True, explained: bool = False) -> dict[str, Any]:
    """The child's answer for ``request`` (family ``key``): from the cache, or compiled once and kept.

    ``exclusive``: wait for other compiles on this machine first, where the engine's cluster is this
    process's own (the command line); on a shared cluster (``CALC_DASK_SCHEDULER``) the engine orders them.
    ``explained``: a known answer without what fills its peak (``calc.xla.peak``; the shipped plans
    leave it out) is compiled again.
    """
    batch = cache.request_batch(request)

    def known() -> dict[str, Any] | None:
        raw = cache.read_cached(key, batch)
        return None if raw is None or (explained and "peak" not in raw) else raw

    if (raw := known()) is not None:
        return raw
    with _flights_guard:
        flight = _flights.setdefault((key, batch), threading.Lock())
    with flight:  # a second identical request waits here, then finds the first one's answer
        if (raw := known()) is None:
            lock = _machine_lock(wait_s) if exclusive and not shared_cluster() else None
            try:
                if (raw := known()) is None:  # another process may have compiled it meanwhile
                    run = runner or (lambda r: run_plan(r, key, timeout_s=timeout_s))
                    raw = run(request)
                    COMPILES.append((key, batch))
                    cache.write_cached(key, batch, raw)
            finally:
                if lock is not None:
                    lock.close()
                    # The machine to another process that waits for it: this one's next compile would
                    # otherwise take the lock again before a waiter's next try (every 0.2 s).
                    time.sleep(LOCK_HANDOFF_S)
    return raw


def compute_plan(spec: ModelSpec | ModelFile | HubSpec, config: TrainingConfig, gpu_key: str, remat: str = "", *,
                 timeout_s: float = TIMEOUT_S, wait_s: float = 2 * TIMEOUT_S,
                 runner: Callable[[dict[str, Any]], dict[str, Any]] | None = None, explained: bool = False) -> XlaPlan:
    """XLA's plan of one training step for a GPU preset, from the cache or compiled once.

    Args:
        spec: a catalogue model or a saved file.
        config: the training setup; the per-device batch is compiled.
        gpu_key: a GPU preset key (``calc.gpus.GPU_PRESETS``).
        remat: a ``keras.RematScope`` mode (``REMAT_MODES``) or "" for none.
        timeout_s: the compile's time limit.
        wait_s: how long to wait for other compiles on this machine first.
        runner: runs the child (tests replace it).
        explained: compile again a known plan that lacks what fills its peak (``XlaPlan.explained``).

    Returns:
        An ``XlaPlan`` whose components sum to ``peak_bytes``.

    Raises:
        PlanError: with a one-line reason (no jax here, no target, XLA refused, time-out).
    """
    request, key = family_request(spec, config, gpu_key, remat)
    raw = compile_request(request, key, timeout_s=timeout_s, wait_s=wait_s, runner=runner, explained=explained)
    return plan_from_analysis(raw, target_for(gpu_key).key, remat)


def cached_plan(spec: ModelSpec | ModelFile | HubSpec, config: TrainingConfig, gpu_key: str, remat: str = "") -> XlaPlan | None:
    """The plan if it is already known (shipped or on disk), without compiling; None otherwise."""
    try:
        request, key = family_request(spec, config, gpu_key, remat)
    except (PlanError, OSError):
        return None
    raw = cache.read_cached(key, cache.request_batch(request))
    return None if raw is None else plan_from_analysis(raw, target_for(gpu_key).key, remat)


@dataclass(frozen=True)
class KnownPlans:
    """Every plan known for one configuration on one card, at any batch, and the curve they make."""

    plans: dict[int, XlaPlan]  # one-device batch -> compiled plan
    curve: PlanCurve

    def at(self, batch: int) -> XlaPlan | None:
        """The plan at a one-device batch: compiled, or drawn on the curve's line (``XlaPlan.drawn_through``);
        None where the curve has neither (near the card's memory, or fewer than two plans to draw from)."""
        if batch in self.plans:
            return self.plans[batch]
        point = self.curve.drawn(batch)
        if point is None:
            return None
        a, b = point.through
        return drawn_plan(self.plans[a], a, self.plans[b], b, batch, point.peak_bytes)


def known_plans(spec: ModelSpec | ModelFile | HubSpec, config: TrainingConfig, gpu_key: str, remat: str = "") -> KnownPlans:
    """Every plan known for this configuration at any batch (shipped or on disk); never compiles.

    Empty where no plan can be made here (no XLA, no target).
    """
    try:
        target = target_for(gpu_key)
        request, key = family_request(spec, config.at_replica_batch(1), gpu_key, remat)
    except (PlanError, OSError):
        return KnownPlans({}, PlanCurve((), 0))
    raws = cache.read_family(key)
    plans = {b: plan_from_analysis(raw, target.key, remat) for b, raw in raws.items()}
    return KnownPlans(plans, PlanCurve.of((compiled_point(b, raw) for b, raw in raws.items()),
                                          target.device_memory_size, slop_percent(request.get("xla_flags", ""))))


def known_curve(spec: ModelSpec | ModelFile | HubSpec, config: TrainingConfig, gpu_key: str, remat: str = "") -> PlanCurve:
    """Every plan known for this configuration at any batch (shipped or on disk), as a curve; never compiles.

    Empty where no plan can be made here (no XLA, no target).
    """
    return known_plans(spec, config, gpu_key, remat).curve
