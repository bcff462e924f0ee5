"""The work service (calc/service) over the real engine: a Dask scheduler and workers in this process, running
fake work (``tests.fake_work``: plans by a formula, builds of a small ledger). No Keras, no compile.

The plans go through calc.xla's own cache, in each test's own folder.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

import pytest

from calc import profiles, xla
from calc.catalogue import make_spec
from calc.service import Kind, Progress, Setup, Want, WorkService
from calc.service.tasks import priority_of
from calc.types import TrainingConfig
from calc.xla import cache
from tests import fake_work
from tests.tools import wait_for

GIB = 2**30


@pytest.fixture
def engine():
    """A scheduler and two single-threaded workers, one of each kind, in this process (``fake_work.local_engine``)."""
    return fake_work.local_engine()


@pytest.fixture(autouse=True)
def _own_plans(tmp_path, monkeypatch):
    monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CALC_XLA_COMPILES", "on")
    for module in (cache, xla.compute):
        monkeypatch.setattr(module, "plan_versions", lambda: {"jax": "test", "keras": "test"}, raising=False)
    monkeypatch.setattr(cache, "unavailable_reason", lambda: None)
    monkeypatch.setattr(profiles, "_memory", OrderedDict())  # a ledger another test built is not this test's
    fake_work.reset()
    yield
    fake_work.reset()


def make(engine, **options) -> WorkService:
    return WorkService(lambda: engine, functions={"plan": fake_work.plan, "build": fake_work.build},
                       **{"lease_s": 1.0, "tick_s": 0.05, **options})


@pytest.fixture
def service(engine):
    made = make(engine)
    yield made
    made.shutdown()
    assert made.wait_idle(10)


def setup(model="ResNet50", size=128, gpu="t4") -> Setup:
    return Setup.of(make_spec(model, size), TrainingConfig(batch_size=1), gpu)


def keep_asking(service, asks: dict[str, list[Want]], until, timeout_s: float = 20.0) -> dict[Want, Progress]:
    """Every session asks again, as an open tab does, until ``until(progress)``; the last progress of all."""
    deadline = time.monotonic() + timeout_s
    while True:
        progress = {}
        for session, wants in asks.items():
            progress.update(service.ask(session, wants))
        if until(progress):
            return progress
        assert time.monotonic() < deadline, f"not reached in {timeout_s} s: {progress}"
        time.sleep(0.02)


def scheduler_holds(tasks: int) -> None:
    """Waits until the engine's scheduler holds ``tasks`` tasks: a service counts a task as pending once its thread
    has called ``submit``, which reaches the scheduler a moment later; a gate opened before then lets the worker
    take a task the scheduler held already ahead of one of higher priority still on its way."""
    engine = fake_work.local_engine()
    wait_for(lambda: engine.client.run_on_scheduler(fake_work.tasks_held) == tasks)


def test_the_first_number_of_every_visitor_goes_before_anyones_search_asked_earlier(service):
    fake_work.GATE = threading.Event()
    a, b = setup(), setup("MobileNetV2")
    search = Want.of(a, Kind.SEARCH, budget_bytes=8 * GIB, start=40)
    service.ask("s1", [search])
    wait_for(lambda: fake_work.CALLS == [40])  # the search's first compile runs
    progress = service.ask("s2", [Want.of(b, Kind.PLAN, batch=16)])
    assert [p.state for p in progress.values()] == ["queued"]
    scheduler_holds(2)
    fake_work.GATE.set()
    keep_asking(service, {"s1": [search], "s2": [Want.of(b, Kind.PLAN, batch=16)]}, lambda p: len(fake_work.CALLS) >= 3)
    assert fake_work.CALLS[:3] == [40, 16, fake_work.CALLS[2]] and fake_work.CALLS[2] != 16


def test_visitors_asking_the_same_plan_share_one_compile(service):
    want = Want.of(setup(), Kind.PLAN, batch=24)
    for session in ("s1", "s2", "s3"):
        service.ask(session, [want])
    keep_asking(service, {"s1": [want], "s2": [want], "s3": [want]}, lambda p: p[want].state == "done")
    assert fake_work.CALLS == [24] and want.setup.known().plans[24].peak_bytes > 0
    assert service.ask("s4", [want])[want].state == "done"  # kept on disk for every later visitor


def test_wants_lapse_when_their_session_stops_asking_and_work_nobody_wants_is_dropped(service):
    """The visitor left: its running compile is released (the fake sees it, as a restart would stop it),
    and its queued compile and build are dropped (the worker may begin the next one in the moment the releases
    reach it, and is released from it too): none of them lands."""
    fake_work.GATE = threading.Event()
    running, queued = Want.of(setup(), Kind.PLAN, batch=8), Want.of(setup("VGG16"), Kind.PLAN, batch=8)
    build = Want.build(make_spec("ResNet50", 160))
    service.ask("gone", [running, queued, build])
    wait_for(lambda: 8 in fake_work.CALLS)
    wait_for(lambda: service.pending() == 0, timeout_s=10)
    fake_work.GATE.set()
    time.sleep(0.3)
    assert service.finished <= 1  # the build may have run beside the compile
    assert running.setup.known().plans == {} and queued.setup.known().plans == {}


def test_a_search_is_as_many_compiles_as_it_takes_and_counts_them(service):
    want = Want.of(setup(), Kind.SEARCH, budget_bytes=6 * GIB, start=30)
    fake_work.DELAY_S["plan"] = 0.25  # each compile runs long enough to be seen running
    seen = []

    def done(progress):
        p = progress[want]
        if p.state == "running":
            seen.append((p.step, p.steps, p.batch))
        return p.state == "done"

    keep_asking(service, {"s1": [want]}, done, timeout_s=60)
    answer = want.setup.known().curve.max_batch(6 * GIB)
    per_sample = 60 * 2**20 + 600_000
    brute = (6 * GIB - 300 * 2**20 - 8 - 40 * 2**20) // per_sample
    assert answer.settled and answer.batch == brute
    assert len(fake_work.CALLS) == service.finished <= 8
    steps = sorted({s for s, _, _ in seen})
    assert steps == list(range(1, len(steps) + 1)) and all(s <= n for s, n, _ in seen)


def test_the_longest_sequence_is_searched_one_compile_at_a_time_over_each_length(service):
    """A sequence want compiles the page's batch at each length the search asks for, in a row, and says which
    compile and how many tokens; the answer fits, the next length read does not, within 1/64 of each other."""
    from calc.hub import make_hub_spec
    from calc.xla.search import XlaMaxSequence

    page = Setup.of(make_hub_spec("gemma2_2b_en", 512, 4), TrainingConfig(batch_size=1, optimizer="adamw"), "l4")
    want = Want.of(page, Kind.SEQUENCE, batch=1, budget_bytes=9 * GIB)
    fake_work.DELAY_S["plan"] = 0.25
    seen = []

    def done(progress):
        p = progress[want]
        if p.state in ("running", "queued") and p.tokens and (p.step, p.tokens) not in seen:
            seen.append((p.step, p.tokens))
        return p.state == "done"

    keep_asking(service, {"s1": [want]}, done, timeout_s=60)
    answer = want.sequence(Setup.known)
    assert isinstance(answer, XlaMaxSequence)

    def peak(tokens):  # fake_analysis at tokens // 64 samples: the state, 8 bytes, 40 MiB and 60 MiB + 600,000 a sample;
        # beside the plan, the logits of one sequence kept free: tokens x 256,000 words x 2 bytes (bfloat16)
        return 300 * 2**20 + 8 + 40 * 2**20 + (60 * 2**20 + 600_000) * (tokens // 64) + tokens * 256_000 * 2

    assert peak(answer.max_sequence) <= 9 * GIB < peak(answer.exceeds)
    assert answer.exceeds - answer.max_sequence <= answer.max_sequence // 64
    assert [t for _, t in seen][:5] == [512, 1024, 2048, 4096, 8192]  # the page's length first, then doubled
    assert [s for s, _ in seen] == list(range(1, len(seen) + 1)) and len(fake_work.CALLS) == service.finished


def test_a_failure_is_one_line_kept_and_not_tried_again(service):
    want = Want.of(setup(), Kind.PLAN, batch=13)
    keep_asking(service, {"s1": [want]}, lambda p: p[want].state == "failed")
    progress = service.ask("s2", [want])[want]
    assert progress.message == "XLA could not compile this step: out of registers"
    time.sleep(0.3)
    assert fake_work.CALLS == [13]


def test_a_build_too_large_for_its_worker_is_refused_before_it_starts(service):
    want = Want.build(make_spec("VGG16", 544))  # fc1 alone: 25,088 x 4,096 weights grow to 40,000-odd x 4,096
    progress = keep_asking(service, {"s1": [want]}, lambda p: p[want].state == "failed")
    assert "for its weights alone, past the builder's memory limit" in progress[want].message
    assert fake_work.CALLS == []


def test_a_build_lands_where_every_page_reads_profiles(service):
    from calc.profiles import needs_build

    spec = make_spec("ResNet50", 176)
    want = Want.build(spec)
    assert needs_build(spec)
    keep_asking(service, {"s1": [want]}, lambda p: p[want].state == "done")
    wait_for(lambda: service.version(spec) == 1)  # the page that asked redraws
    assert not needs_build(spec) and fake_work.CALLS == [-1]


def test_past_its_places_a_new_configuration_waits_with_one_line(engine):
    fake_work.GATE = threading.Event()
    capped = make(engine, lease_s=5, max_configs=2)
    try:
        first = [Want.of(setup(size=96 + 32 * i), Kind.PLAN, batch=8) for i in range(3)]
        for i, want in enumerate(first):
            capped.ask(f"s{i}", [want])
        progress = keep_asking(capped, {f"s{i}": [w] for i, w in enumerate(first)},
                               lambda p: p[first[2]].state == "refused")
        assert [progress[w].state for w in first[:2]].count("refused") == 0
        assert "queue is full" in progress[first[2]].message
    finally:
        fake_work.GATE.set()
        capped.shutdown()


def test_a_newcomers_first_plan_takes_a_place_before_older_searches(engine):
    """Thirty visitors of a class: those who came first search for their largest batch, and a newcomer's first
    number must not wait for all their searches to end."""
    fake_work.GATE = threading.Event()
    capped = make(engine, lease_s=5, max_configs=2)
    try:
        searching = [Want.of(setup(size=96 + 32 * i), Kind.SEARCH, budget_bytes=6 * GIB, start=40) for i in range(2)]
        newcomer = Want.of(setup("MobileNetV2"), Kind.PLAN, batch=16)
        capped.ask("s0", [searching[0]])
        wait_for(lambda: fake_work.CALLS == [40])  # the first search runs
        capped.ask("s1", [searching[1]])
        asks = {"s0": [searching[0]], "s1": [searching[1]], "s2": [newcomer]}
        progress = keep_asking(capped, asks, lambda p: p[searching[1]].state == "refused")
        assert progress[newcomer].state == "queued"
        scheduler_holds(2)
        fake_work.GATE.set()
        keep_asking(capped, asks, lambda p: len(fake_work.CALLS) >= 2)
        assert fake_work.CALLS[1] == 16
    finally:
        fake_work.GATE.set()
        capped.shutdown()


def test_a_compare_tab_never_pushes_back_another_visitors_next_compile(service):
    """One visitor's Compare asks for twelve first plans at once; a visitor who came before it keeps its place,
    and one who comes after waits for one of the Compare's compiles, not twelve."""
    fake_work.GATE = threading.Event()
    blocker = Want.of(setup("VGG16"), Kind.PLAN, batch=4)
    service.ask("first", [blocker])
    wait_for(lambda: fake_work.CALLS == [4])
    before = Want.of(setup("MobileNetV2"), Kind.PLAN, batch=16)
    service.ask("before", [before])
    cells = [Want.of(setup(size=96 + 16 * i), Kind.PLAN, batch=8) for i in range(12)]
    service.ask("compare", cells)
    after = Want.of(setup("DenseNet121"), Kind.PLAN, batch=24)
    asks = {"first": [blocker], "before": [before], "compare": cells, "after": [after]}
    progress = keep_asking(service, asks, lambda p: service.pending() == 15 and p[after].ahead > 1)
    assert progress[before].ahead == 1 and progress[after].ahead == 3  # the running one, before's, one cell
    scheduler_holds(15)
    fake_work.GATE.set()
    keep_asking(service, asks, lambda p: len(fake_work.CALLS) >= 4)
    assert fake_work.CALLS[:4] == [4, 16, 8, 24]


def test_a_sessions_second_task_of_an_urgency_goes_after_every_sessions_first():
    assert priority_of(0, 0) > priority_of(0, 1) > priority_of(1, 0) > priority_of(4, 0)


def test_a_plan_known_without_what_fills_its_peak_is_compiled_once_more_to_say_it(service):
    """Shipped plans leave the explanation out: the page's batch is compiled again, once; a compile that still
    does not say is a failure kept, not a compile for every page."""
    want = Want.of(setup(), Kind.PLAN, batch=12)
    keep_asking(service, {"s1": [want]}, lambda p: p[want].state == "done")
    explain = Want.of(setup(), Kind.EXPLAIN, batch=12)
    assert explain.next_batch(explain.setup.known()) == 12  # the fake compile says nothing of the peak
    progress = keep_asking(service, {"s1": [explain]}, lambda p: p[explain].state == "failed")
    assert "did not say what fills the peak" in progress[explain].message
    time.sleep(0.3)
    assert fake_work.CALLS == [12, 12]
    assert Want.of(setup(), Kind.EXPLAIN, batch=13).next_batch(setup().known()) is None  # no plan yet: PLAN's turn


def test_with_compiles_off_no_compile_runs_and_builds_still_do(service, monkeypatch):
    monkeypatch.setenv("CALC_XLA_COMPILES", "off")
    want, build = Want.of(setup(), Kind.PLAN, batch=8), Want.build(make_spec("ResNet50", 192))
    progress = keep_asking(service, {"s1": [want, build]}, lambda p: p[build].state == "done")
    assert progress[want].state == "off" and fake_work.CALLS == [-1]


def test_estimates_follow_this_hosts_times_for_that_kind_of_model(service):
    """Before anything is timed here, a compile's estimate is its model's shipped median; after, what this host
    took for that model."""
    from calc.service.times import reference
    from calc.service.wants import PlanTask

    task = PlanTask(setup(), 8)
    first = service.times.estimate(task, warm=False)
    assert first == pytest.approx(reference(task, False))
    fake_work.DELAY_S["plan"] = 0.4
    want = Want.of(setup(), Kind.PLAN, batch=8)
    keep_asking(service, {"s1": [want]}, lambda p: p[want].state == "done")
    assert 0.35 <= service.times.estimate(PlanTask(setup(), 9), warm=False) <= 1.0


def test_a_queued_task_is_told_its_place_and_when_it_ends_from_the_tasks_ahead(service):
    from calc.service.wants import PlanTask

    fake_work.GATE = threading.Event()
    wants = [Want.of(setup(size=96 + 32 * i), Kind.PLAN, batch=8) for i in range(3)]
    asks = {f"s{i}": [w] for i, w in enumerate(wants)}
    for session, mine in asks.items():
        service.ask(session, mine)
    progress = keep_asking(service, asks, lambda p: p[wants[0]].state == "running" and p[wants[2]].state == "queued"
                           and p[wants[2]].ahead == 2)
    each = service.times.estimate(PlanTask(setup(), 8), warm=False)
    assert progress[wants[1]].ahead == 1
    assert progress[wants[2]].eta_s == pytest.approx(progress[wants[1]].eta_s + each, rel=0.01)
    assert progress[wants[1]].eta_s == pytest.approx(progress[wants[0]].eta_s + each, abs=1.5)


def test_shutdown_releases_the_running_compile(engine):
    fake_work.GATE = threading.Event()
    made = make(engine, lease_s=30)
    want = Want.of(setup(), Kind.PLAN, batch=8)
    made.ask("s1", [want])
    wait_for(lambda: fake_work.CALLS == [8])
    made.shutdown()
    wait_for(lambda: made.pending() == 0, timeout_s=5)
    fake_work.GATE.set()
    time.sleep(0.2)
    assert made.finished == 0 and want.setup.known().plans == {}  # not the compile's lease of 30 s


def test_a_worker_away_for_a_slow_restart_keeps_its_nanny():
    """Dask's own cluster closes a nanny whose worker has been away 15 s; a restart on a busy host (the old worker
    stopped, a fresh one started and registered) takes up to the engine's start timeout, so the engine waits
    longer than that."""
    import dask
    from dask.utils import parse_timedelta

    from calc.cluster.engine import START_TIMEOUT_S, engine_config

    with dask.config.set(engine_config()):
        assert parse_timedelta(dask.config.get("distributed.deploy.lost-worker-timeout")) > 2 * START_TIMEOUT_S


@pytest.mark.parametrize("value, cores, expected", [("", 2, 1), ("", 16, 4), ("3", 2, 3), ("x", 8, 2), ("99", 2, 8)])
def test_compile_workers_come_from_the_setting_or_the_cores(monkeypatch, value, cores, expected):
    from calc.cluster import plan_workers

    monkeypatch.setenv("CALC_XLA_WORKERS", value)
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert plan_workers() == expected


def test_a_waiting_configuration_says_whose_places_are_taken_in_the_visitors_language():
    from dashboard.i18n import set_language
    from dashboard.xla_step import progress_text

    want = Want.of(setup(), Kind.PLAN, batch=8)
    client, server = Progress("refused", 8, held_by="client", count=17), Progress("refused", 8, held_by="server",
                                                                                    count=32)
    try:
        assert progress_text(want, client) == ("Waiting: this address has 17 configurations waiting; this one waits "
                                               "for one of them.")
        assert "queue is full (32 configurations waiting)" in progress_text(want, server)
        set_language("ja")
        assert "17 件の構成" in progress_text(want, client) and "待機中の構成 32 件" in progress_text(want, server)
        set_language("ko")
        assert "구성 17개" in progress_text(want, client)
    finally:
        set_language("en")


def test_a_running_task_past_its_usual_time_says_so_instead_of_a_countdown():
    from dashboard.xla_step import progress_text

    want = Want.of(setup(), Kind.PLAN, batch=8)
    assert progress_text(want, Progress("running", 8, 30.0, eta_s=12.0, usual_s=42.0)) == (
        "Compiling XLA's plan at batch 8: 30 s so far, about 12 s left.")
    assert progress_text(want, Progress("running", 8, 70.0, eta_s=0.0, usual_s=42.0)) == (
        "Compiling XLA's plan at batch 8: 70 s so far, longer than the 42 s such a compile takes here.")
    build = Want.build(make_spec("ResNet50", 160))
    assert progress_text(build, Progress("queued", None, ahead=2, eta_s=31.0)).startswith(
        "Queued: ResNet50 at 160x160, built once (weights=None) for its layer ledger; 2 builds ahead, done in about 31 s")


def test_a_burst_of_the_servers_work_slows_the_running_tasks_not_the_queues_run_forward(monkeypatch):
    """A class's first pages keep the server busy for a few seconds: the tasks running then get less of the
    cores, but the queues are run forward at the server's share over about a minute (``STEADY_S``)."""
    from calc.service import times
    from calc.service.times import Load

    cpu = [100.0]
    monkeypatch.setattr(times, "_cpu_seconds", lambda: cpu[0])  # the server's CPU time, as this test spends it
    load = Load()
    time.sleep(1.2)
    cpu[0] += 1.0  # the server's own work: a second of a core in 1.2 s (a busy test machine changes nothing)
    load.sample({}, [])
    assert load.server_cores > 0.25 and load.server_cores_steady < 0.05
    assert load.speed_on(2.0, True, 2) < 0.9 < load.speed_on(2.0, True, 2, steady=True)


def test_the_queues_run_forward_on_the_cores_the_busy_workers_share(monkeypatch):
    """Two cores, a compile worker and a build worker: both busy, each runs on a core of its own; with the server
    using one core of that host, they share the other; on another host, the server's share is not theirs. Each
    task's work here: a compile 10 s, a build 4 s."""
    from calc.cluster.engine import WorkerSlot
    from calc.service.times import Load, Times, place
    from calc.service.wants import BuildTask, PlanTask

    times, load = Times(), Load()
    monkeypatch.setattr(times, "estimate", lambda task, warm: 10.0 if task.work == "plan" else 4.0)
    p1, p2, b1 = PlanTask(setup(), 8), PlanTask(setup("VGG16"), 8), BuildTask(make_spec("ResNet50", 160))
    queues = {"plan": [p1, p2], "build": [b1]}

    def host(here, cores=2.0):
        return [WorkerSlot("tcp://a:1", "plan", "a", 1, cores, here), WorkerSlot("tcp://a:2", "build", "a", 1, cores, here)]

    quiet = place(queues, {}, host(True), times, load)
    assert [quiet[t].eta_s for t in (b1, p1, p2)] == [4.0, 10.0, 20.0] and quiet[p2].ahead == 1
    load.server_cores_steady = 1.0
    busy = place(queues, {}, host(True), times, load)
    # Until the build ends both run at half a core: the build's 4 s of work end at 8 s, when the compile has done
    # 4 of its 10; its 6 more run at a core of their own.
    assert [busy[t].eta_s for t in (b1, p1, p2)] == [8.0, 14.0, 24.0]
    elsewhere = place(queues, {}, host(False), times, load)
    assert [elsewhere[t].eta_s for t in (b1, p1, p2)] == [4.0, 10.0, 20.0]
    running = place(queues, {p1: 7.0}, host(False, cores=None), times, load, {p1: "tcp://a:1"})
    assert running[p1].eta_s == 3.0 and running[p2].eta_s == 13.0


def test_a_new_want_is_told_its_place_before_the_engine_has_it(service):
    """A page's first run shows where its compile stands, though the service's thread hands it over a moment
    later: the place is where the engine will put it."""
    fake_work.GATE = threading.Event()
    first = Want.of(setup("VGG16"), Kind.PLAN, batch=4)
    service.ask("first", [first])
    wait_for(lambda: fake_work.CALLS == [4])
    service.ask("second", [Want.of(setup("MobileNetV2"), Kind.PLAN, batch=16)])
    third = Want.of(setup("DenseNet121"), Kind.PLAN, batch=24)
    progress = service.ask("third", [third])[third]
    assert (progress.state, progress.ahead) == ("queued", 2) and progress.eta_s > 0


def test_two_server_replicas_on_one_cluster_share_one_compile_and_each_gets_the_plan(engine):
    """Two replicas (two services, each with its own visitors) ask for the same plan: one task in the engine,
    whose answer each stores; one replica's visitor leaving does not stop the other's compile."""
    from calc.cluster.engine import Engine

    fake_work.GATE = threading.Event()
    other = Engine(engine.client.scheduler.address)  # the second replica's own client of the same scheduler
    first, second = make(engine, tick_s=0.05), make(other, tick_s=0.05)
    try:
        want = Want.of(setup("Xception", 160), Kind.PLAN, batch=12)
        first.ask("a", [want])
        second.ask("b", [want])
        # Both services have handed the task to the engine before the first leaves (a service's pending count
        # includes a want its thread has not submitted yet).
        wait_for(lambda: fake_work.CALLS == [12] and engine.client.run_on_scheduler(fake_work.clients_wanting) == 2)
        first.leave("a")  # its visitor left: the other replica still wants the plan
        time.sleep(0.5)
        fake_work.GATE.set()
        keep_asking(second, {"b": [want]}, lambda p: p[want].state == "done")
        assert fake_work.CALLS == [12] and want.setup.known().plans[12].peak_bytes > 0
    finally:
        first.shutdown()
        second.shutdown()
        other.client.close()


def test_a_pages_build_and_its_plans_hold_one_place(engine):
    """A page at a size nobody built wants the model's ledger and its plan: one configuration of the places, so
    two such pages fit two places."""
    fake_work.GATE = threading.Event()
    capped = make(engine, lease_s=5, max_configs=2)
    try:
        pages = {f"s{i}": [Want.build(make_spec("ResNet50", 160 + 16 * i)),
                           Want.of(setup(size=160 + 16 * i), Kind.PLAN, batch=8)] for i in range(2)}
        progress = keep_asking(capped, pages, lambda p: capped.pending() == 4)
        assert not [w for w, p in progress.items() if p.state == "refused"]
    finally:
        fake_work.GATE.set()
        capped.shutdown()
