"""Work for tests of the service and the engine: plans made by a formula, builds of nothing, and a task that
sleeps. Importable by name, so that a worker process can run it (``calc.cluster``'s workers unpickle a task's
function by reference)."""

from __future__ import annotations

import threading
import time

CALLS: list[int] = []  # the batches the fake plan was asked for, in order (in-process workers only)
REQUESTS: list[dict] = []  # the plan requests, in order
DELAY_S = {"plan": 0.05, "build": 0.05}
GATE: threading.Event | None = None  # while set to an unset event, a fake task waits for it
ANSWER = None  # a plan's answer by batch, where a test sets one (else ``fake_analysis``)


def fake_analysis(batch: int) -> dict:
    """A plan worker's answer shaped like XLA's: the state donated (aliased), the batch, temporaries of 60 MiB a
    sample."""
    state, x = 300 * 2**20, 600_000 * batch
    return {"argument_bytes": state + x, "output_bytes": state + 8, "alias_bytes": state,
            "temp_bytes": 40 * 2**20 + 60 * 2**20 * batch, "trainable_bytes": state // 3,
            "non_trainable_bytes": 0, "optimizer_bytes": state - state // 3, "metrics_bytes": 0, "batch_bytes": x,
            "build_seconds": 1.0, "compile_seconds": 1.0, "jax": "test", "keras": "test"}


def _released() -> bool:
    """Whether the scheduler has released the task this thread runs (what a worker's restart would stop)."""
    from distributed import get_worker

    worker = get_worker()
    ts = worker.state.tasks.get(worker.get_current_task())
    return ts is None or ts.state == "cancelled"


def _wait(work: str) -> bool:
    """Runs the task's time, or until the gate opens; False when it was released meanwhile."""
    deadline, gate = time.monotonic() + DELAY_S[work], GATE  # the gate of the test that started it
    while time.monotonic() < deadline or (gate is not None and not gate.is_set()):
        if _released():
            return False
        time.sleep(0.01)
    return True


def plan(request: dict) -> dict:
    from calc.cluster.worker import _Started
    from calc.xla.plan import PlanError

    with _Started():
        batch = request["config"]["batch_size"]
        if "hub" in request["spec"]:  # a KerasHub text model: a sample's temporaries grow with its tokens
            batch *= request["spec"]["hub"]["sequence_length"] // 64
        if _released():  # released before it started (a test before this one left it): not counted
            return {}
        CALLS.append(batch)
        REQUESTS.append(request)
        started = time.monotonic()
        if not _wait("plan"):
            return {}
        if batch == 13:
            raise PlanError("XLA could not compile this step: out of registers")
        answer = (ANSWER or fake_analysis)(batch)
        return {**answer, "task_seconds": round(time.monotonic() - started, 3), "warm": False}


def build(spec: dict) -> dict:
    from calc.cluster.worker import _Started
    from calc.profile_json import profile_to_dict
    from tests.profiles import chain_profile

    with _Started():
        if _released():
            return {}
        CALLS.append(-1)
        started = time.monotonic()
        _wait("build")
        return {"profile": profile_to_dict(chain_profile()), "task_seconds": round(time.monotonic() - started, 3),
                "worker_rss_bytes": 0, "worker": ""}


def sleep(seconds: float) -> float:
    """A task that runs ``seconds`` on a worker process (the engine's restarts stop it)."""
    from calc.cluster.worker import _Started

    with _Started():
        time.sleep(seconds)
        return seconds


_engine = None
_engine_guard = threading.Lock()


def local_engine():
    """An engine whose scheduler and two single-threaded workers (one of each kind) run in this process, made on
    first use (by a service's thread, or a fixture) and closed when the process ends. The tasks' functions are the
    service's to choose: fakes share this module's state with the test."""
    global _engine
    with _engine_guard:
        if _engine is None:
            import atexit
            import logging

            import dask
            from distributed import SpecCluster, Worker

            from calc.cluster.engine import Engine, engine_config, own_scheduler

            dask.config.set(engine_config())
            workers = {kind: {"cls": Worker, "options": {"nthreads": 1, "resources": {kind: 1}}}
                       for kind in ("plan", "build")}
            cluster = SpecCluster(scheduler=own_scheduler(), workers=workers, silence_logs=logging.ERROR)
            _engine = Engine(cluster.scheduler_address)
            _engine.cluster = cluster
            atexit.register(_engine.close)
        return _engine


def tasks_held(dask_scheduler) -> int:
    """How many tasks the scheduler holds (``Client.run_on_scheduler``)."""
    return len(dask_scheduler.tasks)


def clients_wanting(dask_scheduler) -> int:
    """The most clients that want one task the scheduler holds (``Client.run_on_scheduler``): two once two
    replicas' services have both handed the same task to the engine."""
    return max((len(task.who_wants) for task in dask_scheduler.tasks.values()), default=0)


def reset() -> None:
    """Every fake back to its defaults (a test's start and end): a task a test left behind ends first, so that it
    cannot count as the next test's."""
    global GATE, ANSWER
    if GATE is not None:
        GATE.set()
    if _engine is not None:
        deadline = time.monotonic() + 10
        while _engine.client.run_on_scheduler(tasks_held) and time.monotonic() < deadline:
            time.sleep(0.02)
    CALLS.clear()
    REQUESTS.clear()
    GATE, ANSWER = None, None
    DELAY_S.update(plan=0.05, build=0.05)
