"""Keras builds in one long-lived child process, so a server never imports TensorFlow.

Building a catalogue model allocates its weights even with ``weights=None``, and
TensorFlow's CPU allocator keeps the memory afterwards: measured here, one process
that built every catalogue model held 1.2 GiB after TensorFlow's import and 2.3 GiB
after ConvNeXtXLarge (``malloc_trim`` returned nothing). A child that does the builds
keeps that out of the server: it is started on the first build (paying TensorFlow's
import once), serves builds one at a time over a pipe, is replaced when its resident
memory passes a limit, and exits after a while without work or when the server ends
(its stdin closes). A crash or a hang in it is an error for that request only.
"""

from __future__ import annotations

import threading

from calc.catalogue import ModelSpec, build_bytes_at_least
from calc.profile_json import profile_from_dict
from calc.requests import spec_to_dict
from calc.types import ModelProfile
from calc.workers.budgets import budget_bytes, gib
from calc.workers.failures import FailureMemory
from calc.workers.pool import MemoryBusy, Reservation, shared_pool
from calc.workers.protocol import Child, child_command, child_env, resident_bytes


class BuildError(ValueError):
    """The builder could not produce a profile (the reason is in the message)."""


# The slowest catalogue builds (EfficientNetB7, NASNetLarge: 800-1,000 layers) took 28-32 s on a
# busy 2-core machine, the child's start 10-15 s more: a build past this is stopped, so that the
# builds queued behind it (dashboard.turns.BUILDS) wait at most this long for one.
BUILD_TIMEOUT_S = 90.0
# A build stopped for a limit (its time or memory) is answered from memory this long, so that
# reloads of one link (or eight tabs asking for the same size) do not rebuild it each time.
FAILURE_MEMORY_S = 1800.0
MAX_FAILURES_KEPT = 256


class BuildWorker:
    """One child process that turns ``ModelSpec``s into ``ModelProfile``s.

    Args:
        max_rss_bytes: the budget (``calc.workers.budgets``, "build"): a build is stopped past
            twice this, and the child is replaced after a build that leaves it above this.
        idle_s: the child exits after this long without a request.
        timeout_s: one build longer than this is stopped (and the child with it).
    """

    command = tuple(child_command("build"))

    def __init__(self, *, max_rss_bytes: int | None = None, idle_s: float = 600.0,
                 timeout_s: float = BUILD_TIMEOUT_S) -> None:
        self.max_rss_bytes = budget_bytes("build") if max_rss_bytes is None else max_rss_bytes
        # During a build the watchdog allows twice the budget: a catalogue build is checked
        # before it starts (calc.catalogue.MAX_PARAMS), and the child is replaced after one
        # that leaves it above the budget.
        self.stop_rss_bytes = 2 * self.max_rss_bytes
        self.idle_s = idle_s
        self.timeout_s = timeout_s
        self._child: Child | None = None
        self._lock = threading.Lock()
        self._idle_timer: threading.Timer | None = None
        self.started = 0  # children started so far
        self.builds = 0
        self.failures = FailureMemory(MAX_FAILURES_KEPT)  # builds stopped for a limit
        self._reserved = Reservation(shared_pool(), "a model's build")  # the child's share of the memory pool

    @property
    def pid(self) -> int | None:
        return self._child.proc.pid if self._child is not None and self._child.proc.poll() is None else None

    def build(self, spec: ModelSpec) -> ModelProfile:
        """Builds ``spec`` in the child and returns its profile; raises ``BuildError``.

        A build whose weights alone need more than the budget (``build_bytes_at_least``) is
        refused before it starts; one stopped for its time or memory limit fails again at once
        for ``FAILURE_MEMORY_S``, without a child.
        """
        with self._lock:
            if (failed := self.failures.recall(spec)) is not None:
                message, age_s = failed
                raise BuildError(f"{message} ({age_s / 60:.0f} min ago; not tried again for "
                                 f"{FAILURE_MEMORY_S / 60:.0f} minutes)")
            if (need := build_bytes_at_least(spec)) > self.stop_rss_bytes:
                raise BuildError(f"Building {spec.name} at {spec.height}x{spec.width} needs more than "
                                 f"{gib(need)} for its weights alone, past the builder's memory budget of "
                                 f"{gib(self.stop_rss_bytes)}: not started. Use a smaller image, fewer classes "
                                 "or include_top=False.")
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            try:  # the build's budget, from the pool all children share
                limit = self._reserved.resize(self.stop_rss_bytes, wait_s=self.timeout_s)
            except MemoryBusy as exc:
                self._arm_idle_timer()
                raise BuildError(str(exc)) from None
            child = self._ensure_started()
            reply = child.ask(spec_to_dict(spec), timeout_s=self.timeout_s, max_rss_bytes=limit)
            if reply.failure:
                self._stop()
                reasons = {"time": f"it took more than {self.timeout_s:.0f} s and was stopped",
                           "memory": f"it passed the builder's memory budget of {gib(limit)}"}
                reason = reasons.get(reply.failure, "the builder process ended (out of memory?)")
                message = f"Building {spec.name} at {spec.height}x{spec.width} failed: {reason}"
                if reply.failure in reasons:
                    self.failures.remember(spec, message, FAILURE_MEMORY_S)
                raise BuildError(message)
            self.builds += 1
            held = resident_bytes(child.proc.pid)
            if held > self.max_rss_bytes:
                self._stop()  # the next build starts a fresh child
            else:
                self._reserved.resize(held)  # between builds, what it holds
            self._arm_idle_timer()
        if reply.refusal is not None:
            raise BuildError(reply.refusal)
        return profile_from_dict(reply.answer)

    def close(self) -> None:
        with self._lock:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._stop()

    def _ensure_started(self) -> Child:
        if self._child is None or self._child.proc.poll() is not None:
            if self._child is not None:
                self._stop()
            self._child = Child(self.command, child_env())
            self.started += 1
        return self._child

    def _arm_idle_timer(self) -> None:
        self._idle_timer = threading.Timer(self.idle_s, self._stop_if_idle)
        self._idle_timer.daemon = True
        self._idle_timer.start()

    def _stop_if_idle(self) -> None:
        if self._lock.acquire(blocking=False):  # a build in progress is not idle
            try:
                self._stop()
            finally:
                self._lock.release()

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.close(wait_s=5)  # the child's loop ends on end of input
        self._reserved.release()
