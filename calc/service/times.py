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
from collections import Counter, defaultdict, deque
from dataclasses import dataclass
from typing import Any

from calc.catalogue import CATALOGUE, make_spec
from calc.service.wants import BuildTask, PlanTask, Task

KEPT = 5  # a model's last tasks timed here
KEPT_PACE = 20  # tasks the pace is read from
# Before anything is timed here: a task's work in the shipped references' seconds (1.0: as on the machine
# that shipped the plans, two cores), and a build's seconds per layer (NASNetLarge's 1,040 layers built in
# 28-32 s on a busy 2-core machine).
FIRST_PACE = {"plan": 1.0, "build": 0.03}
FIRST_GUESS_S = {("plan", False): 45.0, ("plan", True): 15.0, ("build", False): 10.0, ("build", True): 10.0}
STEADY_S = 60.0  # the server's share of the cores the queues are run forward at: its average over about this long
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
    """What the service samples of the cluster each round: the cores this process uses (an average over the last
    rounds; it shares the cores of the workers on its own host) and, for each running task, the work it has done
    so far and the speed it gets now."""

    def __init__(self) -> None:
        self.server_cores = 0.0  # this process's cores over the last few seconds: what the running tasks get now
        # ... and over about ``STEADY_S``: what the queues are run forward at. A class's first pages are a burst of a
        # few seconds, after which the server serves its open tabs with a fraction of a core (docs/HOSTING.md).
        self.server_cores_steady = 0.0
        self._last = (time.monotonic(), _cpu_seconds())
        self.done: dict[str, float] = {}  # running task key -> its work done so far
        self.rate: dict[str, float] = {}  # running task key -> its speed now
        self._seen: dict[str, float] = {}  # running task key -> when its work was last added (time.time())

    def sample(self, running: dict[str, tuple[float, str]], workers: list[Any]) -> None:
        """Adds what each running task (key -> when it started, ``time.time()``, and its worker's address) has done
        since the last sample, at the speed its host's busy workers share (``workers``:
        ``calc.cluster.engine.WorkerSlot``)."""
        now, cpu = time.monotonic(), _cpu_seconds()
        if now - self._last[0] >= 1.0:  # this process's share, smoothed over a few seconds
            share = (cpu - self._last[1]) / (now - self._last[0])
            self.server_cores = 0.5 * self.server_cores + 0.5 * share
            self.server_cores_steady += min(1.0, (now - self._last[0]) / STEADY_S) * (share - self.server_cores_steady)
            self._last = (now, cpu)
        by_address = {w.address: w for w in workers}
        busy = Counter(by_address[a].host for _, a in running.values() if a in by_address)
        wall = time.time()
        for key, (started, address) in running.items():
            worker = by_address.get(address)
            rate = 1.0 if worker is None else self.speed_on(worker.cores, worker.here, busy[worker.host])
            self.done[key] = self.done.get(key, 0.0) + rate * max(0.0, wall - self._seen.get(key, started))
            self.rate[key], self._seen[key] = rate, wall
        for key in [k for k in self._seen if k not in running]:
            del self._seen[key]
            self.done.pop(key, None)
            self.rate.pop(key, None)

    def speed_on(self, cores: float | None, here: bool, busy: int, steady: bool = False) -> float:
        """The speed of each of ``busy`` workers on a host of ``cores`` (this machine, ``here``: less this process's,
        now or, ``steady``, over about ``STEADY_S``)."""
        return speed(cores, busy, (self.server_cores_steady if steady else self.server_cores) if here else 0.0)

    def speed_of(self, key: str, seconds: float) -> float:
        """The average speed a task that ran ``seconds`` got (its last speed where it was sampled too little)."""
        done = self.done.get(key)
        if done is None or seconds <= 0:
            return self.rate.get(key, 1.0)
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
    work: str
    address: str
    host: str
    cores: float | None
    here: bool
    task: Task | None = None
    left: float = 0.0  # the work left of its task
    holds: object = None  # the setup whose model it holds


def place(queues: dict[str, list[Task]], done: dict[Task, float], workers: list[Any], times: Times, load: Load,
          on: dict[Task, str] | None = None) -> dict[Task, Slot]:
    """Where each task of ``queues`` (by work, in the order the engine runs them: those running first) stands
    and when it ends, the queues run forward on ``workers`` (``calc.cluster.engine.WorkerSlot``; a work without a
    worker yet gets one, at full speed): a task the engine has put on a worker already (``on``: its address; a
    running one, or one queued there) waits for that worker, the others go to whichever is free first; a worker
    that frees takes its next task (warm where its last task was of the same setup). A task is the work ``times``
    estimates, less the work ``done`` of it already, and the busy workers of a host share its cores
    (``Load.speed_on``, at the server's steady share: a burst of pages passes before the queues do)."""
    sims = [_Worker(w.kind, w.address, w.host, w.cores, w.here) for w in workers for _ in range(w.threads)
            if w.kind in queues]
    sims += [_Worker(work, "", "", None, False) for work in queues if not any(s.work == work for s in sims)]
    known = {s.address for s in sims}
    on = {t: a for t, a in (on or {}).items() if a in known}  # a worker that has gone: its tasks go anywhere
    waiting = {work: list(tasks) for work, tasks in queues.items()}
    slots: dict[Task, Slot] = {}
    ahead = dict.fromkeys(queues, 0)
    now = 0.0

    def take(sim: _Worker) -> None:
        tasks = waiting[sim.work]
        i = next((i for i, t in enumerate(tasks) if on.get(t, sim.address) == sim.address), None)
        if i is None:
            return
        task = tasks.pop(i)
        warm = isinstance(task, PlanTask) and sim.holds == task.setup
        sim.task, sim.left = task, max(1.0, times.estimate(task, warm) - done.get(task, 0.0))
        sim.holds = task.setup if isinstance(task, PlanTask) else None
        slots[task] = Slot(ahead[sim.work], 0.0, warm)
        ahead[sim.work] += 1

    while True:
        for sim in sims:
            if sim.task is None:
                take(sim)
        busy = [s for s in sims if s.task is not None]
        if not busy:
            return slots
        per_host = Counter(s.host for s in busy)
        rates = [load.speed_on(s.cores, s.here, per_host[s.host], steady=True) for s in busy]
        step = min(s.left / r for s, r in zip(busy, rates))
        now += step
        for sim, rate in zip(busy, rates):
            sim.left -= step * rate
            if sim.left <= 1e-9:
                assert sim.task is not None
                slots[sim.task] = Slot(slots[sim.task].ahead, now, slots[sim.task].warm)
                sim.task = None
