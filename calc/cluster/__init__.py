"""The execution engine's boundary: Dask's distributed scheduler and this project's workers.

- ``calc.cluster.settings``: the kinds of worker, how many, their memory limits, a shared cluster's address.
- ``calc.cluster.engine``: this process's client of the cluster (its own, or ``CALC_DASK_SCHEDULER``'s),
  tasks submitted with a priority, what the workers run now, restarts.
- ``calc.cluster.worker``: the workers' side: their setup (``dask_setup``) and the work a task runs
  (``plan``, ``build``).
- ``python -m calc.cluster scheduler|worker``: a cluster on machines of its own (docs/HOSTING.md).

Only this package imports ``distributed``; ``calc.service`` decides what runs.
"""

from calc.cluster.engine import Engine, engine
from calc.cluster.settings import ADDRESS_ENV, plan_workers

__all__ = ["ADDRESS_ENV", "Engine", "engine", "plan_workers"]
