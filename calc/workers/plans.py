"""XLA's plan compiled in a child process, with a time limit and a memory budget.

The child (job ``plan-xla`` of ``calc.workers.child``) builds the model on Keras's JAX
backend and compiles its train step for a CUDA target without a GPU
(``calc.keras.plan.plan_in_process``); this is the parent's side: the child's
environment, its limits, and its answer or a one-line ``PlanError``.

A ``PlanWorker`` keeps one child for many compiles: the child keeps the last model it
built, so a further batch or card of the same configuration costs tracing and XLA's compile
only (about half a fresh child's time on catalogue models). It runs at a lower CPU priority
than the pages, ends with this process however it ends, and can be stopped halfway from
another thread (``cancel``) when nobody waits for its compile any more.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
import time
from typing import Any

from calc.workers.budgets import budget_bytes, gib
from calc.workers.pool import MemoryBusy, Reservation, shared_pool
from calc.workers.protocol import Child, Reply, background_env, child_command, child_env, resident_bytes, run_once
from calc.xla.plan import TIMEOUT_S, PlanError

COMPILE_NICE = 10  # the compile children's CPU priority below the server's (os.nice)
DUMP_ENV = "CALC_XLA_DUMP"  # the compile child's dump folder (calc.keras.plan reads it)


class PlanCancelled(PlanError):
    """The compile was stopped because nobody waits for it any more."""


class PlanBusy(PlanError):
    """The compile found no room in the children's memory pool (``calc.workers.pool``) in time."""


def plan_env(dump_dir: str | None = None) -> dict[str, str]:
    """The child's environment: Keras on JAX, JAX on the CPU, XLA compiling for CUDA.

    The autotuner would run candidate convolution algorithms on a device, so it is off:
    XLA then picks each convolution's algorithm without trying it, with no workspace.
    With ``dump_dir``, XLA writes the compiled step with its buffer assignment there
    (``calc.xla.peak`` reads what fills the peak from it; the child deletes it after).
    """
    env = child_env()
    flags = env.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0"
    if dump_dir:
        flags += f" --xla_dump_to={dump_dir} --xla_dump_hlo_as_proto --xla_dump_hlo_module_re=jit_train_step"
        env[DUMP_ENV] = dump_dir  # the folder the child reads and empties: its own, never one a user set
    env.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", XLA_FLAGS=flags.strip())
    return env


def _raise_for(reply: Reply, timeout_s: float, max_rss_bytes: int, tail: str) -> None:
    if reply.failure == "time":
        raise PlanError(f"the compile ran past {timeout_s:.0f} s and was stopped")
    if reply.failure == "memory":
        raise PlanError(f"the compile passed its memory budget of {gib(max_rss_bytes)} and was stopped")
    if reply.refusal is not None:
        if "ALG_DOT_BF16_BF16_F32" in reply.refusal:  # xla/service/algorithm_util.cc: cuBLAS from Ampere on
            raise PlanError("XLA cannot compile this step for this card: it multiplies bfloat16 matrices with "
                            "float32 sums, which XLA runs only on compute capability 8.0 (Ampere) or newer. "
                            "A real card of this kind refuses it too; choose float32 or mixed_float16 for it")
        raise PlanError(f"XLA could not compile this step: {_one_line(reply.refusal)}")
    if reply.failure:
        raise PlanError(f"the compile failed: {_one_line(tail)}")


def refuse_unbuildable(request: dict[str, Any], max_rss_bytes: int) -> None:
    """Raises ``PlanError`` before a child starts when the request's model needs more than
    ``max_rss_bytes`` for its weights alone (``calc.catalogue.build_bytes_at_least``): the child
    builds the model's weights before it compiles, and would be stopped for memory."""
    from calc.catalogue import ModelSpec, build_bytes_at_least
    from calc.requests import spec_from_dict

    try:
        spec = spec_from_dict(request["spec"])
    except (KeyError, TypeError, ValueError):
        return  # the child says what is wrong with the request
    if isinstance(spec, ModelSpec) and (need := build_bytes_at_least(spec)) > max_rss_bytes:
        raise PlanError(f"building {spec.name} at {spec.height}x{spec.width} needs more than {gib(need)} for "
                        f"its weights alone, past a compile's memory budget of {gib(max_rss_bytes)}: not started")


def compile_plan(request: dict[str, Any], *, timeout_s: float = TIMEOUT_S, max_rss_bytes: int | None = None,
                 poll_s: float = 0.25) -> dict[str, Any]:
    """XLA's memory analysis of the request's step (``calc.xla.cache.plan_request``), compiled
    in a fresh child; stops it past ``timeout_s`` or ``max_rss_bytes`` resident.

    Raises:
        PlanError: with one line saying why (the limits, XLA refused, the child ended).
    """
    # One compile peaked at 0.9-2.4 GiB resident on catalogue models.
    max_rss_bytes = budget_bytes("compile") if max_rss_bytes is None else max_rss_bytes
    refuse_unbuildable(request, max_rss_bytes)
    try:
        with tempfile.TemporaryDirectory(prefix="calc-xla-dump-") as dump:
            outcome = run_once("plan-xla", request, env=plan_env(dump), timeout_s=timeout_s,
                               max_rss_bytes=max_rss_bytes, poll_s=poll_s, tail_lines=2)
    except MemoryBusy as exc:
        raise PlanBusy(str(exc)) from None
    _raise_for(outcome.reply, timeout_s, max_rss_bytes, f"{outcome.exit_reason}: {' | '.join(outcome.tail)}")
    return {**outcome.reply.answer, "worker_peak_rss_bytes": outcome.reply.peak_rss_bytes}


def family_of(request: dict[str, Any]) -> str:
    """What a warm child keeps across requests: the request but its batch and its card."""
    return json.dumps([request.get("spec"), {**request.get("config", {}), "batch_size": 0}, request.get("remat")],
                      sort_keys=True)


class PlanWorker:
    """One long-lived child that compiles plans, keeping the last model it built.

    Args:
        max_rss_bytes: the memory budget (``calc.workers.budgets``, "compile"): a compile is
            stopped past it, and the child is replaced before it builds another model while
            it holds more than half of it.
        nice: how far below this process's CPU priority the child runs.

    The child ends when this process ends, also when it is killed (``background_env``):
    start the worker's compiles from a thread that lives as long as the process.
    """

    def __init__(self, *, max_rss_bytes: int | None = None, nice: int = COMPILE_NICE) -> None:
        self.max_rss_bytes = budget_bytes("compile") if max_rss_bytes is None else max_rss_bytes
        self.nice = nice
        self._child: Child | None = None
        self._dump = ""  # the folder the child's XLA dumps go to
        self._family: str | None = None  # the model the child holds
        self._lock = threading.Lock()  # one compile at a time
        self._state = threading.Lock()  # guards _child and _cancelled against cancel()
        self._cancelled = False
        self._closed = False  # closed: no further compile starts
        self._reserved = Reservation(shared_pool(), "an XLA compile")  # the child's share of the memory pool
        self.waiting_for_memory = False  # a compile waits for room in the pool (the page says so)
        self.started = 0  # children started so far

    @property
    def family(self) -> str | None:
        """The configuration whose model the child holds (``family_of``), or None."""
        return self._family

    def compile(self, request: dict[str, Any], *, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
        """The child's answer for ``request``; raises ``PlanError`` (``PlanCancelled`` after ``cancel``)."""
        family = family_of(request)
        with self._lock:
            with self._state:
                if self._closed:
                    raise PlanCancelled("the compile was stopped: the server is ending")
                self._cancelled = False
            refuse_unbuildable(request, self.max_rss_bytes)
            limit = self._reserve(timeout_s)
            with self._state:
                child = self._ready_child(family)
            reply = child.ask(request, timeout_s=timeout_s, max_rss_bytes=limit)
            with self._state:
                cancelled = self._cancelled
                if reply.failure:
                    self._stop()
                else:
                    self._family = family
                    self._reserved.resize(resident_bytes(child.proc.pid))  # between compiles, what it holds
            if cancelled and reply.failure:
                raise PlanCancelled("the compile was stopped: nobody waits for it any more")
            if reply.refusal is not None:  # the child may hold a half-built model: start afresh next time
                with self._state:
                    self._family = None
            _raise_for(reply, timeout_s, limit, " | ".join(child.tail(2)) or "the child ended")
            return {**reply.answer, "worker_peak_rss_bytes": reply.peak_rss_bytes}

    def _reserve(self, wait_s: float) -> int:
        """The compile's budget from the pool all children share, waiting up to ``wait_s`` for room
        (a second at a time, so that ``cancel`` ends the wait)."""
        deadline, step = time.monotonic() + wait_s, 0.0  # at once if there is room, else a second at a time
        try:
            while True:
                try:
                    return self._reserved.resize(self.max_rss_bytes,
                                                 wait_s=max(0.0, min(step, deadline - time.monotonic())))
                except MemoryBusy as exc:
                    step = 1.0
                    self.waiting_for_memory = True
                    if self._cancelled:
                        raise PlanCancelled("the compile was stopped: nobody waits for it any more") from None
                    if time.monotonic() >= deadline:
                        raise PlanBusy(str(exc)) from None
        finally:
            self.waiting_for_memory = False

    def _ready_child(self, family: str) -> Child:
        child = self._child
        if child is not None and (child.proc.poll() is not None or
                                  (family != self._family and resident_bytes(child.proc.pid) > self.max_rss_bytes // 2)):
            self._stop()  # ended, or too big to build another model in
            child = None
        if child is None:
            self._dump = tempfile.mkdtemp(prefix="calc-xla-dump-")  # the child's XLA dumps, gone with it
            child = self._child = Child(child_command("plan-xla"), background_env(plan_env(self._dump), self.nice))
            self._family = None
            self.started += 1
        return child

    def cancel(self) -> bool:
        """Stops the compile in progress (from another thread); False when none runs."""
        with self._state:
            if not self._lock.locked():
                return False
            self._cancelled = True
            if self._child is not None:  # none yet while it waits for room in the memory pool
                self._child.kill()
            return True

    def close(self) -> None:
        """Ends the child at once and starts no further compile; a compile in progress fails as
        cancelled, and its thread cleans up."""
        with self._state:
            self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                with self._state:
                    self._stop()
            finally:
                self._lock.release()
        else:
            self.cancel()

    def _stop(self) -> None:
        child, self._child, self._family = self._child, None, None
        if child is not None:
            child.kill()
            child.close(wait_s=1)
        if self._dump:
            shutil.rmtree(self._dump, ignore_errors=True)
            self._dump = ""
        self._reserved.release()


def _one_line(text: str, limit: int = 300) -> str:
    """A child's message as one plain line: no terminal colours, no line breaks, bounded."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(text)).split())[:limit]
