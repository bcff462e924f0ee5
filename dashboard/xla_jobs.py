"""XLA compiles in the background, scheduled for the visitors waiting for them.

A plan takes 10-60 s to compile here (``calc.xla``), so no page waits for one. A page says
what it wants for the configuration it shows (``Want``): the plan at its batch, a second
plan for the curve's line, the search for the largest batch. Each want names one compile at
a time, read from the configuration's curve (``calc.xla.PlanCurve``), so a search is as many
compiles as it takes, each shared by every visitor who wants it, and a finished plan is on
disk for every visitor and every restart.

What a session wants lives while the session keeps asking (``Scheduler.ask``, which the
page's progress fragment repeats every second): a session that goes away stops asking, its
wants lapse after ``LEASE_S``, and a compile nobody wants any more is dropped, or stopped if
it runs. Compiles run in ``compile_workers()`` worker processes that keep the model built
(``calc.workers.plans.PlanWorker``) at a lower CPU priority than the pages, the most urgent
first: a batch with no XLA number at all, then a curve's second plan, then searches, then
plans that refine a drawn point, last a plan compiled again to say what fills its peak. A compile that has run ``YIELD_S`` while another visitor's
compile waits for a worker gives way: it is stopped and runs again when no other waits, so
that one link (a huge image, full remat) cannot hold the queue for its whole time limit.

``CALC_XLA_COMPILES=off`` (hosting operators, tests) turns compiling off: pages then show
only shipped or cached plans. Nothing here imports Streamlit.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any, Callable

from calc import xla
from calc.catalogue import ModelFile, ModelSpec
from calc.hub import HubSpec
from calc.types import TrainingConfig
from calc.workers.failures import FailureMemory
from calc.workers.plans import PlanBusy, PlanCancelled, PlanWorker
from calc.xla.compute import compile_request
from calc.xla.search import XlaMaxSequence, known_sequence_search

COMPILES_ENV = "CALC_XLA_COMPILES"
WORKERS_ENV = "CALC_XLA_WORKERS"
LEASE_S = 12.0  # a want lapses this long after its session last asked for it
FAILURE_KEPT_S = 1800.0  # a compile that failed is not tried again for this long
BUSY_KEPT_S = 60.0  # one that found no room in the children's memory pool (calc.workers.pool)
MAX_CONFIGS = 32  # configurations with pending compiles, server-wide (a class of thirty); past it one waits
MAX_PER_CLIENT = 16  # of those, from one address (a class behind one NAT shares one)
CURVE_KEPT_S = 5.0  # a configuration's plans are read from disk again after this long
# A compile gives way after this long while another visitor's compile waits for its worker: nine
# compiles in ten took 3-32 s here, and a new model's build 5-20 s more.
YIELD_S = 60.0
FIRST_ESTIMATE_S = (45.0, 15.0)  # a compile's seconds (new model, kept model) until this host has timed its own


def compiles_enabled() -> bool:
    """False when ``CALC_XLA_COMPILES`` is off, 0, false or no: use shipped and cached plans only."""
    return os.environ.get(COMPILES_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def compile_workers() -> int:
    """How many compiles run at once: ``CALC_XLA_WORKERS``, else one per four cores (one on a small host).

    A compile keeps about one core busy and holds 1-3 GiB (``CALC_COMPILE_GIB`` is its budget).
    """
    try:
        value = int(os.environ.get(WORKERS_ENV, "0"))
    except ValueError:
        value = 0
    return max(1, min(8, value if value > 0 else (os.cpu_count() or 1) // 4))


@dataclass(frozen=True)
class Setup:
    """One configuration on one card, at any batch: the curve a page reads, the compiles a want names."""

    spec: ModelSpec | ModelFile | HubSpec
    config: TrainingConfig  # one device's, at batch 1
    gpu_key: str
    remat: str = ""

    @classmethod
    def of(cls, spec: ModelSpec | ModelFile | HubSpec, config: TrainingConfig, gpu_key: str, remat: str = "") -> Setup:
        return cls(spec, replace(config, batch_size=1, num_gpus=1), gpu_key, remat)

    def known(self) -> xla.KnownPlans:
        """Every plan known at any batch (shipped or on disk); never compiles."""
        return xla.known_plans(self.spec, self.config, self.gpu_key, self.remat)


class Kind(IntEnum):
    """What a want is for, in the order compiles are run."""

    PLAN = 0  # the page's batch, which has no XLA number yet
    ANCHOR = 1  # a second plan, for the curve's line
    SEARCH = 2  # the search for the largest batch
    REFINE = 3  # the page's batch, drawn on the line: its own plan replaces the drawn point
    EXPLAIN = 4  # the page's batch, planned without what fills its peak (a shipped plan): compiled again to say it
    SEQUENCE = 5  # the search for the longest sequence at the page's batch (a KerasHub text model)


@dataclass(frozen=True)
class Want:
    """One thing a page waits for; ``next_task`` is the compile it needs now."""

    setup: Setup
    kind: Kind
    batch: int = 0  # PLAN, REFINE, EXPLAIN, SEQUENCE
    budget_bytes: int = 0  # SEARCH, SEQUENCE: what the plan may take
    start: int = 1  # SEARCH: the first batch tried when the curve knows nothing

    def at_length(self, tokens: int) -> Setup:
        """The want's setup at another sequence length (a KerasHub text model's)."""
        assert isinstance(self.setup.spec, HubSpec)
        return replace(self.setup, spec=replace(self.setup.spec, sequence_length=tokens))

    def sequence(self, known_of: Callable[[Setup], xla.KnownPlans]) -> XlaMaxSequence | int:
        """SEQUENCE: the longest sequence that fits, or the next length to compile (``calc.xla.search``)."""
        spec = self.setup.spec
        assert isinstance(spec, HubSpec)
        return known_sequence_search(spec, self.batch, self.budget_bytes,
                                     lambda at: known_of(replace(self.setup, spec=at)))[0]

    def next_task(self, known_of: Callable[[Setup], xla.KnownPlans]) -> tuple[Setup, int] | None:
        """The compile the want needs now, (setup, one-device batch); None when it needs none."""
        if self.kind is Kind.SEQUENCE:
            step = self.sequence(known_of)
            return None if isinstance(step, XlaMaxSequence) else (self.at_length(step), self.batch)
        batch = self.next_batch(known_of(self.setup))
        return None if batch is None else (self.setup, batch)

    def next_batch(self, known: xla.KnownPlans) -> int | None:
        curve = known.curve
        if self.kind is Kind.EXPLAIN:
            plan = known.plans.get(self.batch)
            return self.batch if plan is not None and plan.explained is None else None
        if self.kind in (Kind.PLAN, Kind.REFINE):
            return None if curve.compiled(self.batch) is not None else self.batch
        if self.kind is Kind.ANCHOR:
            return curve.second_anchor()
        answer = curve.max_batch(self.budget_bytes)
        if answer is not None and answer.settled:
            return None
        # A search starts from the line, which needs a second plan well inside the card's memory.
        return curve.second_anchor() or curve.next_search_batch(self.budget_bytes, self.start)


@dataclass(frozen=True)
class Progress:
    """Where a want stands, for the page."""

    state: str  # "done", "queued", "running", "failed", "refused", "off"
    batch: int | None = None  # the compile it waits for
    seconds: float = 0.0  # how long that compile has run
    ahead: int = 0  # compiles to run before it
    eta_s: float = 0.0  # about when it ends, from this host's compile times
    step: int = 0  # SEARCH, SEQUENCE: this compile's number in the search
    tokens: int = 0  # SEQUENCE: the sequence length this compile plans
    steps: int = 0  # SEARCH: about how many the search takes in all
    message: str = ""  # failed, refused: one line
    held_by: str = ""  # refused: "server" (every place taken) or "client" (this address's share taken);
    # running: "memory" while the compile waits for room in the children's memory pool;
    # queued: "yielded" when it gave way to other visitors' compiles after ``limit_s``
    limit_s: float = 0.0  # queued and yielded: how long it may run while another visitor's compile waits
    count: int = 0  # refused: the configurations holding those places


@dataclass
class _Running:
    task: tuple[Setup, int]
    worker: PlanWorker
    started_s: float  # time.time(), for the page
    client: str = ""  # the client it was started for
    since: float = 0.0  # time.monotonic()
    yielding: bool = False  # stopped to give way; ends as cancelled


@dataclass
class _Session:
    wants: tuple[Want, ...] = ()
    expires_s: float = 0.0
    since_s: dict[Want, float] = field(default_factory=dict)  # when each want was first asked
    client: str = ""  # the visitor's address (``dashboard.xla_step.client_address``)


class Scheduler:
    """The server's compile queue: workers, the sessions' wants, and what each compile is for.

    Args:
        workers: compiles at once (``compile_workers()``).
        worker: makes one worker (``PlanWorker``: ``compile(request)``, ``cancel()``, ``close()``); tests fake it.
        lease_s: how long a session's wants live without being asked again.
        max_configs: configurations with pending compiles at once; a further one waits for a place.
        max_per_client: of those, from one client (address); a further one from it waits.
        yield_s: a compile that has run this long gives way while another client's compile waits.
    """

    def __init__(self, workers: int | None = None, *, worker: Callable[[], Any] = PlanWorker,
                 lease_s: float = LEASE_S, max_configs: int = MAX_CONFIGS,
                 max_per_client: int = MAX_PER_CLIENT, yield_s: float = YIELD_S) -> None:
        self.lease_s = lease_s
        self.yield_s = yield_s
        self.max_configs = max_configs
        self.max_per_client = max_per_client
        self._cond = threading.Condition()
        self._sessions: dict[str, _Session] = {}
        self._running: dict[tuple[Setup, int], _Running] = {}
        self._failed = FailureMemory()  # compiles that failed, by (setup, batch)
        self._searched: dict[tuple[Setup, int, Kind], int] = {}  # (setup, budget, kind) -> search compiles finished
        self._served: dict[str, float] = {}  # client -> when a compile it wanted last started
        self._yielded: dict[tuple[Setup, int], int] = {}  # compiles that gave way -> how often; they go last
        self._versions: dict[Setup, int] = {}  # bumped when one of the setup's compiles ends
        self._curves: dict[Setup, tuple[int, float, xla.KnownPlans]] = {}  # setup -> (version, read at, plans)
        self._times: dict[bool, list[float]] = {True: [], False: []}  # seconds of compiles: kept model, new model
        self._count = workers or compile_workers()
        self._idle = [worker() for _ in range(self._count)]
        self._warm: dict[int, Setup | None] = {}  # id(worker) -> the configuration whose model it holds
        self._threads: list[threading.Thread] = []
        self._stopped = False
        self.compiled = 0  # compiles finished, for tests and the benchmark

    # --- what pages call -------------------------------------------------------------------

    def ask(self, session: str, wants: list[Want] | tuple[Want, ...], client: str | None = None) -> dict[Want, Progress]:
        """Replaces what ``session`` wants, renews its lease, and says where each want stands.

        ``client``: the visitor's address, kept for the session (None: as before); one client's
        wants share the queue with the others' turn by turn, and at most ``max_per_client`` of its
        configurations hold places.
        """
        now = time.monotonic()
        with self._cond:
            held = self._sessions.setdefault(session, _Session())
            if client is not None:
                held.client = client
            held.since_s = {w: held.since_s.get(w, now) for w in wants}
            held.wants, held.expires_s = tuple(wants), now + self.lease_s
            progress = self._progress(session, now)
            self._start_threads()
            self._cond.notify_all()
        return progress

    def leave(self, session: str) -> None:
        """The session wants nothing any more (it is closing)."""
        with self._cond:
            self._sessions.pop(session, None)
            self._cond.notify_all()

    def version(self, setup: Setup) -> int:
        """Grows by one each time one of ``setup``'s compiles ends: a page redraws when it changes."""
        with self._cond:
            return self._versions.get(setup, 0)

    def pending(self) -> int:
        """Compiles running or wanted, server-wide."""
        with self._cond:
            return len(self._tasks(time.monotonic())) + len(self._running)

    def clear(self) -> None:
        """Forgets every session and failure and stops running compiles (tests)."""
        with self._cond:
            self._sessions.clear()
            self._failed.clear()
            self._searched.clear()
            self._served.clear()
            self._yielded.clear()
            for run in self._running.values():
                run.worker.cancel()
            self._cond.notify_all()

    def shutdown(self, wait_s: float = 5.0) -> None:
        """Stops every compile and worker process (the server is ending), and waits up to ``wait_s``
        for the scheduler's threads to end, so that none starts or records a compile afterwards."""
        with self._cond:
            self._stopped = True
            self._sessions.clear()
            workers = self._idle + [r.worker for r in self._running.values()]
            self._cond.notify_all()
        for worker in workers:
            worker.close()
        deadline = time.monotonic() + wait_s
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    # --- the queue ---------------------------------------------------------------------------

    def _live(self, now: float) -> list[tuple[str, _Session]]:
        for session in [s for s, held in self._sessions.items() if held.expires_s < now]:
            del self._sessions[session]
        return list(self._sessions.items())

    def _known(self, setup: Setup) -> xla.KnownPlans:
        """The setup's known plans, read again once one of its compiles has ended here or after
        ``CURVE_KEPT_S`` (another process may have compiled one): every visitor asks each second."""
        version, now = self._versions.get(setup, 0), time.monotonic()
        kept = self._curves.get(setup)
        if kept is None or kept[0] != version or now - kept[1] > CURVE_KEPT_S:
            kept = self._curves[setup] = (version, now, setup.known())
            if len(self._curves) > 4 * self.max_configs:
                self._curves.pop(next(iter(self._curves)))
        return kept[2]

    def _tasks(self, now: float) -> dict[tuple[Setup, int], tuple[tuple[bool, int, float, float], Want, str]]:
        """Every compile some live want needs now and that is not running or failed: task -> ((whether
        it gave way before, kind, when its client was last served, since), one want behind it, its
        client); of at most ``max_configs`` configurations, and ``max_per_client`` from one client, the
        most urgent first."""
        candidates: list[tuple[int, float, str, tuple[Setup, int], Want]] = []
        running = {setup for setup, _ in self._running}
        per_client: dict[str, set[Setup]] = {}  # each client's configurations with places
        for _, held in self._live(now):
            per_client.setdefault(held.client, set()).update(w.setup for w in held.wants if w.setup in running)
            for want in held.wants:
                task = want.next_task(self._known)
                if task is None or task in self._running or self._failure(task) is not None:
                    continue
                candidates.append((int(want.kind), held.since_s[want], held.client, task, want))
        # Places go by urgency, then to the client served longest ago, then by age: a new
        # configuration's first plan takes a place before another's search, and clients take turns,
        # so that a script holding many sessions open makes a newcomer wait for one of its compiles,
        # not for all of them.
        tasks: dict[tuple[Setup, int], tuple[tuple[bool, int, float, float], Want, str]] = {}
        admitted = set(running)
        for kind, since, client, task, want in sorted(
                candidates, key=lambda c: (c[0], self._served.get(c[2], 0.0), c[1])):
            mine = per_client.setdefault(client, set())
            if task[0] not in mine:
                if len(mine) >= self.max_per_client:
                    continue  # this client's share is taken: waits for one of its own
                if task[0] not in admitted:
                    if len(admitted) >= self.max_configs:
                        continue  # past the cap: waits for a place
                    admitted.add(task[0])
                mine.add(task[0])
            if task not in tasks:  # one that gave way runs after every other
                tasks[task] = ((task in self._yielded, kind, self._served.get(client, 0.0), since), want, client)
        return tasks

    def _failure(self, task: tuple[Setup, int]) -> str | None:
        failed = self._failed.recall(task)
        return None if failed is None else failed[0]

    def _start_threads(self) -> None:
        if not self._threads and compiles_enabled() and not self._stopped:
            self._threads = [threading.Thread(target=self._loop, name=f"xla-compile-{i}", daemon=True)
                             for i in range(self._count)]
            self._threads.append(threading.Thread(target=self._watch, name="xla-watch", daemon=True))
            for thread in self._threads:
                thread.start()

    def _watch(self) -> None:
        """Every half second: lets wants lapse, and stops the compiles nobody wants any more
        (the workers are busy compiling, so they cannot see it themselves)."""
        with self._cond:
            while not self._stopped:
                self._drop_unwanted(time.monotonic())
                self._give_way(time.monotonic())
                self._cond.wait(0.5)

    def _loop(self) -> None:
        while True:
            with self._cond:
                picked = None
                while not self._stopped and picked is None:
                    now = time.monotonic()
                    if self._idle and compiles_enabled() and (tasks := self._tasks(now)):
                        task = min(tasks, key=lambda t: tasks[t][0])
                        # A worker that holds this configuration's model compiles it in half the time.
                        worker = next((w for w in self._idle if self._warm.get(id(w)) == task[0]), self._idle[0])
                        self._idle.remove(worker)
                        self._running[task] = _Running(task, worker, time.time(), tasks[task][2], now)
                        picked = (task, worker, tasks[task][1])
                        self._served[tasks[task][2]] = now
                        if len(self._served) > 4 * self.max_configs:  # only clients still here are kept
                            live = {held.client for held in self._sessions.values()}
                            self._served = {c: t for c, t in self._served.items() if c in live}
                    else:
                        self._cond.wait(1.0)
                if picked is None:
                    return
            self._run(*picked)

    def _drop_unwanted(self, now: float) -> None:
        """Stops running compiles that no live want needs any more."""
        if not self._running:
            return
        wanted: set[tuple[Setup, int]] = set()
        for _, held in self._live(now):
            for want in held.wants:
                if (task := want.next_task(self._known)) is not None:
                    wanted.add(task)
        for task, run in self._running.items():
            if task not in wanted:
                run.worker.cancel()

    def _give_way(self, now: float) -> None:
        """Stops compiles that have run ``yield_s`` while another client's compile waits for a worker
        (none is idle); each runs again once no other waits, after every compile that never gave way."""
        long = [run for run in self._running.values() if not run.yielding and now - run.since > self.yield_s]
        if not long or self._idle:
            return
        waiting = {client for (yielded, *_), _, client in self._tasks(now).values() if not yielded}
        for run in long:
            if waiting - {run.client}:
                run.yielding = True
                run.worker.cancel()
                self._yielded[run.task] = self._yielded.get(run.task, 0) + 1
                if len(self._yielded) > 4 * self.max_configs:
                    self._yielded.pop(next(iter(self._yielded)))

    def _run(self, task: tuple[Setup, int], worker: PlanWorker, want: Want) -> None:
        setup, batch = task
        started = time.monotonic()
        warm = self._warm.get(id(worker)) == setup
        error, finished, kept_s = None, False, FAILURE_KEPT_S
        try:
            request, key = xla.family_request(setup.spec, replace(setup.config, batch_size=batch), setup.gpu_key,
                                              setup.remat)
            raw = compile_request(request, key, runner=worker.compile, exclusive=False,
                                  explained=want.kind is Kind.EXPLAIN)
            finished = True
            if want.kind is Kind.EXPLAIN and "peak" not in raw:  # not asked again for every page
                error = "this compile did not say what fills the peak"
        except PlanCancelled:
            pass
        except PlanBusy as exc:  # the children's memory was taken: tried again soon, not in 30 minutes
            error, kept_s = str(exc), BUSY_KEPT_S
        except xla.PlanError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - the page shows one line, never a traceback
            error = f"the compile failed: {type(exc).__name__}: {exc}".splitlines()[0][:300]
        with self._cond:
            del self._running[task]
            self._idle.append(worker)
            self._warm[id(worker)] = setup if finished else None
            if error is not None:
                self._failed.remember(task, error, kept_s)
            if error is not None or finished:
                self._yielded.pop(task, None)
            if finished:
                self.compiled += 1
                times = self._times[warm]
                times.append(time.monotonic() - started)
                del times[:-20]
                if want.kind in (Kind.SEARCH, Kind.SEQUENCE):
                    search = (want.setup, want.budget_bytes, want.kind)
                    self._searched[search] = self._searched.get(search, 0) + 1
            self._versions[setup] = self._versions.get(setup, 0) + 1
            if want.setup != setup:  # a sequence search's length: the page that asked reads it again
                self._versions[want.setup] = self._versions.get(want.setup, 0) + 1
            self._cond.notify_all()

    # --- where each want stands ---------------------------------------------------------------

    def estimate_s(self, warm: bool) -> float:
        """A compile's seconds on this host: the median of the last ones timed, or a first guess."""
        times = sorted(self._times[warm])
        return times[len(times) // 2] if times else FIRST_ESTIMATE_S[0 if not warm else 1]

    def _progress(self, session: str, now: float) -> dict[Want, Progress]:
        held = self._sessions[session]
        tasks = self._tasks(now)
        order = sorted(tasks, key=lambda t: tasks[t][0])
        running_left = [max(0.0, self.estimate_s(False) - (time.time() - r.started_s)) for r in self._running.values()]
        progress: dict[Want, Progress] = {}
        for want in held.wants:
            known = self._known(want.setup)
            task = want.next_task(self._known)
            batch = None if task is None else task[1]
            steps = {}
            if want.kind is Kind.SEARCH:
                done = self._searched.get((want.setup, want.budget_bytes, want.kind), 0)
                steps = dict(step=done + 1, steps=done + max(1, known.curve.search_left(want.budget_bytes)))
            if want.kind is Kind.SEQUENCE and task is not None:
                assert isinstance(task[0].spec, HubSpec)
                steps = dict(step=self._searched.get((want.setup, want.budget_bytes, want.kind), 0) + 1,
                             tokens=task[0].spec.sequence_length)
            if task is None:
                progress[want] = Progress("done")
            elif not compiles_enabled():
                progress[want] = Progress("off", batch)
            elif (failure := self._failure(task)) is not None:
                progress[want] = Progress("failed", batch, message=failure)
            elif (run := self._running.get(task)) is not None:
                progress[want] = Progress("running", batch, time.time() - run.started_s,
                                          held_by="memory" if getattr(run.worker, "waiting_for_memory", False) else "",
                                          eta_s=max(0.0, self.estimate_s(False) - (time.time() - run.started_s)),
                                          **steps)
            elif task in tasks:
                ahead = order.index(task)
                wait = (sum(running_left) + ahead * self.estimate_s(False)) / self._count
                yielded = task in self._yielded
                progress[want] = Progress("queued", batch, ahead=ahead + len(self._running),
                                          eta_s=wait + self.estimate_s(False), held_by="yielded" if yielded else "",
                                          limit_s=self.yield_s if yielded else 0.0, **steps)
            else:
                mine = {w.setup for other in self._sessions.values() if other.client == held.client
                        for w in other.wants}
                if len(mine) > self.max_per_client:
                    progress[want] = Progress("refused", batch, held_by="client", count=len(mine), message=(
                        f"this address has {len(mine)} configurations waiting for compiles; this one waits for "
                        "one of them"))
                else:
                    progress[want] = Progress("refused", batch, held_by="server", count=self.max_configs, message=(
                        f"the server's compile queue is full ({self.max_configs} configurations waiting); "
                        "this one waits for a place"))
        return progress


_scheduler: Scheduler | None = None
_guard = threading.Lock()


def scheduler() -> Scheduler:
    """The server's one scheduler, made on first use; its workers stop when the server ends."""
    global _scheduler
    with _guard:
        if _scheduler is None:
            _scheduler = Scheduler()
            atexit.register(_scheduler.shutdown)
        return _scheduler
