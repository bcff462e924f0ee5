"""The one protocol between the parent and its children (calc.workers.protocol, calc.workers.child).

Fake children (``python -c``) stand in for Keras: these tests import no TensorFlow.
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest

from calc.workers.child import JOBS, Job, main, serve
from calc.workers.protocol import Child, answer_line, child_env, refusal_line, run_once
from tests.tools import wait_for


def test_the_child_answers_each_request_line_and_refuses_what_its_job_refuses():
    def run(request):
        if request["n"] < 0:
            raise ValueError(f"n must not be negative. Received: n={request['n']}")
        return {"twice": 2 * request["n"]}

    out = io.StringIO()
    serve(Job(run, refuses=(ValueError,), reason=str), io.StringIO('{"n": 2}\n\n{"n": -1}\n{"n": 5}\n'), out)
    assert out.getvalue() == (answer_line({"twice": 4}) + refusal_line("n must not be negative. Received: n=-1")
                              + answer_line({"twice": 10}))


def test_a_failure_the_job_does_not_refuse_ends_the_child():
    def run(request):
        raise RuntimeError("no allocator statistics")

    with pytest.raises(RuntimeError):
        serve(Job(run, refuses=()), io.StringIO('{}\n'), io.StringIO())


def test_the_jobs_refuse_as_they_always_did():
    assert JOBS["measure"].refuses == ()  # a failed measurement is the child's exit and its last words
    assert JOBS["profile-file"].refuses == (ValueError,) and JOBS["profile-file"].reason(ValueError("x")) == "x"
    assert JOBS["plan-xla"].refuses == (Exception,)
    assert JOBS["plan-xla"].reason(KeyError("Nope")) == "KeyError: 'Nope'"


def _fake(code: str) -> Child:
    return Child((sys.executable, "-c", code), child_env())


def test_a_reply_behind_chatter_and_without_its_newline_is_read():
    child = _fake("import sys\nsys.stdin.readline()\nsys.stdout.write('chatter\\nANSWER {\"a\": 1}')")
    reply = child.ask({"x": 1}, timeout_s=20)
    assert reply.answer == {"a": 1} and reply.refusal is None and not reply.failure
    assert child.close() == 0 and child.tail(3) == ["chatter"]


def test_a_child_that_ends_without_a_reply_is_a_failure_with_its_last_words(monkeypatch):
    from calc.workers import protocol

    dying = [sys.executable, "-c", "import sys\nsys.stderr.write('Traceback\\nMemoryError\\n'); sys.exit(3)"]
    monkeypatch.setattr(protocol, "child_command", lambda job: dying)
    outcome = run_once("measure", {}, env=child_env(), timeout_s=60)
    assert outcome.reply.failure == "ended" and outcome.reply.answer is None and outcome.reply.refusal is None
    assert outcome.returncode == 3 and outcome.exit_reason == "exit status 3"
    assert outcome.tail == ("Traceback", "MemoryError")


def test_a_child_asked_for_no_job_says_which_there_are(capsys):
    assert main(["no-such-job"]) == 2
    assert "usage: python -m calc.workers.child {measure,profile-file,plan-xla}" in capsys.readouterr().err


def test_a_child_past_its_time_is_stopped_and_a_long_stderr_never_blocks_it():
    # 1 MiB on stderr first: more than a pipe holds, so a parent that did not read it would wait forever.
    child = _fake("import sys, time\nsys.stderr.write('x' * 2**20 + '\\nlast words\\n'); sys.stderr.flush()\n"
                  "time.sleep(60)")
    started = time.monotonic()
    reply = child.ask({}, timeout_s=2)
    assert reply.failure == "time" and time.monotonic() - started < 10
    assert child.close() < 0 and child.tail(1) == ["last words"]


def test_the_request_reaches_the_child_as_one_json_line():
    child = _fake("import sys, json\nline = sys.stdin.readline()\n"
                  "print('ANSWER ' + json.dumps({'lines': line.count(chr(10)), 'got': json.loads(line)}))")
    request = {"target_config": "gpu_device_info {\n  core_count: 132\n}\n"}
    assert child.ask(request, timeout_s=20).answer == {"lines": 1, "got": request}
    child.close()


def test_the_disk_cache_keeps_the_most_recently_used_entries(tmp_path):
    import os

    from calc.disk_cache import read_entry, write_entry

    for i in range(5):
        write_entry(tmp_path / f"e{i}.json", str(i), keep=3)
        os.utime(tmp_path / f"e{i}.json", (1000 + i, 1000 + i))  # distinct ages on any file system
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["e2.json", "e3.json", "e4.json"]
    assert read_entry(tmp_path / "e2.json") == "2"  # used now: the newest
    write_entry(tmp_path / "e5.json", "5", keep=3)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["e2.json", "e4.json", "e5.json"]
    assert read_entry(tmp_path / "missing.json") is None and not list(tmp_path.glob(".*.tmp"))


def test_turns_are_first_come_first_served_and_a_leaver_lets_the_others_move_up():
    import threading

    from dashboard.turns import TurnQueue

    q = TurnQueue(poll_s=0.01)
    order, places = [], {}
    first_in = threading.Event()
    release_first = threading.Event()

    def visitor(name, hold=None, leave=False):
        def told(ahead):
            places.setdefault(name, []).append(ahead)
            if leave:
                raise RuntimeError("the visitor left")  # as Streamlit stops a script
        try:
            with q.turn(told):
                order.append(name)
                if hold is not None:
                    first_in.set()
                    hold.wait(5)
        except RuntimeError:
            pass

    threads = [threading.Thread(target=visitor, args=("a", release_first))]
    threads[0].start()
    assert first_in.wait(5)
    for name, leave, queued in (("b", True, 1), ("c", False, 2), ("d", False, 3)):
        threads.append(threading.Thread(target=visitor, args=(name, None, leave)))
        threads[-1].start()
        # b, c and d queue in this order behind a (b leaves at once)
        wait_for(lambda: q.waiting() == queued and name in places, timeout_s=5)
    release_first.set()
    for t in threads:
        t.join(5)
    assert order == ["a", "c", "d"]  # b left while waiting: it never ran and held no one up
    # b left before c came; each place only falls.
    assert places["b"] == [1] and places["c"] == [1] and places["d"][0] == 2 and places["d"] == sorted(places["d"])[::-1]
    assert q.waiting() == 0


def test_a_background_child_runs_lower_and_ends_when_its_parent_is_killed(tmp_path):
    """A parent process starts a child that asks for the parent-death signal (as the compile workers
    do), then is killed with SIGKILL: the kernel ends the child too, with its own process group."""
    import os
    import signal
    import subprocess

    parent = tmp_path / "parent.py"
    parent.write_text(
        "import sys, time\n"
        "from calc.workers.protocol import Child, background_env, child_env\n"
        "code = ('import os, sys, time; from calc.workers.child import follow_parent; follow_parent(dict(os.environ)); '\n"
        "        'print(os.getpid(), os.nice(0), os.getpgid(0), flush=True); time.sleep(120)')\n"
        "child = Child((sys.executable, '-c', code), background_env(child_env(), 7))\n"
        "print(child._stdout.readline().decode().strip(), flush=True)\n"
        "time.sleep(120)\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, str(parent)], stdout=subprocess.PIPE, env=env)
    try:
        pid, nice, group = map(int, proc.stdout.readline().split())
        assert nice == os.nice(0) + 7 and group == pid  # lower priority, its own process group
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"))
        assert not os.path.exists(f"/proc/{pid}")
    finally:
        proc.kill()


# --- one memory budget for all children together (calc.workers.pool) ----------------

GIB = 1 << 30


def test_the_pool_grants_what_fits_waits_for_room_and_refuses_in_one_line():
    import threading

    from calc.workers.pool import MemoryBusy, MemoryPool

    pool = MemoryPool(10 * GIB)
    first = pool.reserve(6 * GIB, what="a build", wait_s=0)
    start = time.monotonic()
    with pytest.raises(MemoryBusy, match=r"^The server's memory .*10.0 GiB.*a compile waited 0 s for 6.0 GiB") as busy:
        pool.reserve(6 * GIB, what="a compile", wait_s=0.2)
    assert "\n" not in str(busy.value) and 0.2 <= time.monotonic() - start < 5
    assert pool.held_bytes == 6 * GIB  # a refused reservation holds nothing
    threading.Timer(0.3, first.resize, args=(1 * GIB,)).start()  # the build ends: it keeps what it holds
    second = pool.reserve(6 * GIB, what="a compile", wait_s=5)
    assert pool.held_bytes == 7 * GIB and second.granted_bytes == 6 * GIB
    with pytest.raises(MemoryBusy):
        first.resize(5 * GIB, wait_s=0)  # growing back waits for room too
    assert first.granted_bytes == 1 * GIB
    first.release()
    second.release()
    with pool.reserve(64 * GIB, what="a huge compile", wait_s=0) as alone:  # more than the pool: the pool, alone
        assert alone.granted_bytes == pool.total_bytes == pool.held_bytes
    assert pool.held_bytes == 0


def test_the_pool_is_the_setting_or_three_quarters_of_the_host_less_its_own_clusters_workers(monkeypatch, tmp_path):
    """On a 24 GiB host of 2 cores: 18 GiB, less the server's own cluster (a compile worker of 8 GiB and a build
    worker of 6 GiB); with a cluster elsewhere, all 18 GiB."""
    from calc.workers import pool

    monkeypatch.setenv("CALC_CHILDREN_GIB", "12")
    assert pool.pool_bytes() == 12 * GIB
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\nMemFree:  1 kB\n")
    assert pool.host_memory_bytes(str(meminfo)) == 24 * GIB
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    for name in ("CALC_COMPILE_GIB", "CALC_BUILD_GIB", "CALC_XLA_WORKERS", "CALC_DASK_SCHEDULER"):
        monkeypatch.delenv(name, raising=False)
    for setting in ("lots", "0", "nan", "1e9"):
        monkeypatch.setenv("CALC_CHILDREN_GIB", setting)
        monkeypatch.setattr(pool, "host_memory_bytes", lambda: 24 * GIB)
        assert pool.pool_bytes() == 18 * GIB - 8 * GIB - 2 * 3 * GIB
    monkeypatch.setenv("CALC_DASK_SCHEDULER", "tcp://10.0.0.2:8786")
    assert pool.pool_bytes() == 18 * GIB


@pytest.fixture
def small_pool(monkeypatch):
    from calc.workers import pool

    shared = pool.MemoryPool(256 << 20)
    monkeypatch.setattr(pool, "_POOL", shared)
    return shared


def test_a_failure_is_recalled_until_it_lapses_and_the_oldest_go_first():
    from calc.workers.failures import FailureMemory

    memory = FailureMemory(max_kept=2)
    memory.remember("a", "out of registers", keep_s=60)
    message, age_s = memory.recall("a")
    assert message == "out of registers" and 0 <= age_s < 1
    memory.remember("b", "too slow", keep_s=0)  # lapsed at once
    assert memory.recall("b") is None
    memory.remember("c", "x", keep_s=60)
    memory.remember("d", "y", keep_s=60)  # a third kept: "a", the oldest, is forgotten
    assert memory.recall("a") is None and memory.recall("c")[0] == "x"
    memory.clear()
    assert memory.recall("d") is None


def test_a_model_whose_weights_alone_pass_the_budget_is_refused_before_a_worker_starts_it():
    """VGG16 at 544 px: its fc1 alone is 606 million parameters, and Keras holds three copies of
    it while it draws its values (7 GiB); eight such tabs each used to grow a child to its budget."""
    from calc.catalogue import build_bytes_at_least, make_spec
    from calc.requests import spec_to_dict
    from calc.service.tasks import prepare
    from calc.service.wants import BuildTask
    from calc.workers.plans import compile_plan
    from calc.xla import PlanError

    huge, fine = make_spec("VGG16", 544), make_spec("VGG16", 224)
    assert build_bytes_at_least(huge) > 6 << 30 > build_bytes_at_least(fine) > 3 * 4 * 102_764_544
    assert build_bytes_at_least(make_spec("ResNet50", 224)) == 4 * 3 * 2049 * 1000  # the head, drawn once
    with pytest.raises(ValueError, match=r"needs more than 6\.\d GiB for its weights alone.*memory limit of 6\.0 "
                                         "GiB: not started"):
        prepare(BuildTask(huge))  # the build worker's limit: twice CALC_BUILD_GIB
    assert prepare(BuildTask(fine))[1] == f"build-{fine.key}"
    with pytest.raises(PlanError, match="not started"):
        compile_plan({"spec": spec_to_dict(huge), "config": {}}, max_rss_bytes=4 << 30)
