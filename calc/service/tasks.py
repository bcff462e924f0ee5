"""One task's life outside the service's books: what a worker is given and the key it runs under, what its
answer leaves in the stores every page reads, and its failure as one line."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from calc import xla
from calc.catalogue import ModelSpec
from calc.service.wants import BuildTask, Task

COMPILES_ENV = "CALC_XLA_COMPILES"
PRIORITY_BASE = 10_000  # a task's priority: PRIORITY_BASE - 1,000 x urgency - the session's turn


def compiles_enabled() -> bool:
    """False when ``CALC_XLA_COMPILES`` is off, 0, false or no: use shipped and cached plans only."""
    return os.environ.get(COMPILES_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def priority_of(urgency: int, turn: int) -> int:
    """The engine's priority of a task (higher first): by urgency, then the session's turn (its earlier
    tasks of that urgency still in the engine)."""
    return PRIORITY_BASE - 1000 * urgency - min(turn, 999)


def prepare(task: Task) -> tuple[Any, str]:
    """(the worker's argument, the task's key); raises ``ValueError`` (one line) for a task refused
    before it starts: no XLA here, no target, a model whose weights alone pass the worker's limit."""
    from calc.catalogue import build_bytes_at_least
    from calc.cluster.settings import worker_limits
    from calc.requests import spec_to_dict
    from calc.workers.budgets import gib

    if isinstance(task, BuildTask):
        spec, limit = task.spec, worker_limits()["build"]
        if (need := build_bytes_at_least(spec)) > limit:
            raise ValueError(f"Building {spec.name} at {spec.height}x{spec.width} needs more than {gib(need)} "
                             f"for its weights alone, past the builder's memory limit of {gib(limit)}: not "
                             "started. Use a smaller image, fewer classes or include_top=False.")
        return spec_to_dict(spec), f"build-{spec.key}"
    setup = task.setup
    try:
        request, family = xla.family_request(setup.spec, replace(setup.config, batch_size=task.batch),
                                             setup.gpu_key, setup.remat)
    except xla.PlanError as exc:
        raise ValueError(str(exc)) from None
    limit = worker_limits()["plan"]
    if isinstance(setup.spec, ModelSpec) and (need := build_bytes_at_least(setup.spec)) > limit:
        raise ValueError(f"building {setup.spec.name} at {setup.spec.height}x{setup.spec.width} needs more than "
                         f"{gib(need)} for its weights alone, past a compile's memory limit of {gib(limit)}: "
                         "not started")
    return request, f"plan-{family}-{task.batch}"


def store(task: Task, answer: dict[str, Any], explain: bool) -> str | None:
    """Keeps a task's answer where every page reads it; a failure line where the answer says less than
    its wants asked."""
    from calc.profile_json import profile_from_dict
    from calc.profiles import store_profile
    from calc.xla import cache

    if isinstance(task, BuildTask):
        store_profile(task.spec, profile_from_dict(answer["profile"]))
        return None
    request, family = xla.family_request(task.setup.spec, replace(task.setup.config, batch_size=task.batch),
                                         task.setup.gpu_key, task.setup.remat)
    cache.write_cached(family, task.batch, answer)
    if explain and "peak" not in answer:  # not asked again for every page
        return "this compile did not say what fills the peak"
    return None


def build_budget() -> int:
    """A build worker's budget (``CALC_BUILD_GIB``): a worker left above it after a build is restarted."""
    from calc.workers.budgets import budget_bytes

    return budget_bytes("build")


def outcome(future: Any, task: Task) -> tuple[dict[str, Any] | None, str | None]:
    """(the answer, None) of a finished future, or (None, one line why it failed; None when it was released)."""
    from calc.workers.budgets import gib

    status = getattr(future, "status", "")
    if status == "cancelled":
        return None, None
    try:
        return future.result(timeout=60), None
    except Exception as exc:  # noqa: BLE001 - every failure is one line on the page
        name = type(exc).__name__
        if name == "KilledWorker":
            from calc.cluster.settings import worker_limits

            what = "compile" if task.work == "plan" else "build"
            return None, (f"the {what} ended its worker twice (past the worker's memory limit of "
                          f"{gib(worker_limits()[task.work])}?) and was stopped")
        if name in ("CancelledError", "FutureCancelledError"):
            return None, None
        return None, " ".join(str(exc).split())[:300] or name
