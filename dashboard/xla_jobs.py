"""XLA compiles in the background: one worker thread for the server, jobs keyed by what they compute.

A plan takes 15-120 s to compile (``calc.xla``), so no page waits for one. A page asks
for the plans it wants; identical requests share one job (single flight), a session holds at
most ``MAX_PER_SESSION`` unfinished jobs, and jobs nobody wants any more are dropped before
they start. ``calc.xla`` already allows one compile per machine at a time; a single
worker here keeps the queue, and each job's place in it, visible to the page.

``CALC_XLA_COMPILES=off`` (hosting operators, tests) turns compiling off: pages then show
only shipped or cached plans. Nothing here imports Streamlit. The one-line refusals are in the
asking session's language (``dashboard.i18n``); a job's error, made in the worker thread and
shared by every session that waits for it, stays in English.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable

from calc import xla
from calc.catalogue import ModelSpec
from calc.types import TrainingConfig
from dashboard.i18n import tr

COMPILES_ENV = "CALC_XLA_COMPILES"
MAX_PER_SESSION = 2
KEEP_FINISHED = 256  # finished jobs remembered (their errors; plans are also in the disk cache)
RETRY_AFTER_S = 300.0  # a failed job is tried again when asked for after this long (another compile held the machine)


def compiles_enabled() -> bool:
    """False when ``CALC_XLA_COMPILES`` is off, 0, false or no: use shipped and cached plans only."""
    return os.environ.get(COMPILES_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def one_device(config: TrainingConfig, batch: int | None = None) -> TrainingConfig:
    """The config XLA compiles: one device's batch (``calc.xla.cache.plan_request`` does the same)."""
    return replace(config, batch_size=batch or config.per_replica_batch, num_gpus=1)


def plan_key(spec: ModelSpec, config: TrainingConfig, gpu_key: str, remat: str) -> tuple:
    """One plan: the model, one device's step, the card, the remat mode ("" for none)."""
    return ("plan", spec, one_device(config), gpu_key, remat)


def max_batch_key(spec: ModelSpec, config: TrainingConfig, gpu_key: str, remat: str, plan_budget_bytes: int) -> tuple:
    """One largest-batch search: everything but the batch, and the bytes a plan may take."""
    return ("max_batch", spec, one_device(config, 1), gpu_key, remat, plan_budget_bytes)


@dataclass(eq=False)
class Job:
    """One background computation; times are ``time.time()`` seconds."""

    key: Hashable
    label: str  # what the page says it is doing: "ResNet50 224x224, batch 32 for NVIDIA T4"
    submitted_s: float
    sessions: set[str] = field(default_factory=set)
    started_s: float | None = None
    finished_s: float | None = None
    result: Any = None
    error: str | None = None  # one line
    future: Future | None = None

    @property
    def done(self) -> bool:
        return self.finished_s is not None

    @property
    def running(self) -> bool:
        return self.started_s is not None and not self.done

    def elapsed_s(self, now: float | None = None) -> float:
        """Seconds since it started (0 while queued), or how long it ran."""
        if self.started_s is None:
            return 0.0
        return (self.finished_s or now or time.time()) - self.started_s


class JobRegistry:
    """Background jobs run one at a time, in the order submitted."""

    def __init__(self, max_per_session: int = MAX_PER_SESSION, keep_finished: int = KEEP_FINISHED):
        self.max_per_session = max_per_session
        self.keep_finished = keep_finished
        self._lock = threading.Lock()
        self._jobs: dict[Hashable, Job] = {}  # in submission order
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="xla-plan")

    def get(self, key: Hashable) -> Job | None:
        with self._lock:
            return self._jobs.get(key)

    def submit(self, key: Hashable, work: Callable[[], Any], label: str, session: str) -> Job | str:
        """The job for ``key`` (an existing one is shared), or a one-line reason it was not queued."""
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and job.error and time.time() - (job.finished_s or 0) > RETRY_AFTER_S:
                del self._jobs[key]
                job = None
            if job is not None:
                job.sessions.add(session)
                return job
            mine = sum(1 for j in self._jobs.values() if session in j.sessions and not j.done)
            if mine >= self.max_per_session:
                return tr("waiting: this session already has {count} compiles queued or running (at most {most})",
                          count=mine, most=self.max_per_session)
            job = Job(key, label, time.time(), {session})
            self._jobs[key] = job
            job.future = self._pool.submit(self._run, job, work)
            return job

    def place(self, job: Job) -> int:
        """0 while running; else how many unfinished jobs are ahead of it (the running one included)."""
        with self._lock:
            if job.running or job.done:
                return 0
            ahead = 0
            for other in self._jobs.values():
                if other is job:
                    break
                ahead += not other.done
            return ahead

    def release(self, session: str, wanted: set[Hashable]) -> None:
        """The session no longer waits for its jobs outside ``wanted``; those nobody waits for and
        not yet started are dropped (a running compile cannot be stopped halfway usefully)."""
        with self._lock:
            for key, job in list(self._jobs.items()):
                if session not in job.sessions or key in wanted or job.done:
                    continue
                job.sessions.discard(session)
                if not job.sessions and job.started_s is None and job.future is not None and job.future.cancel():
                    del self._jobs[key]

    def unfinished(self) -> int:
        with self._lock:
            return sum(1 for j in self._jobs.values() if not j.done)

    def clear(self) -> None:
        """Forgets every job (tests); queued ones are cancelled, a running one finishes unseen."""
        with self._lock:
            for job in self._jobs.values():
                if job.future is not None:
                    job.future.cancel()
            self._jobs.clear()

    def _run(self, job: Job, work: Callable[[], Any]) -> None:
        job.started_s = time.time()
        try:
            job.result = work()
        except xla.PlanError as exc:
            job.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - the page shows one line, never a traceback
            job.error = f"the compile failed: {type(exc).__name__}: {exc}".splitlines()[0][:300]
        finally:
            job.finished_s = time.time()
            self._forget_old()

    def _forget_old(self) -> None:
        with self._lock:
            finished = [k for k, j in self._jobs.items() if j.done]
            for key in finished[: max(0, len(finished) - self.keep_finished)]:
                del self._jobs[key]


JOBS = JobRegistry()


def request_plan(spec: ModelSpec, config: TrainingConfig, gpu_key: str, remat: str, label: str,
                 session: str) -> Job | str:
    """Queues the compile of one plan (``calc.xla.compute_plan``, which caches it on disk)."""
    if not compiles_enabled():
        return tr("compiles are off on this server ({env}=off)", env=COMPILES_ENV)
    one = one_device(config)
    return JOBS.submit(plan_key(spec, config, gpu_key, remat),
                       lambda: xla.compute_plan(spec, one, gpu_key, remat), label, session)


def request_max_batch(spec: ModelSpec, config: TrainingConfig, gpu_key: str, remat: str, plan_budget_bytes: int,
                      start: int, label: str, session: str) -> Job | str:
    """Queues ``calc.xla.plan_max_batch``: the largest one-device batch whose plan takes at most
    ``plan_budget_bytes``, starting from ``start`` (the walk's answer); several compiles."""
    if not compiles_enabled():
        return tr("compiles are off on this server ({env}=off)", env=COMPILES_ENV)
    one = one_device(config)
    return JOBS.submit(max_batch_key(spec, config, gpu_key, remat, plan_budget_bytes),
                       lambda: xla.plan_max_batch(spec, one, gpu_key, plan_budget_bytes, start, remat),
                       label, session)


def known_plan(spec: ModelSpec, config: TrainingConfig, gpu_key: str, remat: str) -> xla.XlaPlan | None:
    """The plan if it is shipped, on disk, or a finished job's: never compiles."""
    plan = xla.cached_plan(spec, one_device(config), gpu_key, remat)
    if plan is None:
        job = JOBS.get(plan_key(spec, config, gpu_key, remat))
        if job is not None and isinstance(job.result, xla.XlaPlan):
            plan = job.result  # the disk cache could not be written
    return plan


def known_plan_peaks(spec: ModelSpec, config: TrainingConfig, gpu_key: str, remat: str,
                     batches: list[int]) -> dict[int, int]:
    """One-device batch -> plan peak bytes, for the batches whose plans are already known (shipped or on disk).

    The installed packages' versions are read once a process (about 10 ms each time).
    """
    return xla.known_peaks(spec, one_device(config), gpu_key, batches, remat, versions=_plan_versions())


@functools.cache
def _plan_versions() -> dict[str, str] | None:
    return xla.plan_versions()
