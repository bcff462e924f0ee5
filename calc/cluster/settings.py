"""The cluster's settings, as plain data: the kinds of worker, how many a host runs, their memory limits, and
where a shared cluster's scheduler is (docs/HOSTING.md)."""

from __future__ import annotations

import os

PLAN, BUILD = "plan", "build"  # the kinds of worker: the Dask resource each offers (calc.cluster.worker)
KINDS = (PLAN, BUILD)
ADDRESS_ENV = "CALC_DASK_SCHEDULER"  # a cluster's scheduler (tcp://host:8786); unset: one of this host's own
PLAN_WORKERS_ENV = "CALC_XLA_WORKERS"


def plan_workers() -> int:
    """Compile workers of this host's own cluster: ``CALC_XLA_WORKERS``, else one per four cores (one on a
    small host). A compile keeps about one core busy and holds 1-3 GiB (``CALC_COMPILE_GIB`` is its limit)."""
    try:
        value = int(os.environ.get(PLAN_WORKERS_ENV, "0"))
    except ValueError:
        value = 0
    return max(1, min(8, value if value > 0 else (os.cpu_count() or 1) // 4))


def own_workers() -> dict[str, int]:
    """A server's own cluster: ``plan_workers()`` compile workers and one build worker."""
    return {PLAN: plan_workers(), BUILD: 1}


def worker_limits() -> dict[str, int]:
    """Each kind's memory limit in bytes: a compile's budget, and twice a build's (a build past its budget
    is let finish, and its worker restarted after it)."""
    from calc.workers.budgets import budget_bytes

    return {PLAN: budget_bytes("compile"), BUILD: 2 * budget_bytes("build")}


def shared_cluster() -> str | None:
    """The scheduler of a cluster elsewhere (``CALC_DASK_SCHEDULER``), or None: this host's own."""
    return os.environ.get(ADDRESS_ENV) or None
