"""The execution engine: Dask's distributed scheduler and its workers, seen from this process.

Builds and compiles run as Dask tasks on workers that offer the resource of their kind
(``calc.cluster.worker``): ``plan`` for XLA's plans, ``build`` for Keras builds. By default a
process starts its own cluster on this host (the scheduler in a thread of this process, each
worker a process under a nanny, listening on 127.0.0.1 only); ``CALC_DASK_SCHEDULER`` names
the address of a cluster that runs elsewhere (``python -m calc.cluster``, docs/HOSTING.md),
which every server replica and command line on the site can share.

What the engine does, and this project no longer does itself:

- **order**: each task carries a priority, and a worker runs its queue by it, first in, first
  out among equals (``fifo_timeout=0``: every submission its own generation);
- **one flight**: a task's key names its work (the plan's family and batch, the build's model),
  so two visitors, or two server replicas, that ask for the same plan share one task;
- **cancellation**: a task nobody holds a future for any more is dropped from the queues;
- **memory**: each worker's nanny restarts it past its memory limit; its task is tried once
  more on the fresh worker, and fails (``KilledWorker``) if it kills that one too;
- **restarts**: a worker whose running task nobody wants, or that ran past its time, is
  restarted (``restart``); a worker that dies is restarted by its nanny.

Nothing here knows who wants what (``calc.service`` does).
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

from calc.cluster.settings import KINDS, PLAN, own_workers, shared_cluster, worker_limits

PRELOAD = "calc.cluster.worker"  # each worker's setup (``dask_setup``)
START_TIMEOUT_S = 120.0  # a fresh worker imports Dask; on a busy 2-core host that took up to 10 s


def engine_config() -> dict[str, Any]:
    """The Dask settings this project's scheduler and workers run with (``dask.config``)."""
    return {
        # A task whose worker died under it (its nanny stopped it past its memory) runs once more on the
        # fresh worker: the first may have held another model's leftovers. A second death fails it.
        "distributed.scheduler.allowed-failures": 1,
        # A worker holds no data worth spilling (a plan is a few KB), and a paused worker would wait
        # for its own memory to fall, which a kept model never does: the limit is the nanny's, alone.
        "distributed.worker.memory.target": False,
        "distributed.worker.memory.spill": False,
        "distributed.worker.memory.pause": False,
        "distributed.worker.memory.terminate": 0.95,
        "distributed.worker.daemon": True,
        # This host's own cluster closes a worker's nanny once the worker has been away this long. A nanny here
        # restarts its worker itself, and a restart on a busy host (the old worker stopped, ending its compile,
        # a fresh one started and registered) can pass Dask's 15 s: the nanny stays, and its worker comes back.
        "distributed.deploy.lost-worker-timeout": f"{10 * START_TIMEOUT_S:.0f}s",
        # Idle, Dask's defaults keep every process of a cluster busy with what only its diagnostics read: each
        # event loop wakes every 20 ms to time itself, a worker samples its threads' stacks every 10 ms for a
        # profile page nobody opens here, and each process reads its own system figures twice a second. A
        # cluster of two workers spent 11 s of CPU a minute doing nothing; 1.9 s with these
        # (``python benchmarks/idle_cluster.py``). The nannies' memory watch keeps its 100 ms.
        "distributed.admin.tick.interval": "1s",
        "distributed.worker.profile.enabled": False,
        "distributed.admin.system-monitor.interval": "2s",
    }


def worker_options(kind: str, memory_limit: int, host: str = "127.0.0.1", quiet: bool = True) -> dict[str, Any]:
    """A ``distributed.Nanny``'s options for one worker of ``kind``: one thread, its memory limit, its
    resource, this project's setup, no dashboard; ``quiet``: its stderr goes nowhere (a process's own
    cluster, whose workers would otherwise write TensorFlow's chatter into the command's output)."""
    from calc.cluster.worker import QUIET_ENV  # the worker's side: read only when a worker is made

    return {"nthreads": 1, "memory_limit": memory_limit, "resources": {kind: 1}, "preload": [PRELOAD],
            "host": host, "dashboard": False, "silence_logs": logging.ERROR, "env": {QUIET_ENV: "1"} if quiet else {}}


@dataclass(frozen=True)
class WorkerSlot:
    """One worker of the cluster, as the service's estimates see it."""

    address: str
    kind: str  # the resource it offers (``calc.cluster.settings.KINDS``), "" for none of them
    host: str
    threads: int
    cores: float | None  # its host's cores (``os.cpu_count`` there), None until it answered
    here: bool  # its host is this machine: this process shares its cores


@functools.cache
def _here() -> frozenset[str]:
    """This machine's addresses, as a worker's host may read."""
    import socket

    names = {"127.0.0.1", "localhost", "::1", socket.gethostname()}
    try:
        names |= set(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        pass
    return frozenset(names)


@dataclass(frozen=True)
class Running:
    """A task a worker is executing now."""

    key: str
    started_s: float  # time.time() on the worker
    state: str  # the worker's state of it: "executing", or "cancelled" once nobody wants it
    worker: str  # the worker's address


class Engine:
    """One process's client of the cluster, and the cluster itself where it is this host's own.

    Args:
        address: a running scheduler's address; None starts this host's own cluster.
        workers: this host's own cluster's workers by kind (``{"plan": 1, "build": 1}``).
    """

    def __init__(self, address: str | None = None, workers: dict[str, int] | None = None) -> None:
        import dask
        from distributed import Client

        dask.config.set(engine_config())
        self.cluster: Any = None
        self.address = address
        if address is None:
            self.cluster = own_cluster(workers or own_workers())
        self.client = Client(address or self.cluster, timeout=START_TIMEOUT_S, set_as_default=False)
        self._before_close: list[Callable[[], None]] = []
        self._cores: dict[str, object] = {}  # worker address -> its host's cores, as it answered

    def before_close(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs when the engine closes, before its client and cluster do (a service's shutdown)."""
        self._before_close.append(callback)

    def submit(self, fn: Callable[[Any], Any], arg: Any, *, key: str, kind: str, priority: int) -> Any:
        """``fn(arg)`` on a worker of ``kind``, as task ``key`` with ``priority`` (higher first; among equals,
        the earlier submitted first). Returns its ``distributed.Future``."""
        return self.client.submit(fn, arg, key=key, resources={kind: 1}, priority=priority, pure=False,
                                  fifo_timeout=0)

    def running(self) -> dict[str, Running]:
        """What each worker executes now, by task key (a worker that does not answer in time is left out)."""
        from calc.cluster.worker import executing

        try:
            answers = self.client.run(executing, on_error="return", nanny=False)
        except Exception:  # noqa: BLE001 - the scheduler is restarting a worker: nothing known this time
            return {}
        out = {}
        for address, tasks in answers.items():
            if isinstance(tasks, dict):
                for key, (started, state) in tasks.items():
                    out[key] = Running(key, started, state, address)
        return out

    def wanted(self, keys: list[str]) -> set[str]:
        """Of ``keys``, the tasks some client still wants: this one's, or another replica's of the same scheduler
        (all of them where the scheduler does not answer: nothing is given up on a guess)."""
        from calc.cluster.worker import wanted_on_scheduler

        try:
            return set(self.client.run_on_scheduler(wanted_on_scheduler, keys=keys))
        except Exception:  # noqa: BLE001 - the scheduler is busy: asked again next round
            return set(keys)

    def assigned(self) -> dict[str, str]:
        """Each task the scheduler has put on a worker (running there, or queued there), by key: its worker's
        address."""
        try:
            processing = self.client.processing()
        except Exception:  # noqa: BLE001 - the scheduler is busy: nothing known this time
            return {}
        return {str(key): address for address, keys in processing.items() for key in keys}

    def restart(self, workers: list[str]) -> None:
        """Restarts these workers (their nannies start fresh ones); a task queued on one moves to the fresh one."""
        if workers:
            self.client.restart_workers(workers, timeout=START_TIMEOUT_S, raise_for_error=False)

    def workers(self) -> list[WorkerSlot]:
        """Every worker now: its kind, its host and that host's cores (asked of a worker once), and whether the
        host is this machine's (where this process takes its share of the cores)."""
        import os

        info = self.client.scheduler_info(n_workers=-1).get("workers", {})
        new = [address for address in info if address not in self._cores]
        if new:
            try:
                self._cores.update(self.client.run(os.cpu_count, workers=new, on_error="return", nanny=False))
            except Exception:  # noqa: BLE001 - asked again next time
                pass
        slots = []
        for address, worker in info.items():
            kinds = [k for k in KINDS if worker.get("resources", {}).get(k)]
            cores = self._cores.get(address)
            host = str(worker.get("host", ""))
            slots.append(WorkerSlot(address, kinds[0] if kinds else "", host, int(worker.get("nthreads", 1)),
                                    float(cores) if isinstance(cores, int) else None, host in _here()))
        return slots

    def close(self) -> None:
        for callback in self._before_close:
            callback()
        if self.cluster is not None:
            # A restart still in flight goes on after its nanny closed (Dask shields it), and its fresh worker
            # cannot start in a process that is ending (Python 3.12 refuses new threads once it finalizes): what
            # the cluster says about that from here on is not news.
            logging.getLogger("distributed").setLevel(logging.CRITICAL)
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def own_scheduler() -> dict[str, Any]:
    """The spec of this host's own scheduler: in this process, on a free port of 127.0.0.1, its HTTP routes
    (health, metrics) too, not on Dask's 8787, which another cluster on the host may hold."""
    from distributed import Scheduler

    return {"cls": Scheduler, "options": {"host": "127.0.0.1", "port": 0, "dashboard": False,
                                          "dashboard_address": "127.0.0.1:0"}}


def own_cluster(workers: dict[str, int]) -> Any:
    """This host's own cluster: its own scheduler (``own_scheduler``), and ``workers`` (kind -> count)
    as processes under nannies with their memory limits."""
    from distributed import Nanny, SpecCluster

    _spawn_without_main_script()
    limits = worker_limits()
    spec = {f"{kind}-{i}": {"cls": Nanny, "options": worker_options(kind, limits[kind])}
            for kind in KINDS for i in range(workers.get(kind, 0))}
    return SpecCluster(scheduler=own_scheduler(), workers=spec, silence_logs=logging.ERROR, name="keras-memory-calc")


def run_plan(request: dict[str, Any], key: str, *, timeout_s: float) -> dict[str, Any]:
    """XLA's plan of ``request`` (family ``key``) compiled on a worker of this process's engine, waited for
    (the command line). Raises ``PlanError`` with one line: XLA refused, the worker's memory, the time limit."""
    from calc.cluster.worker import plan
    from calc.workers.budgets import gib
    from calc.xla.cache import request_batch
    from calc.xla.plan import PlanError

    batch = request_batch(request)
    eng = engine({PLAN: 1})
    future = eng.submit(plan, request, key=f"plan-{key}-{batch}", kind=PLAN, priority=0)
    try:
        return future.result(timeout=timeout_s)
    except PlanError:
        raise
    except TimeoutError:
        stuck = [run.worker for run in eng.running().values() if run.key == future.key]
        future.release()
        eng.restart(stuck)
        raise PlanError(f"the compile ran past {timeout_s:.0f} s and was stopped") from None
    except Exception as exc:  # noqa: BLE001 - the engine's own failures, as one line
        if type(exc).__name__ == "KilledWorker":
            raise PlanError(f"the compile ended its worker twice (past the worker's memory limit of "
                            f"{gib(worker_limits()[PLAN])}?) and was stopped") from None
        raise PlanError(f"the compile failed: {type(exc).__name__}: {exc}"[:300]) from None


_engine: Engine | None = None
_guard = threading.Lock()


def engine(workers: dict[str, int] | None = None) -> Engine:
    """This process's engine, started on first use (``CALC_DASK_SCHEDULER``'s cluster, else this host's own
    with ``workers``), and closed when the process ends."""
    global _engine
    with _guard:
        if _engine is None:
            _engine = Engine(shared_cluster(), workers)
            atexit.register(_engine.close)
        return _engine


def _spawn_without_main_script() -> None:
    """A nanny starts its worker with ``multiprocessing``'s "spawn", which first runs this process's ``__main__``
    script in the new process, when ``__main__`` came from a file. In a Streamlit server ``__main__`` is the page
    script Streamlit ran last (it installs each run's module there and leaves it), so every worker, and every
    restart, would run a page. Nothing a worker runs lives in ``__main__`` (tasks name their functions by module):
    this process's spawns leave the script out."""
    import multiprocessing.spawn as spawn

    prepare = spawn.get_preparation_data
    if getattr(prepare, "without_main_script", False):
        return

    def preparation_data(name: str) -> dict[str, Any]:
        data = prepare(name)
        data.pop("init_main_from_path", None)
        return data

    preparation_data.without_main_script = True  # type: ignore[attr-defined]
    spawn.get_preparation_data = preparation_data
