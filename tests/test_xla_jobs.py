"""The server's compile scheduler (dashboard/xla_jobs.py): pure, no Streamlit, no real compile.

Workers are fakes that answer with plans made by a formula (``fake_analysis``) and that a
cancel stops; the plans go through calc.xla's own cache, in each test's own folder.
"""

from __future__ import annotations

import threading
import time

import pytest

from calc import xla
from calc.catalogue import make_spec
from calc.types import TrainingConfig
from calc.workers.plans import PlanCancelled
from calc.xla import cache
from dashboard import xla_jobs
from dashboard.xla_jobs import Kind, Scheduler, Setup, Want
from tests.tools import wait_for

GIB = 2**30


def fake_analysis(batch: int) -> dict:
    """A child's answer shaped like XLA's: the state donated (aliased), the batch, temporaries of 60 MiB a sample."""
    state, x = 300 * 2**20, 600_000 * batch
    return {"argument_bytes": state + x, "output_bytes": state + 8, "alias_bytes": state,
            "temp_bytes": 40 * 2**20 + 60 * 2**20 * batch, "trainable_bytes": state // 3,
            "non_trainable_bytes": 0, "optimizer_bytes": state - state // 3, "metrics_bytes": 0, "batch_bytes": x,
            "build_seconds": 1.0, "compile_seconds": 1.0, "jax": "test", "keras": "test"}


class FakeWorker:
    """Compiles by formula after ``delay_s``, or when released; ``cancel`` stops it."""

    delay_s = 0.05
    gate: threading.Event | None = None
    calls: list[int] = []

    def __init__(self) -> None:
        self._cancel = threading.Event()

    def compile(self, request: dict) -> dict:
        batch = request["config"]["batch_size"]
        if "hub" in request["spec"]:  # a KerasHub text model: a sample's temporaries grow with its tokens
            batch *= request["spec"]["hub"]["sequence_length"] // 64
        FakeWorker.calls.append(batch)
        self._cancel.clear()
        deadline = time.monotonic() + self.delay_s
        while time.monotonic() < deadline or (FakeWorker.gate is not None and not FakeWorker.gate.is_set()):
            if self._cancel.wait(0.01):
                raise PlanCancelled("stopped")
        if batch == 13:
            raise xla.PlanError("XLA could not compile this step: out of registers")
        return fake_analysis(batch)

    def cancel(self) -> bool:
        self._cancel.set()
        return True

    def close(self) -> None:
        self._cancel.set()


@pytest.fixture(autouse=True)
def _own_plans(tmp_path, monkeypatch):
    monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(xla_jobs.COMPILES_ENV, "on")
    for module in (cache, xla.compute):
        monkeypatch.setattr(module, "plan_versions", lambda: {"jax": "test", "keras": "test"}, raising=False)
    monkeypatch.setattr(cache, "unavailable_reason", lambda: None)
    FakeWorker.calls, FakeWorker.gate, FakeWorker.delay_s = [], None, 0.05


@pytest.fixture
def scheduler():
    made = Scheduler(1, worker=FakeWorker, lease_s=0.6)
    yield made
    made.shutdown()


def setup(model="ResNet50", size=128, gpu="t4") -> Setup:
    return Setup.of(make_spec(model, size), TrainingConfig(batch_size=1), gpu)


def test_the_plan_a_page_shows_goes_before_searches_asked_earlier(scheduler):
    FakeWorker.gate = threading.Event()
    a, b = setup(), setup("MobileNetV2")
    search = Want(a, Kind.SEARCH, budget_bytes=8 * GIB, start=40)
    scheduler.ask("s1", [search])
    wait_for(lambda: FakeWorker.calls == [40])  # the search's first compile runs
    progress = scheduler.ask("s2", [Want(b, Kind.PLAN, batch=16)])
    scheduler.ask("s1", [search])
    assert [p.state for p in progress.values()] == ["queued"]
    FakeWorker.gate.set()
    wait_for(lambda: len(FakeWorker.calls) >= 3)
    assert FakeWorker.calls[:3] == [40, 16, FakeWorker.calls[2]] and FakeWorker.calls[2] != 16


def test_visitors_asking_the_same_plan_share_one_compile(scheduler):
    want = Want(setup(), Kind.PLAN, batch=24)
    for session in ("s1", "s2", "s3"):
        scheduler.ask(session, [want])
    wait_for(lambda: scheduler.ask("s1", [want])[want].state == "done")
    assert FakeWorker.calls == [24] and want.setup.known().plans[24].peak_bytes > 0
    assert scheduler.ask("s4", [want])[want].state == "done"  # kept on disk for every later visitor


def test_wants_lapse_when_their_session_stops_asking_and_a_compile_nobody_wants_is_stopped(scheduler):
    FakeWorker.gate = threading.Event()
    running, queued = Want(setup(), Kind.PLAN, batch=8), Want(setup("VGG16"), Kind.PLAN, batch=8)
    scheduler.ask("gone", [running, queued])
    wait_for(lambda: FakeWorker.calls == [8])
    # The visitor left: nobody asks again. The running compile is stopped, the queued one never starts.
    wait_for(lambda: scheduler.pending() == 0, timeout_s=5)
    time.sleep(0.3)
    assert FakeWorker.calls == [8] and scheduler.compiled == 0
    assert running.setup.known().plans == {}


def test_a_search_is_as_many_compiles_as_it_takes_and_counts_them(scheduler):
    want = Want(setup(), Kind.SEARCH, budget_bytes=6 * GIB, start=30)
    seen = []
    while (progress := scheduler.ask("s1", [want])[want]).state != "done":
        if progress.state == "running":
            seen.append((progress.step, progress.steps, progress.batch))
        time.sleep(0.01)
    answer = want.setup.known().curve.max_batch(6 * GIB)
    per_sample = 60 * 2**20 + 600_000
    brute = (6 * GIB - 300 * 2**20 - 8 - 40 * 2**20) // per_sample
    assert answer.settled and answer.batch == brute
    assert len(FakeWorker.calls) == scheduler.compiled <= 8
    steps = sorted({s for s, _, _ in seen})
    assert steps == list(range(1, len(steps) + 1)) and all(s <= n for s, n, _ in seen)


def test_the_longest_sequence_is_searched_one_compile_at_a_time_over_each_length(scheduler):
    """A sequence want compiles the page's batch at each length the search asks for, in a row, and
    says which compile and how many tokens; the answer fits, the next length read does not, and they
    are within 1/64 of each other."""
    from calc.hub import make_hub_spec
    from calc.xla.search import XlaMaxSequence

    page = Setup.of(make_hub_spec("gemma2_2b_en", 512, 4), TrainingConfig(batch_size=1, optimizer="adamw"), "l4")
    want = Want(page, Kind.SEQUENCE, batch=1, budget_bytes=6 * GIB)
    seen = []
    while (progress := scheduler.ask("s1", [want])[want]).state != "done":
        if progress.state == "running" and (progress.step, progress.tokens) not in seen:
            seen.append((progress.step, progress.tokens))
        time.sleep(0.01)
    answer = want.sequence(Setup.known)
    assert isinstance(answer, XlaMaxSequence)

    def peak(tokens):  # fake_analysis at tokens // 64 samples: the state, 8 bytes, 40 MiB and 60 MiB + 600,000 a sample
        return 300 * 2**20 + 8 + 40 * 2**20 + (60 * 2**20 + 600_000) * (tokens // 64)

    assert peak(answer.max_sequence) <= 6 * GIB < peak(answer.exceeds)
    assert answer.exceeds - answer.max_sequence <= answer.max_sequence // 64
    assert [t for _, t in seen][:5] == [512, 1024, 2048, 4096, 8192]  # the page's length first, then doubled
    assert [s for s, _ in seen] == list(range(1, len(seen) + 1)) and len(seen) == scheduler.compiled


def test_a_failure_is_one_line_kept_and_not_tried_again(scheduler):
    want = Want(setup(), Kind.PLAN, batch=13)
    wait_for(lambda: scheduler.ask("s1", [want])[want].state == "failed")
    progress = scheduler.ask("s2", [want])[want]
    assert progress.message == "XLA could not compile this step: out of registers"
    time.sleep(0.2)
    assert FakeWorker.calls == [13]


def test_past_its_cap_the_queue_refuses_new_configurations_with_one_line():
    FakeWorker.gate = threading.Event()
    capped = Scheduler(1, worker=FakeWorker, lease_s=5, max_configs=2)
    try:
        first = [Want(setup(size=96 + 32 * i), Kind.PLAN, batch=8) for i in range(3)]
        progress = {}
        for i, want in enumerate(first):
            progress.update(capped.ask(f"s{i}", [want]))
        states = [progress[w].state for w in first]
        assert states.count("refused") == 1 and "compile queue is full" in progress[first[2]].message
    finally:
        FakeWorker.gate.set()
        capped.shutdown()


def test_at_the_cap_a_newcomers_first_plan_takes_a_place_before_older_searches():
    """Thirty visitors of a class: those who came first search for their largest batch, and a
    newcomer's first number must not wait for all their searches to end."""
    FakeWorker.gate = threading.Event()
    capped = Scheduler(1, worker=FakeWorker, lease_s=5, max_configs=2)
    try:
        searching = [Want(setup(size=96 + 32 * i), Kind.SEARCH, budget_bytes=6 * GIB, start=40) for i in range(2)]
        newcomer = Want(setup("MobileNetV2"), Kind.PLAN, batch=16)
        capped.ask("s0", [searching[0]])
        wait_for(lambda: FakeWorker.calls == [40])  # the first search runs
        capped.ask("s1", [searching[1]])
        progress = capped.ask("s2", [newcomer])
        progress.update(capped.ask("s1", [searching[1]]))
        assert progress[newcomer].state == "queued" and progress[searching[1]].state == "refused"
        capped.ask("s0", [searching[0]])
        FakeWorker.gate.set()
        wait_for(lambda: len(FakeWorker.calls) >= 2)
        assert FakeWorker.calls[1] == 16
    finally:
        FakeWorker.gate.set()
        capped.shutdown()


def test_clients_take_turns_and_one_client_holds_at_most_its_share():
    """A script holding many sessions from one address neither makes a newcomer from another wait
    behind all its plans nor takes every place."""
    FakeWorker.gate = threading.Event()
    made = Scheduler(1, worker=FakeWorker, lease_s=5, max_configs=8, max_per_client=3)
    try:
        script = [Want(setup(size=96 + 32 * i), Kind.PLAN, batch=8 + i) for i in range(5)]
        progress = {}
        for i, want in enumerate(script):
            progress.update(made.ask(f"bot{i}", [want], client="10.0.0.9"))
        wait_for(lambda: FakeWorker.calls == [8])
        newcomer = Want(setup("VGG16"), Kind.PLAN, batch=30)
        progress.update(made.ask("human", [newcomer], client="10.0.0.7"))
        for i, want in enumerate(script):
            progress.update(made.ask(f"bot{i}", [want]))  # the client is kept for the session
        assert [progress[w].state for w in script[3:]] == ["refused", "refused"]
        assert "this address has 5 configurations" in progress[script[4]].message
        # Next after the script's running compile, not behind its four other plans.
        assert progress[newcomer].state == "queued" and progress[newcomer].ahead == 1
        FakeWorker.gate.set()
        wait_for(lambda: len(FakeWorker.calls) >= 2)
        assert FakeWorker.calls[:2] == [8, 30]
    finally:
        FakeWorker.gate.set()
        made.shutdown()


def test_a_long_compile_gives_way_to_another_visitors_and_runs_again_when_none_waits():
    """One link (NASNetLarge at 8192 px, full remat) once held the only worker for 16 minutes. Past
    ``yield_s`` a compile is stopped when another client's waits, goes after every other, says so,
    and finishes once nobody else waits; a compile that gave way never makes another give way."""
    from dashboard.xla_step import progress_text

    FakeWorker.gate = threading.Event()
    made = Scheduler(1, worker=FakeWorker, lease_s=5, yield_s=0.3)
    try:
        long = Want(setup("NASNetLarge", 331), Kind.PLAN, batch=1)
        made.ask("slow", [long], client="10.0.0.1")
        wait_for(lambda: FakeWorker.calls == [1])
        time.sleep(1.0)  # past yield_s with nobody else waiting: it goes on
        assert made.ask("slow", [long])[long].state == "running"
        quick = Want(setup("MobileNetV2", 96), Kind.PLAN, batch=8)
        made.ask("newcomer", [quick], client="10.0.0.2")
        wait_for(lambda: FakeWorker.calls == [1, 8])
        paused = made.ask("slow", [long])[long]
        assert (paused.state, paused.held_by, paused.limit_s) == ("queued", "yielded", 0.3)
        assert "It compiled for more than 0 s while other visitors' compiles waited, so it gave way" in \
            progress_text(long, paused)
        time.sleep(1.0)  # the newcomer's compile runs past yield_s too: the one that gave way does not stop it
        made.ask("newcomer", [quick])
        assert made.ask("slow", [long])[long].state == "queued" and FakeWorker.calls == [1, 8]
        FakeWorker.gate.set()
        wait_for(lambda: made.ask("slow", [long])[long].state == "done")
        assert FakeWorker.calls == [1, 8, 1] and made.compiled == 2
    finally:
        FakeWorker.gate.set()
        made.shutdown()


def test_a_plan_known_without_what_fills_its_peak_is_compiled_once_more_to_say_it(scheduler):
    """Shipped plans leave the explanation out: the page's batch is compiled again, once; a compile
    that still does not say is a failure kept, not a compile for every page."""
    want = Want(setup(), Kind.PLAN, batch=12)
    scheduler.ask("s1", [want])
    wait_for(lambda: scheduler.ask("s1", [want])[want].state == "done")
    explain = Want(setup(), Kind.EXPLAIN, batch=12)
    assert explain.next_batch(explain.setup.known()) == 12  # the fake compile says nothing of the peak
    progress = scheduler.ask("s1", [explain])
    assert progress[explain].state in ("queued", "running")
    wait_for(lambda: scheduler.ask("s1", [explain])[explain].state == "failed")
    assert "did not say what fills the peak" in scheduler.ask("s1", [explain])[explain].message
    time.sleep(0.3)
    assert FakeWorker.calls == [12, 12]
    assert Want(setup(), Kind.EXPLAIN, batch=13).next_batch(setup().known()) is None  # no plan yet: PLAN's turn


def test_with_compiles_off_nothing_runs(scheduler, monkeypatch):
    monkeypatch.setenv(xla_jobs.COMPILES_ENV, "off")
    want = Want(setup(), Kind.PLAN, batch=8)
    assert scheduler.ask("s1", [want])[want].state == "off"
    time.sleep(0.2)
    assert FakeWorker.calls == []


def test_shutdown_stops_the_running_compile():
    FakeWorker.gate = threading.Event()
    made = Scheduler(1, worker=FakeWorker, lease_s=30)
    want = Want(setup(), Kind.PLAN, batch=8)
    made.ask("s1", [want])
    wait_for(lambda: FakeWorker.calls == [8])
    started = time.monotonic()
    made.shutdown()
    wait_for(lambda: made.pending() == 0, timeout_s=5)
    assert time.monotonic() - started < 5 and made.compiled == 0  # not the compile's lease of 30 s


@pytest.mark.parametrize("value, cores, expected", [("", 2, 1), ("", 16, 4), ("3", 2, 3), ("x", 8, 2), ("99", 2, 8)])
def test_compile_workers_come_from_the_setting_or_the_cores(monkeypatch, value, cores, expected):
    monkeypatch.setenv(xla_jobs.WORKERS_ENV, value)
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert xla_jobs.compile_workers() == expected


def test_the_client_is_the_peer_or_behind_the_proxy_the_address_the_proxy_appended(monkeypatch):
    from types import SimpleNamespace

    from dashboard import xla_step

    def seen_from(peer, forwarded=None):
        headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        monkeypatch.setattr(xla_step, "st", SimpleNamespace(context=SimpleNamespace(ip_address=peer, headers=headers)))
        return xla_step.client_address()

    assert seen_from("203.0.113.5", "1.2.3.4") == "203.0.113.5"  # a direct peer: its header is not trusted
    assert seen_from("127.0.0.1", "6.6.6.6, 198.51.100.7") == "198.51.100.7"  # the visitor's own claim comes first
    assert seen_from("127.0.0.1") == "127.0.0.1"
    assert seen_from(None) == ""


def test_a_waiting_configuration_says_whose_places_are_taken_in_the_visitors_language():
    from dashboard.i18n import set_language
    from dashboard.xla_jobs import Progress
    from dashboard.xla_step import progress_text

    want = Want(setup(), Kind.PLAN, batch=8)
    client, server = Progress("refused", 8, held_by="client", count=17), Progress("refused", 8, held_by="server",
                                                                                    count=32)
    try:
        assert progress_text(want, client) == ("Waiting: this address has 17 configurations waiting for compiles; "
                                               "this one waits for one of them.")
        assert "compile queue is full (32 configurations waiting)" in progress_text(want, server)
        set_language("ja")
        assert "17 件の構成" in progress_text(want, client) and "待機中の構成 32 件" in progress_text(want, server)
        set_language("ko")
        assert "구성 17개" in progress_text(want, client)
        set_language("en")
        assert progress_text(want, Progress("running", 8, held_by="memory")).startswith(
            "Waiting for memory: XLA's plan at batch 8;")
    finally:
        set_language("en")
