"""How long a build or a compile takes on this cluster, for the pages' "about N s".

Every finished task reports the seconds it ran on its worker. A task's estimate is, in order:

1. the median of the last ``KEPT`` tasks of the same work and model kind (a catalogue model's
   name, a KerasHub preset, "file"), on a worker that held the model (warm) or not (cold), timed
   here;
2. that model's reference time scaled by this cluster's pace: a compile's reference is the median
   the shipped plans record for that model (``calc.xla.cache.shipped_seconds``: building and tracing
   plus XLA's compile for a cold task, XLA's compile alone for a warm one), a build's the layers of
   the model's shipped ledger; the pace is the median, over the last ``KEPT_PACE`` tasks of that work
   and warmth timed here, of their seconds over their reference (before any, ``FIRST_PACE``);
3. for a model without a reference (a KerasHub preset nobody shipped, a saved file), the median
   of every task of that work and warmth timed here, else ``FIRST_GUESS_S``.

The pace follows the host: the same compile took 14 s on a quiet 2-core machine and 40 s while a
class kept both cores busy, and the estimates after the first few of a busy hour are that hour's.
"""

from __future__ import annotations

import functools
import statistics
import threading
from collections import defaultdict, deque
from dataclasses import dataclass

from calc.catalogue import CATALOGUE, make_spec
from calc.service.wants import BuildTask, PlanTask, Task

KEPT = 5  # a model's last tasks timed here
KEPT_PACE = 20  # tasks the pace is read from
# Before anything is timed here: seconds of a shipped reference second on this host (1.0: the machine
# that shipped the plans, two cores), and a build's seconds per layer (NASNetLarge's 1,040 layers built
# in 28-32 s on a busy 2-core machine).
FIRST_PACE = {"plan": 1.0, "build": 0.03}
FIRST_GUESS_S = {("plan", False): 45.0, ("plan", True): 15.0, ("build", False): 10.0, ("build", True): 10.0}


@functools.cache
def _layers(name: str) -> int | None:
    """The layers of a catalogue model's shipped ledger at its default size, or None."""
    from calc.profiles import _read_shipped

    profile = _read_shipped(make_spec(name, CATALOGUE[name].default_size))
    return None if profile is None else len(profile.layers)


def reference(task: Task, warm: bool) -> float | None:
    """The task's reference (``calc.service.times``'s second source), or None where there is none."""
    if isinstance(task, BuildTask):
        return None if task.spec.name not in CATALOGUE else _layers(task.spec.name)
    from calc.xla.cache import shipped_seconds

    cold_s, warm_s = shipped_seconds().get(task.setup.model, (None, None))
    return warm_s if warm else cold_s


class Times:
    """Seconds of the tasks timed on this cluster, and estimates from them (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_model: dict[tuple[str, str, bool], deque[float]] = defaultdict(lambda: deque(maxlen=KEPT))
        self._pace: dict[tuple[str, bool], deque[float]] = defaultdict(lambda: deque(maxlen=KEPT_PACE))
        self._all: dict[tuple[str, bool], deque[float]] = defaultdict(lambda: deque(maxlen=KEPT_PACE))

    def record(self, task: Task, warm: bool, seconds: float) -> None:
        """A task of ``task``'s work and model ran ``seconds`` on its worker."""
        ref = reference(task, warm)
        with self._lock:
            self._by_model[(task.work, _model(task), warm)].append(seconds)
            self._all[(task.work, warm)].append(seconds)
            if ref:
                self._pace[(task.work, warm)].append(seconds / ref)

    def estimate(self, task: Task, warm: bool) -> float:
        """About how many seconds ``task`` runs on a worker here (``warm``: one that holds its model)."""
        warm = warm and isinstance(task, PlanTask)
        with self._lock:
            mine = self._by_model.get((task.work, _model(task), warm))
            if mine:
                return statistics.median(mine)
            pace = self._pace.get((task.work, warm))
            every = self._all.get((task.work, warm))
            pace_now = statistics.median(pace) if pace else FIRST_PACE[task.work]
            measured_all = statistics.median(every) if every else None
        ref = reference(task, warm)
        if ref:
            return ref * pace_now
        return measured_all if measured_all is not None else FIRST_GUESS_S[(task.work, warm)]

    def timed(self) -> int:
        """Tasks timed so far."""
        with self._lock:
            return sum(len(d) for d in self._all.values())


def _model(task: Task) -> str:
    return task.spec.name if isinstance(task, BuildTask) else task.setup.model


@dataclass(frozen=True)
class Slot:
    """A queued or running task's place, as the engine's workers will take them."""

    ahead: int  # tasks of its work before it, those running included
    eta_s: float  # seconds from now until it ends
    warm: bool  # its worker holds its model (the task before it on that worker is of the same setup)


def place(tasks: list[Task], took: dict[Task, float], threads: int, times: Times) -> dict[Task, Slot]:
    """Where each of ``tasks`` (one work's, in the order the engine runs them: those running first) stands: a
    worker's next task starts when its current one ends, and runs what ``times`` estimates (a running one, less
    the ``took`` seconds it has run, at least a second more); a plan's worker is warm where its last task was of
    the same setup."""
    slots: dict[Task, Slot] = {}
    free: list[tuple[float, object]] = [(0.0, None)] * threads  # (seconds until the worker is free, what it holds)
    for ahead, task in enumerate(tasks):
        free.sort(key=lambda f: f[0])
        at, holds = free[0]
        warm = isinstance(task, PlanTask) and holds == task.setup
        end = at + max(1.0, times.estimate(task, warm) - took.get(task, 0.0))
        free[0] = (end, task.setup if isinstance(task, PlanTask) else None)
        slots[task] = Slot(ahead, end, warm)
    return slots
