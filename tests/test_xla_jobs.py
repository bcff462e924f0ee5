"""The dashboard's background compile queue (dashboard/xla_jobs.py): pure, no Streamlit, no compile."""

from __future__ import annotations

import threading
import time

import pytest

from dashboard import xla_jobs
from dashboard.xla_jobs import Job, JobRegistry


def blocked(gate: threading.Event, answer="plan"):
    def work():
        gate.wait(30)
        return answer
    return work


def wait_done(job: Job, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not job.done and time.monotonic() < deadline:
        time.sleep(0.01)
    assert job.done


@pytest.fixture
def jobs():
    registry = JobRegistry(max_per_session=2)
    yield registry
    registry.clear()


def test_identical_jobs_share_one_and_run_in_order(jobs):
    gate = threading.Event()
    first = jobs.submit("a", blocked(gate, 1), "A", "s1")
    again = jobs.submit("a", blocked(gate, 2), "A", "s2")  # another session, same key: the same job
    second = jobs.submit("b", blocked(gate, 3), "B", "s2")
    assert again is first and first.sessions == {"s1", "s2"}
    while not first.running:
        time.sleep(0.01)
    assert first.started_s is not None and jobs.place(first) == 0 and jobs.place(second) == 1
    gate.set()
    wait_done(second)
    assert (first.result, second.result) == (1, 3) and first.finished_s <= second.started_s


def test_a_session_holds_at_most_its_cap_and_drops_what_it_no_longer_wants(jobs):
    gate = threading.Event()
    running = jobs.submit("a", blocked(gate), "A", "s1")
    queued = jobs.submit("b", blocked(gate), "B", "s1")
    refused = jobs.submit("c", blocked(gate), "C", "s1")
    assert isinstance(refused, str) and "at most 2" in refused
    assert isinstance(jobs.submit("c", blocked(gate), "C", "s2"), Job)  # the cap is per session
    while not running.running:
        time.sleep(0.01)
    jobs.release("s1", {"c"})  # s1 moved on: its queued job goes, the running one cannot be stopped
    assert jobs.get("b") is None and queued.future.cancelled() and jobs.get("a") is running
    assert isinstance(jobs.submit("d", blocked(gate), "D", "s1"), Job)
    gate.set()


def test_a_failure_is_one_line_and_kept(jobs):
    def fails():
        raise RuntimeError("first line\nsecond line")

    job = jobs.submit("x", fails, "X", "s1")
    wait_done(job)
    assert job.error == "the compile failed: RuntimeError: first line" and job.result is None
    assert jobs.submit("x", fails, "X", "s1") is job  # not retried at once


def test_compiles_off_queues_nothing(monkeypatch):
    monkeypatch.setenv(xla_jobs.COMPILES_ENV, "off")
    assert not xla_jobs.compiles_enabled()
    answer = xla_jobs.request_plan(None, None, "t4", "", "label", "s1")
    assert isinstance(answer, str) and "CALC_XLA_COMPILES=off" in answer
    monkeypatch.setenv(xla_jobs.COMPILES_ENV, "on")
    assert xla_jobs.compiles_enabled()
