"""XLA's plan compiled in a fresh child process, with a time limit and a memory budget.

The child (job ``plan-xla`` of ``calc.workers.child``) builds the model on Keras's JAX
backend and compiles its train step for a CUDA target without a GPU
(``calc.keras.plan.plan_in_process``), in the environment a plan worker of the engine has
(``calc.cluster.worker.kind_env``). The dashboard and the command line compile on the engine's
workers (``calc.cluster``), which keep the model built; a fresh child is what the benchmarks and
tests compare them with (a cold compile, byte for byte the same plan).
"""

from __future__ import annotations

import re
import tempfile
from typing import Any

from calc.workers.budgets import budget_bytes, gib
from calc.workers.pool import MemoryBusy
from calc.workers.protocol import Reply, child_env, run_once
from calc.xla.plan import TIMEOUT_S, PlanError


class PlanBusy(PlanError):
    """The compile found no room in the children's memory pool (``calc.workers.pool``) in time."""


def plan_env(dump_dir: str | None = None) -> dict[str, str]:
    """The child's environment: a plan worker's (``calc.cluster.worker.kind_env``: Keras on JAX, JAX on the
    CPU, XLA compiling for CUDA with its autotuner off; with ``dump_dir``, the compiled step dumped there)."""
    from calc.cluster.worker import PLAN, kind_env

    return {**child_env(), **kind_env(PLAN, dump_dir or "")}


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


def _one_line(text: str, limit: int = 300) -> str:
    """A child's message as one plain line: no terminal colours, no line breaks, bounded."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(text)).split())[:limit]
