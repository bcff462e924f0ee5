"""XLA's plan compiled in a child process, with a time limit and a memory budget.

The child (job ``plan-xla`` of ``calc.workers.child``) builds the model on Keras's JAX
backend and compiles its train step for a CUDA target without a GPU
(``calc.keras.plan.plan_in_process``); this is the parent's side: the child's
environment, its limits, and its answer or a one-line ``PlanError``.
"""

from __future__ import annotations

import re
from typing import Any

from calc.workers.budgets import budget_bytes, gib
from calc.workers.protocol import child_env, run_once
from calc.xla.plan import TIMEOUT_S, PlanError



def plan_env() -> dict[str, str]:
    """The child's environment: Keras on JAX, JAX on the CPU, XLA compiling for CUDA.

    The autotuner would run candidate convolution algorithms on a device, so it is off:
    XLA then picks each convolution's algorithm without trying it, with no workspace.
    """
    env = child_env()
    flags = env.get("XLA_FLAGS", "")
    env.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               XLA_FLAGS=(flags + " --xla_gpu_autotune_level=0").strip())
    return env


def compile_plan(request: dict[str, Any], *, timeout_s: float = TIMEOUT_S, max_rss_bytes: int | None = None,
                 poll_s: float = 0.25) -> dict[str, Any]:
    """XLA's memory analysis of the request's step (``calc.xla.cache.plan_request``), compiled
    in a fresh child; stops it past ``timeout_s`` or ``max_rss_bytes`` resident.

    Raises:
        PlanError: with one line saying why (the limits, XLA refused, the child ended).
    """
    # One compile peaked at 0.9-2.4 GiB resident on catalogue models.
    max_rss_bytes = budget_bytes("compile") if max_rss_bytes is None else max_rss_bytes
    outcome = run_once("plan-xla", request, env=plan_env(), timeout_s=timeout_s, max_rss_bytes=max_rss_bytes,
                       poll_s=poll_s, tail_lines=2)
    reply = outcome.reply
    if reply.failure == "time":
        raise PlanError(f"the compile ran past {timeout_s:.0f} s and was stopped")
    if reply.failure == "memory":
        raise PlanError(f"the compile passed its memory budget of {gib(max_rss_bytes)} and was stopped")
    if reply.refusal is not None:
        raise PlanError(f"XLA could not compile this step: {_one_line(reply.refusal)}")
    if not reply.failure:
        return {**reply.answer, "worker_peak_rss_bytes": reply.peak_rss_bytes}
    raise PlanError(f"the compile failed: {outcome.exit_reason}: {_one_line(' | '.join(outcome.tail))}")


def _one_line(text: str, limit: int = 300) -> str:
    """A child's message as one plain line: no terminal colours, no line breaks, bounded."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(text)).split())[:limit]
