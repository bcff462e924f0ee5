"""The one room for long work: who wants which build or compile, handed to the engine that runs them.

A page (or any caller) says what a session waits for (``WorkService.ask``, which the page's
progress fragment repeats every second): its wants (``calc.service.wants``) name one task each.
What is the service's own is which visitor wants what, and for how long:

- **leases**: a session's wants live ``LEASE_S`` after it last asked; a task no live want needs is
  released from the engine, queued or running (a worker running a task no client wants is restarted);
- **order, decided before a task starts**: a task's priority is its want's urgency (a first number:
  the model's ledger or the page's batch's plan; then curves, searches, refinements, explanations),
  then the session's own turn (a session's second task of an urgency goes after every session's
  first), then arrival. Nothing running is ever stopped for another visitor's task;
- **places**: at most ``MAX_CONFIGS`` configurations have tasks in the engine, ``MAX_PER_CLIENT``
  from one address; a further one waits, told why;
- **failures**: kept ``FAILURE_KEPT_S``, so a reload does not start the same failing work again;
- **estimates**: the tasks ahead, as the workers will take them, timed by ``calc.service.times``.

The engine (``calc.cluster``, Dask's distributed scheduler) runs the tasks, in priority order, one at a time
a worker, under its workers' memory limits; results land in the stores every page and the command line read.
Only the service's own thread talks to the engine, so a page's call never waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from calc import xla
from calc.catalogue import ModelSpec
from calc.hub import HubSpec
from calc.service.books import Session, Submitted, Wanted
from calc.service.tasks import build_budget, compiles_enabled, outcome, prepare, priority_of, store
from calc.service.times import Load, Slot, Times, place
from calc.service.wants import BuildTask, Kind, PlanTask, Progress, Setup, Task, Want
from calc.workers.failures import FailureMemory
from calc.xla.plan import TIMEOUT_S

LOG = logging.getLogger(__name__)
LEASE_S = 12.0  # a want lapses this long after its session last asked for it
FAILURE_KEPT_S = 1800.0  # a task that failed is not tried again for this long
MAX_CONFIGS = 32  # configurations with tasks in the engine, server-wide (a class of thirty); past it one waits
MAX_PER_CLIENT = 16  # of those, from one address (a class behind one NAT shares one)
CURVE_KEPT_S = 5.0  # a configuration's plans are read from disk again after this long
# The slowest catalogue builds (EfficientNetB7, NASNetLarge: 800-1,000 layers) took 28-32 s on a busy 2-core
# machine: a build past this is stopped, so that those queued behind it on the build worker wait at most this long.
BUILD_TIMEOUT_S = 180.0
TICK_S = 0.5  # the service's thread looks at the engine this often (and at once when asked)
CANCEL_GRACE_S = 1.0  # a worker still running a released task this long after is restarted


class WorkService:
    """The server's (or a command's) wants, leases and order, over the engine.

    Args:
        engine: makes the engine (``calc.cluster.engine``); called once, by the service's thread.
        functions: the work a task of each kind runs on a worker (``calc.cluster.worker``'s; tests fake it).
        lease_s, max_configs, max_per_client: as the module says.
        timeout_s: a compile running longer is stopped (its worker restarted) and fails; a build, past
            ``BUILD_TIMEOUT_S`` (or ``timeout_s`` where that is shorter).
        times: this host's task times (``calc.service.times.Times``).
    """

    def __init__(self, engine: Callable[[], Any] | None = None, *, functions: dict[str, Callable[[Any], Any]] | None = None,
                 lease_s: float = LEASE_S, max_configs: int = MAX_CONFIGS, max_per_client: int = MAX_PER_CLIENT,
                 timeout_s: float = TIMEOUT_S, tick_s: float = TICK_S, times: Times | None = None) -> None:
        if engine is None:
            from calc.cluster.engine import engine as default_engine

            engine = default_engine
        if functions is None:
            from calc.cluster.worker import build, plan

            functions = {"plan": plan, "build": build}
        self._make_engine = engine
        self._functions = functions
        self.lease_s, self.max_configs, self.max_per_client = lease_s, max_configs, max_per_client
        self.timeout_s, self.tick_s = {"plan": timeout_s, "build": min(timeout_s, BUILD_TIMEOUT_S)}, tick_s
        self.times = times or Times()
        self._cond = threading.Condition()
        self._sessions: dict[str, Session] = {}
        self._submitted: dict[Task, Submitted] = {}
        self._finished: list[tuple[Task, Submitted]] = []  # done in the engine, not read yet
        self._failed = FailureMemory()
        self._running: dict[str, Any] = {}  # task key -> calc.cluster.engine.Running, as last looked
        self._slots: dict[Task, Slot] = {}
        self._searched: dict[tuple[Setup, int, Kind], int] = {}  # (setup, budget, kind) -> search compiles done
        self._versions: dict[Setup | ModelSpec, int] = {}  # bumped when one of its tasks ends
        self._curves: dict[Setup, tuple[int, float, xla.KnownPlans]] = {}
        self._released: dict[str, int] = {}  # keys released here -> how often (a resubmission gets a new key)
        self._restarting: set[str] = set()
        self._held_back: set[Task] = set()  # wanted, but waiting for a place (``max_configs``, ``max_per_client``)
        self._seq = 0
        self._assigned: dict[str, str] = {}  # task key -> the worker the engine put it on, as last looked
        self._workers: list[Any] = []  # the engine's workers (calc.cluster.engine.WorkerSlot), as last looked
        self._load = Load()
        self._engine: Any = None
        self._engine_error = ""
        self._dirty = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._alive: Callable[[str], bool] = lambda session: True
        self.submitted = 0  # tasks handed to the engine, for tests and the benchmark
        self.finished = 0  # tasks that ended with an answer
        self.stopped_wanted = 0  # tasks stopped while a live want still needed them (only past their time limit)

    # --- what pages call -------------------------------------------------------------------

    def ask(self, session: str, wants: list[Want] | tuple[Want, ...], client: str | None = None) -> dict[Want, Progress]:
        """Replaces what ``session`` wants, renews its lease, and says where each want stands. Never waits
        for the engine: new tasks reach it from the service's thread at once.

        ``client``: the visitor's address, kept for the session (None: as before).
        """
        now = time.monotonic()
        with self._cond:
            held = self._sessions.setdefault(session, Session())
            if client is not None:
                held.client = client
            changed = tuple(wants) != held.wants
            held.since_s = {w: held.since_s.get(w, now) for w in wants}
            held.wants, held.expires_s = tuple(wants), now + self.lease_s
            if changed and not self._stopped:
                self._start()
                self._dirty = True
                self._slots = self._place(self._wanted(now))  # its place at once, before the engine has it
                self._cond.notify_all()
            return self._progress(held, now)  # its tab may be gone meanwhile: its wants are still answered

    def leave(self, session: str) -> None:
        """The session wants nothing any more (it is closing)."""
        with self._cond:
            if self._sessions.pop(session, None) is not None:
                self._dirty = True
                self._cond.notify_all()

    def watch_sessions(self, alive: Callable[[str], bool]) -> None:
        """``alive(session)``: whether a session is still there (a server's sessions: whether its tab is still
        connected). A session that is not has its wants dropped at once, without waiting for its lease."""
        with self._cond:
            self._alive = alive

    def version(self, what: Setup | ModelSpec) -> int:
        """Grows by one each time one of ``what``'s tasks ends: a page redraws when it changes."""
        with self._cond:
            return self._versions.get(what, 0)

    def pending(self, work: str = "") -> int:
        """Tasks in the engine, queued or running, those ended whose answers are not stored yet, and those a live
        want needs next (of ``work``, "plan" or "build", where one is named)."""
        with self._cond:
            return self._pending(work)

    def _pending(self, work: str = "") -> int:
        tasks = {*self._submitted, *(t for t, _ in self._finished), *self._wanted(time.monotonic())}
        return sum(1 for t in tasks if not work or t.work == work)

    def wait_idle(self, timeout_s: float) -> bool:
        """Waits until no task is pending (tests, the benchmark); False past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending() or self._dirty:
                if time.monotonic() > deadline:
                    return False
                self._cond.wait(0.1)
        return True

    def shutdown(self, wait_s: float = 15.0) -> None:
        """Releases every task, stops the service's thread and waits for the restarts it began, up to ``wait_s``
        (the engine closes after it: ``calc.cluster.engine.Engine.close``)."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._stopped = True
            self._sessions.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            while self._restarting and time.monotonic() < deadline:
                self._cond.wait(0.1)

    # --- the service's thread ----------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._keep, name="calc-work", daemon=True)
            self._thread.start()

    def _keep(self) -> None:
        """The service's loop; an error in one round is logged, and the next round goes on."""
        while not self._round():
            pass

    def _round(self) -> bool:
        """One round: start the engine, read what ended, look at what runs, hand over what is wanted and release
        what is not. True once the service has stopped."""
        try:
            return self._once()
        except Exception:  # noqa: BLE001 - the service outlives any one round's failure (an engine restarting)
            LOG.exception("the work service's round failed")
            time.sleep(self.tick_s)
            return False

    def _once(self) -> bool:
        with self._cond:
            if not self._dirty and not self._stopped:
                self._cond.wait(self.tick_s)
            self._dirty = False
            stopped = self._stopped
        engine = self._engine_or_none()
        if stopped:
            self._release_all(engine)
            return True
        if engine is None:
            return False
        self._read_finished()
        running = engine.running() if self._submitted else {}
        assigned = engine.assigned() if self._submitted else {}
        workers = _workers(engine, self._workers)
        self._load.sample({key: (run.started_s, run.worker) for key, run in running.items()}, workers)
        with self._cond:
            self._running = running
            releases, submits = self._sync(time.monotonic())
        for item in sorted(releases, key=lambda i: i.key in running):  # the queued first: none starts meanwhile
            item.future.release()
        self._submit(engine, submits)
        self._restart_stale(engine, running)
        with self._cond:
            self._workers, self._assigned = workers, assigned
            self._slots = self._place(self._wanted(time.monotonic()))
            self._cond.notify_all()
        return False

    def _engine_or_none(self) -> Any:
        if self._engine is None and not self._engine_error:
            try:
                self._engine = self._make_engine()
                self._engine.before_close(self.shutdown)  # the tasks released and restarts done first
            except Exception as exc:  # noqa: BLE001 - every page says why, in one line
                self._engine_error = f"the work engine could not start: {type(exc).__name__}: {exc}"[:300]
        return self._engine

    def _release_all(self, engine: Any) -> None:
        with self._cond:
            items = list(self._submitted.values())
            self._submitted.clear()
        for item in items:
            item.future.release()

    def _live(self, now: float) -> list[tuple[str, Session]]:
        for session in [s for s, held in self._sessions.items() if held.expires_s < now or not self._alive(s)]:
            del self._sessions[session]
        return list(self._sessions.items())

    def _known(self, setup: Setup) -> xla.KnownPlans:
        """The setup's known plans, read again once one of its compiles ended or after ``CURVE_KEPT_S``
        (another process may have compiled one): every visitor asks each second."""
        version, now = self._versions.get(setup, 0), time.monotonic()
        kept = self._curves.get(setup)
        if kept is None or kept[0] != version or now - kept[1] > CURVE_KEPT_S:
            kept = self._curves[setup] = (version, now, setup.known())
            if len(self._curves) > 4 * self.max_configs:
                self._curves.pop(next(iter(self._curves)))
        return kept[2]

    def _next(self, want: Want) -> Task | None:
        from calc.profiles import needs_build

        return want.next_task(self._known, lambda spec: not needs_build(spec))

    def _wanted(self, now: float) -> dict[Task, Wanted]:
        """Every task a live want needs now that has not failed, of at most ``max_configs`` configurations
        and ``max_per_client`` from one client: the engine's holds first, then the most urgent, then the
        earliest asked."""
        candidates = []
        for session, held in self._live(now):
            # A page's configuration, as places count them: its setup (a build for it is the same configuration).
            pages = {w.setup.spec: w.setup for w in held.wants if w.setup is not None}
            for want in held.wants:
                task = self._next(want)
                if task is None or (task.work == "plan" and not compiles_enabled()) or self._failed.recall(task):
                    continue
                config = pages.get(want.spec, want.spec) if want.spec is not None else want.what
                candidates.append((task not in self._submitted, want.kind.urgency, held.since_s[want], session,
                                   held.client, task, want, config))
        wanted: dict[Task, Wanted] = {}
        configs: set[object] = set()
        per_client: dict[str, set[object]] = {}
        for _, urgency, since, session, client, task, want, config in sorted(candidates, key=lambda c: c[:3]):
            mine = per_client.setdefault(client, set())
            if config not in mine:
                if len(mine) >= self.max_per_client or (config not in configs and len(configs) >= self.max_configs):
                    continue  # waits for a place
                mine.add(config)
                configs.add(config)
            entry = wanted.setdefault(task, Wanted(urgency, since, session, client, set()))
            entry.whats.add(want.what)
            entry.explain = entry.explain or want.kind is Kind.EXPLAIN
        self._held_back = {c[5] for c in candidates} - set(wanted)
        return wanted

    def _sync(self, now: float) -> tuple[list[Submitted], list[tuple[Task, Wanted]]]:
        """What to release (no live want needs it any more) and what to hand to the engine."""
        wanted = self._wanted(now)
        releases = [self._submitted.pop(task) for task in [t for t in self._submitted if t not in wanted]]
        for item in releases:
            self._note_released(item.key)
        for task, item in self._submitted.items():
            item.whats |= wanted[task].whats
            item.explain = item.explain or wanted[task].explain
        ending = {t for t, _ in self._finished}  # ended in the engine, their answers not stored yet
        submits = sorted(((t, w) for t, w in wanted.items() if t not in self._submitted and t not in ending),
                         key=lambda tw: (tw[1].urgency, tw[1].since_s))
        return releases, submits

    def _submit(self, engine: Any, submits: list[tuple[Task, Wanted]]) -> None:
        for task, want in submits:
            try:
                arg, key = prepare(task)
            except ValueError as exc:  # refused before any worker starts: one line, kept
                with self._cond:
                    self._failed.remember(task, str(exc), FAILURE_KEPT_S)
                continue
            with self._cond:
                priority = priority_of(want.urgency, self._turn(want))
                if (again := self._released.get(key, 0)):
                    key = f"{key}~{again}"  # a key released here may still be leaving the engine
                future = engine.submit(self._functions[task.work], arg, key=key, kind=task.work, priority=priority)
                self._seq += 1
                self._submitted[task] = Submitted(key, future, priority, self._seq, want.session, want.urgency,
                                                   set(want.whats), want.explain)
                self.submitted += 1

    def _read_finished(self) -> None:
        """Stores what ended in the engine since the last round (looked at each round: a future's callback would
        run on the engine's threads, which end before the service's at exit)."""
        with self._cond:
            for task in [t for t, s in self._submitted.items() if s.future.done()]:
                self._finished.append((task, self._submitted.pop(task)))
            finished, self._finished = self._finished, []
        grown = []
        for task, item in finished:
            answer, error = outcome(item.future, task)
            item.future.release()  # read: the scheduler forgets the task (an erred one too) at once
            if answer is not None:
                seconds = float(answer.get("task_seconds", 0.0))
                self.times.record(task, bool(answer.get("warm")), seconds, self._load.speed_of(item.key, seconds))
                error = store(task, answer, item.explain)
                if isinstance(task, BuildTask) and answer.get("worker_rss_bytes", 0) > build_budget():
                    grown.append(str(answer.get("worker", "")))  # the next build starts in a fresh worker
            with self._cond:
                if error is not None:
                    self._failed.remember(task, error, FAILURE_KEPT_S)
                self._record_end(task, item, answer is not None)
        with self._cond:
            grown = sorted(set(filter(None, grown)) - self._restarting)
            self._restarting |= set(grown)
        if grown and self._engine is not None:
            self._restart_later(self._engine, grown)

    def _record_end(self, task: Task, item: Submitted, answered: bool) -> None:
        if answered:
            self.finished += 1
        for what in item.whats | {task.what}:
            self._versions[what] = self._versions.get(what, 0) + 1
        if isinstance(task, PlanTask) and answered and item.urgency >= Kind.SEARCH.urgency:
            for session, held in self._sessions.items():
                for want in held.wants:
                    if want.kind in (Kind.SEARCH, Kind.SEQUENCE) and want.setup is not None and want.what in item.whats:
                        search = (want.setup, want.budget_bytes, want.kind)
                        self._searched[search] = self._searched.get(search, 0) + 1

    def _restart_stale(self, engine: Any, running: dict[str, Any]) -> None:
        """Restarts the workers running a task no client wants (the scheduler is asked), stops tasks past their time."""
        now = time.time()
        cancelled = [key for key, run in running.items() if run.state == "cancelled" and now - run.started_s > CANCEL_GRACE_S]
        unwanted = set(cancelled) - engine.wanted(cancelled) if cancelled else set()
        stale = set()
        with self._cond:
            by_key = {item.key: (task, item) for task, item in self._submitted.items()}
            for key, run in running.items():
                if key in unwanted:
                    stale.add(run.worker)
                    LOG.info("restarting %s: it runs %s, which nobody wants any more", run.worker, key)
                elif key in by_key and now - run.started_s > (limit := self.timeout_s[by_key[key][0].work]):
                    task, item = by_key[key]
                    self._failed.remember(task, f"it ran past {limit:.0f} s and was stopped", FAILURE_KEPT_S)
                    LOG.warning("stopped a wanted task: %s ran past %.0f s", key, limit)
                    del self._submitted[task]
                    self._note_released(item.key)
                    self.stopped_wanted += 1
                    item.future.release()
                    self._record_end(task, item, False)
                    stale.add(run.worker)
            stale -= self._restarting
            self._restarting |= stale
        if stale:
            self._restart_later(engine, sorted(stale))

    def _note_released(self, key: str) -> None:
        self._released[key] = self._released.get(key, 0) + 1
        while len(self._released) > 4096:
            self._released.pop(next(iter(self._released)))

    def _restart_later(self, engine: Any, workers: list[str]) -> None:
        """Restarts ``workers`` in a thread of its own (a restart takes seconds; the rounds go on meanwhile)."""
        def restart() -> None:
            try:
                engine.restart(workers)
            except Exception as exc:  # noqa: BLE001 - the engine is closing: the workers go with it
                LOG.warning("restarting %s did not finish: %s: %s", workers, type(exc).__name__, exc)
            finally:
                with self._cond:
                    self._restarting -= set(workers)
                    self._cond.notify_all()

        try:
            threading.Thread(target=restart, name="calc-work-restart", daemon=True).start()
        except RuntimeError:  # the interpreter is ending: the workers end with it
            with self._cond:
                self._restarting -= set(workers)

    # --- where each want stands ---------------------------------------------------------------

    def _place(self, wanted: dict[Task, Wanted]) -> dict[Task, Slot]:
        """Each task's place and end, as the engine's workers will take them: those running, then those in the
        engine by priority and submission, with those about to be handed over as they will be (``_submit``:
        by urgency and age, each its session's next turn) (``calc.service.times.place``)."""
        turns: dict[tuple[str, int], int] = {}
        order = {t: (s.key not in self._running, -s.priority, s.seq) for t, s in self._submitted.items()}
        for n, (task, want) in enumerate(sorted(((t, w) for t, w in wanted.items() if t not in self._submitted),
                                                key=lambda tw: (tw[1].urgency, tw[1].since_s))):
            turn = turns[(want.session, want.urgency)] = turns.get((want.session, want.urgency), self._turn(want)) + 1
            order[task] = (True, -priority_of(want.urgency, turn - 1), self._seq + 1 + n)
        tasks = sorted(order, key=order.__getitem__)
        queues = {work: [t for t in tasks if t.work == work] for work in ("plan", "build")}
        on = {t: self._assigned[s.key] for t, s in self._submitted.items() if s.key in self._assigned}
        on.update({t: self._running[s.key].worker for t, s in self._submitted.items() if s.key in self._running})
        done = {t: self._load.done.get(s.key, 0.0) for t, s in self._submitted.items() if s.key in self._running}
        return place(queues, done, self._workers, self.times, self._load, on)

    def _turn(self, want: Wanted) -> int:
        """A task's turn in its session: that session's tasks of its urgency in the engine already."""
        return sum(1 for s in self._submitted.values() if s.session == want.session and s.urgency == want.urgency)

    def _progress(self, held: Session, now: float) -> dict[Want, Progress]:
        tasks = {w: self._next(w) for w in held.wants}
        if any(t is not None and t not in self._slots and t not in self._held_back and not self._failed.recall(t)
               and (t.work == "build" or compiles_enabled()) for t in tasks.values()):
            self._slots = self._place(self._wanted(now))  # a task that just got its place: where it stands
        return {want: self._where(want, task, held, now) for want, task in tasks.items()}

    def _where(self, want: Want, task: Task | None, held: Session, now: float) -> Progress:
        batch = task.batch if isinstance(task, PlanTask) else None
        step = total = tokens = 0  # a search's compile number, about how many in all, a sequence's length
        if want.kind in (Kind.SEARCH, Kind.SEQUENCE) and want.setup is not None:
            step = self._searched.get((want.setup, want.budget_bytes, want.kind), 0) + 1
        if want.kind is Kind.SEARCH and want.setup is not None:
            curve = self._known(want.setup).curve.keeping(want.kept_per_sample)
            total = step - 1 + max(1, curve.search_left(want.budget_bytes))
        if want.kind is Kind.SEQUENCE and isinstance(task, PlanTask):
            assert isinstance(task.setup.spec, HubSpec)
            tokens = task.setup.spec.sequence_length
        if task is None:
            return Progress("done")
        if task.work == "plan" and not compiles_enabled():
            return Progress("off", batch)
        if self._engine_error:
            return Progress("failed", batch, message=self._engine_error)
        if (failed := self._failed.recall(task)) is not None:
            return Progress("failed", batch, message=failed[0])
        item = self._submitted.get(task)
        slot = self._slots.get(task)
        if item is not None and (run := self._running.get(item.key)) is not None:
            seconds, work = time.time() - run.started_s, self.times.estimate(task, slot.warm if slot else False)
            left = slot.eta_s if slot is not None and self._load.done.get(item.key, 0.0) < work else 0.0
            usual = seconds + left if left else work / self._load.rate.get(item.key, 1.0)
            return Progress("running", batch, seconds, eta_s=left, usual_s=usual, step=step, steps=total, tokens=tokens)
        if item is not None or task not in self._held_back:
            slot = slot or Slot(0, 0.0, False)
            return Progress("queued", batch, ahead=slot.ahead, eta_s=slot.eta_s, step=step, steps=total, tokens=tokens)
        return self._refused(batch, held)

    def _refused(self, batch: int | None, held: Session) -> Progress:
        mine = {w.what for other in self._sessions.values() if other.client == held.client for w in other.wants}
        if len(mine) > self.max_per_client:
            return Progress("refused", batch, held_by="client", count=len(mine), message=(
                f"this address has {len(mine)} configurations waiting; this one waits for one of them"))
        return Progress("refused", batch, held_by="server", count=self.max_configs, message=(
            f"the server's queue is full ({self.max_configs} configurations waiting); this one waits for a place"))


def _workers(engine: Any, last: list[Any]) -> list[Any]:
    """The engine's workers now (``calc.cluster.engine.WorkerSlot``), or as last looked where it does not say."""
    try:
        return engine.workers()
    except Exception:  # noqa: BLE001 - the scheduler is busy: the workers as last looked
        return last
