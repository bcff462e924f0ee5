"""How long a build or a compile takes on this cluster, for the pages' "about N s".

A task's time has two parts: the work it is (seconds on a core of its own) and the share of a core
it gets while it runs. On a host of the server's own cluster the workers run at ``nice`` 10 beside the
server, so they get the cores the server leaves, shared among the busy workers: a task's *speed* is
``min(1, (cores - the server's cores in use) / busy workers)`` (at least a tenth), sampled by the
service every round while the task runs. On a cluster elsewhere the cores are not known here, and
the speed is 1.

Every finished task reports the seconds it ran on its worker; times its average speed, that is its
work. A task's work is estimated, in order, from:

1. the median of the last ``KEPT`` tasks of the same work and model kind (a catalogue model's
   name, a KerasHub preset, "file"), on a worker that held the model (warm) or not (cold);
2. that model's reference scaled by this cluster's pace: a compile's reference is the median the
   shipped plans record for that model (``calc.xla.cache.shipped_seconds``: building and tracing
   plus XLA's compile for a cold task, XLA's compile alone for a warm one), a build's the layers of
   the model's shipped ledger; the pace is the median, over the last ``KEPT_PACE`` tasks of that work
   and warmth, of their work over their reference (before any, ``FIRST_PACE``);
3. for a model without a reference (a KerasHub preset nobody shipped, a saved file), the median
   work of every task of that work and warmth, else ``FIRST_GUESS_S``.

``place`` then runs the queues forward: each worker takes its next task when its current one ends,
and every busy worker runs at the speed the busy workers and the server leave it.
"""

from __future__ import annotations

import functools
import os
import statistics
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass

from calc.catalogue import CATALOGUE, make_spec
from calc.service.wants import BuildTask, PlanTask, Task

KEPT = 5  # a model's last tasks timed here
KEPT_PACE = 20  # tasks the pace is read from
# Before anything is timed here: a task's work in the shipped references' seconds (1.0: as on the machine
# that shipped the plans, two cores), and a build's seconds per layer (NASNetLarge's 1,040 layers built in
# 28-32 s on a busy 2-core machine).
FIRST_PACE = {"plan": 1.0, "build": 0.03}
FIRST_GUESS_S = {("plan", False): 45.0, ("plan", True): 15.0, ("build", False): 10.0, ("build", True): 10.0}
SLOWEST = 0.1  # a busy worker's speed never goes below this share of a core (the kernel's scheduler gives it some)


def speed(cores: float | None, busy: int, server_cores: float) -> float:
    """The share of a core each of ``busy`` workers gets on a host of ``cores`` where the server uses
    ``server_cores`` (the workers' lower CPU priority leaves the server what it asks for); 1 where the cores are
    not known (a cluster elsewhere)."""
    if cores is None or busy <= 0:
        return 1.0
    return max(SLOWEST, min(1.0, (cores - server_cores) / busy))


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
    """The work of the tasks timed on this cluster, and estimates from it (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_model: dict[tuple[str, str, bool], deque[float]] = defaultdict(lambda: deque(maxlen=KEPT))
        self._pace: dict[tuple[str, bool], deque[float]] = defaultdict(lambda: deque(maxlen=KEPT_PACE))
        self._all: dict[tuple[str, bool], deque[float]] = defaultdict(lambda: deque(maxlen=KEPT_PACE))

    def record(self, task: Task, warm: bool, seconds: float, at_speed: float = 1.0) -> None:
        """A task of ``task``'s work and model ran ``seconds`` on its worker, at ``at_speed`` on average."""
        work, ref = seconds * at_speed, reference(task, warm)
        with self._lock:
            self._by_model[(task.work, _model(task), warm)].append(work)
            self._all[(task.work, warm)].append(work)
            if ref:
                self._pace[(task.work, warm)].append(work / ref)

    def estimate(self, task: Task, warm: bool) -> float:
        """About how much work ``task`` is: its seconds on a core of its own (``warm``: on a worker that holds
        its model)."""
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


class Load:
    """This host's load, sampled by the service each round: the cores the server uses (this process; an
    average over the last rounds) and the work each running task has done so far, at the speed it got.

    Args:
        cores: the host's cores where the cluster is this host's own; None for a cluster elsewhere.
    """

    def __init__(self, cores: float | None) -> None:
        self.cores = cores
        self.server_cores = 0.0
        self._last = (time.monotonic(), _cpu_seconds())
        self.done: dict[str, float] = {}  # running task key -> its work done so far
        self._seen: dict[str, float] = {}  # running task key -> when its work was last added (time.time())

    def sample(self, running: dict[str, float]) -> float:
        """Adds what each running task (key -> when it started, ``time.time()``) has done since the last sample;
        returns the speed each gets now."""
        now, cpu = time.monotonic(), _cpu_seconds()
        if now - self._last[0] >= 1.0:  # the server's share, smoothed over a few seconds
            share = (cpu - self._last[1]) / (now - self._last[0])
            self.server_cores = 0.5 * self.server_cores + 0.5 * share
            self._last = (now, cpu)
        rate, wall = speed(self.cores, len(running), self.server_cores), time.time()
        for key, started in running.items():
            self.done[key] = self.done.get(key, 0.0) + rate * max(0.0, wall - self._seen.get(key, started))
            self._seen[key] = wall
        for key in [k for k in self._seen if k not in running]:
            del self._seen[key]
            self.done.pop(key, None)
        return rate

    def speed_now(self, busy: int) -> float:
        """The speed each of ``busy`` running tasks gets now."""
        return speed(self.cores, busy, self.server_cores)

    def speed_of(self, key: str, seconds: float) -> float:
        """The average speed a task that ran ``seconds`` got (the current speed where it was never sampled)."""
        done = self.done.get(key)
        if done is None or seconds <= 0:
            return speed(self.cores, 1, self.server_cores)
        return max(SLOWEST, min(1.0, done / seconds))


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


@dataclass(frozen=True)
class Slot:
    """A queued or running task's place, as the engine's workers will take them."""

    ahead: int  # tasks of its work before it, those running included
    eta_s: float  # seconds from now until it ends
    warm: bool  # its worker holds its model (the task before it on that worker is of the same setup)


@dataclass
class _Worker:
    task: Task | None = None
    left: float = 0.0  # the work left of its task
    holds: object = None  # the setup whose model it holds


def place(queues: dict[str, list[Task]], done: dict[Task, float], threads: dict[str, int], times: Times,
          cores: float | None = None, server_cores: float = 0.0) -> dict[Task, Slot]:
    """Where each task of ``queues`` (by work, in the order the engine runs them: those running first) stands
    and when it ends, the queues run forward: a worker takes its next task when its current one ends (warm where
    its last task was of the same setup); a task is the work ``times`` estimates, less the work ``done`` of it
    already (a running one), and every busy worker runs at ``speed(cores, busy workers, server_cores)``."""
    slots: dict[Task, Slot] = {}
    waiting = {work: list(tasks) for work, tasks in queues.items()}
    workers = {work: [_Worker() for _ in range(max(1, threads.get(work, 1)))] for work in queues}
    ahead = {work: 0 for work in queues}
    now = 0.0
    while True:
        for work, pool in workers.items():
            for worker in pool:
                if worker.task is None and waiting[work]:
                    task = waiting[work].pop(0)
                    warm = isinstance(task, PlanTask) and worker.holds == task.setup
                    worker.task = task
                    worker.left = max(1.0, times.estimate(task, warm) - done.get(task, 0.0))
                    worker.holds = task.setup if isinstance(task, PlanTask) else None
                    slots[task] = Slot(ahead[work], 0.0, warm)
                    ahead[work] += 1
        busy = [w for pool in workers.values() for w in pool if w.task is not None]
        if not busy:
            return slots
        rate = speed(cores, len(busy), server_cores)
        step = min(w.left for w in busy) / rate
        now += step
        for worker in busy:
            worker.left -= step * rate
            if worker.left <= 1e-9:
                assert worker.task is not None
                slots[worker.task] = Slot(slots[worker.task].ahead, now, slots[worker.task].warm)
                worker.task = None
