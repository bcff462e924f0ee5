"""The one room for long work, below the pages: wants, leases and order, over the engine (``calc.cluster``).

- ``calc.service.wants``: what a page waits for (``Want``), the task it names now, where it stands (``Progress``).
- ``calc.service.work``: ``WorkService``, the sessions' wants on a lease, handed to the engine by urgency.
- ``calc.service.times``: this host's build and compile times, and the estimates the pages show.

Nothing here imports Streamlit or Dask.
"""

from __future__ import annotations

import atexit
import threading

from calc.service.work import WorkService
from calc.service.tasks import COMPILES_ENV, compiles_enabled
from calc.service.wants import BuildTask, Kind, PlanTask, Progress, Setup, Task, Want, model_kind

_service: WorkService | None = None
_guard = threading.Lock()


def service() -> WorkService:
    """This process's service, made on first use; its tasks are released when the process ends."""
    global _service
    with _guard:
        if _service is None:
            _service = WorkService()
            atexit.register(_service.shutdown)
        return _service


__all__ = ["COMPILES_ENV", "BuildTask", "Kind", "PlanTask", "Progress", "Setup", "Task", "Want", "WorkService",
           "compiles_enabled", "model_kind", "service"]
