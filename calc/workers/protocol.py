"""The one protocol between this process and its children, and the parent's side of it.

A child is ``python -m calc.workers.child JOB`` (``child_command``) in ``child_env()``.
It reads requests on its stdin, one JSON document per line, and writes one reply line
on its stdout for each: ``ANSWER <json>`` (the job's result) or ``REFUSED <json string>``
(why the job cannot answer this request, one line for the user). Any other line it
prints is library chatter and is skipped. The child ends when its stdin closes, so a
one-shot child (``run_once``) gets one request and its stdin closed, and the build
worker keeps one child for many requests.

A child that ends, runs past its time or grows past its memory budget before replying
is stopped and gives a ``Reply`` whose ``failure`` says which: never an exception here.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

ANSWER = "ANSWER"
REFUSED = "REFUSED"
POOL_WAIT_S = 120.0  # how long a one-shot child waits for room in the memory pool
KEEP_TAIL_BYTES = 64 * 1024  # the end of a child's stderr and chatter, for its failure message
EXIT_GRACE_S = 10.0  # a one-shot child that has replied gets this long to exit on its own


def answer_line(answer: Any) -> str:
    return f"{ANSWER} {json.dumps(answer)}\n"


def refusal_line(reason: str) -> str:
    return f"{REFUSED} {json.dumps(reason)}\n"


def child_command(job: str) -> list[str]:
    """The command line of a child that serves ``job`` (a name in ``calc.workers.child.JOBS``)."""
    return [sys.executable, "-m", "calc.workers.child", job]


def child_env() -> dict[str, str]:
    """Environment for a child: quiet TF, this checkout importable.

    oneDNN on: TensorFlow tracks the CPU allocator's statistics only through oneDNN's
    allocator ("Allocator stats not available for device 'CPU:0'" without it), and TF 2.21
    turns oneDNN on by default only on CPUs with AVX512 or AMX (seen off on an AMD EPYC
    with AVX2). Every committed CPU measurement ran with it on.
    """
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1",
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    return env


DIE_WITH_ENV = "CALC_CHILD_DIES_WITH"  # a parent's pid: the child ends when that parent does
NICE_ENV = "CALC_CHILD_NICE"  # the child lowers its CPU priority by this much


def background_env(env: dict[str, str], nice: int) -> dict[str, str]:
    """``env`` for a child that runs behind the pages: at a lower CPU priority, and ended by the
    kernel when this process ends, also by SIGKILL (``calc.workers.child.follow_parent``).

    The kernel's signal follows the thread that started the child, so only children started by a
    thread that lives as long as the process (the main thread, a worker thread) may ask for it.
    """
    return {**env, DIE_WITH_ENV: str(os.getpid()), NICE_ENV: str(nice)}


def resident_bytes(pid: int) -> int:
    """A process's resident memory (Linux /proc), 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@dataclass(frozen=True)
class Reply:
    """What a child gave for one request: an answer, a refusal, or a failure.

    ``failure`` is "" when the child replied, else "time" (stopped past its time),
    "memory" (stopped past its memory budget) or "ended" (it ended without a reply).
    """

    answer: Any = None
    refusal: str | None = None
    failure: str = ""
    peak_rss_bytes: int = 0  # the child's largest resident memory seen while waiting


class Child:
    """One running child process that serves requests of one job.

    Reads the pipes' raw bytes and splits lines itself: a buffered ``readline`` after
    ``select`` can leave the answer in its buffer, where ``select`` no longer sees it,
    and wait out the timeout (seen when a child printed a line of chatter just before
    its answer). Its stderr is read alongside, so that a chatty child never blocks on a
    full pipe, and its last ``KEEP_TAIL_BYTES`` are kept for the failure message.
    """

    def __init__(self, command: list[str] | tuple[str, ...], env: dict[str, str]) -> None:
        # Its own process group, so that stopping it stops what it started (XLA runs ptxas).
        self.proc = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0, env=env, start_new_session=True)
        stdin, stdout, stderr = self.proc.stdin, self.proc.stdout, self.proc.stderr
        assert stdin is not None and stdout is not None and stderr is not None  # all three are pipes
        self._stdin, self._stdout, self._stderr = stdin, stdout, stderr
        self._out, self._err = stdout.fileno(), stderr.fileno()
        self._open = {self._out, self._err}  # the pipes not at their end yet
        self._pending = b""  # stdout past its last complete line
        self.chatter = b""  # the tail of the stdout lines that were not replies
        self.stderr = b""  # the tail of stderr

    def ask(self, request: Any, *, timeout_s: float, max_rss_bytes: int | None = None,
            poll_s: float = 0.25) -> Reply:
        """Sends one request and waits for its reply; stops the child past ``timeout_s`` or past
        ``max_rss_bytes`` resident (no budget when None)."""
        try:
            self._stdin.write((json.dumps(request) + "\n").encode())
            self._stdin.flush()
        except OSError:  # it ended before reading: the reply is that failure, below
            pass
        deadline = time.monotonic() + timeout_s
        peak_rss, ended = 0, False
        while True:
            if (reply := self._next_reply(peak_rss)) is not None:
                return reply
            if ended:
                return Reply(failure="ended", peak_rss_bytes=peak_rss)
            ended = self._read(min(max(deadline - time.monotonic(), 0.0), poll_s))
            if ended:
                continue  # what it wrote last may be the reply
            peak_rss = max(peak_rss, resident_bytes(self.proc.pid))
            # Past both limits at one look, the memory is the reason: the time ran out on it.
            failure = "memory" if max_rss_bytes is not None and peak_rss > max_rss_bytes else \
                "time" if time.monotonic() > deadline else ""
            if failure:
                self.kill()
                return Reply(failure=failure, peak_rss_bytes=peak_rss)

    def _next_reply(self, peak_rss: int) -> Reply | None:
        while b"\n" in self._pending:
            raw, self._pending = self._pending.split(b"\n", 1)
            kind, _, payload = raw.decode("utf-8", "replace").partition(" ")
            if kind in (ANSWER, REFUSED):
                try:
                    value = json.loads(payload)
                except ValueError:
                    value = payload = ""
                if payload:
                    return Reply(answer=value, peak_rss_bytes=peak_rss) if kind == ANSWER else \
                        Reply(refusal=str(value), peak_rss_bytes=peak_rss)
            self.chatter = (self.chatter + raw + b"\n")[-KEEP_TAIL_BYTES:]
        return None

    def _read(self, wait_s: float) -> bool:
        """Reads what the child writes within ``wait_s``. True once it can reply no more: its
        stdout is at its end, or it has ended and left nothing to read."""
        ready = select.select(sorted(self._open), [], [], wait_s)[0] if self._open else []
        for fd in ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self._open.discard(fd)
                if fd == self._out and self._pending:
                    self._pending += b"\n"  # a last line without its newline is read too
            elif fd == self._out:
                self._pending += chunk
            else:
                self.stderr = (self.stderr + chunk)[-KEEP_TAIL_BYTES:]
        return self._out not in self._open or (not ready and self.proc.poll() is not None)

    def tail(self, lines: int) -> list[str]:
        """The last lines of the child's stderr, or of its chatter where stderr is empty."""
        return (self.stderr or self.chatter).decode("utf-8", "replace").strip().splitlines()[-lines:]

    def close(self, wait_s: float = 5.0) -> int:
        """Closes the child's stdin (its loop ends there) and lets it end; kills it past ``wait_s``.

        Returns its exit status (negative: the signal that ended it).
        """
        try:
            self._stdin.close()
        except OSError:
            pass
        deadline = time.monotonic() + wait_s
        while self.proc.poll() is None and self._open and time.monotonic() < deadline:
            self._read(0.1)  # its pipes keep draining while it ends
        try:
            self.proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            self.kill()
        deadline = time.monotonic() + 1.0
        while self._open and time.monotonic() < deadline and select.select(sorted(self._open), [], [], 0.1)[0]:
            self._read(0.0)  # what it left in its pipes; a grandchild holding one is not waited for
        self._stdout.close()
        self._stderr.close()
        return self.proc.returncode

    def kill(self) -> None:
        """Stops the child and its process group at once (safe from another thread, and twice)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()
        self.proc.wait()


@dataclass(frozen=True)
class Outcome:
    """A one-shot child's reply, its exit status and the tail of what it printed."""

    reply: Reply
    returncode: int
    tail: tuple[str, ...]

    @property
    def exit_reason(self) -> str:
        return "killed (out of memory?)" if self.returncode < 0 else f"exit status {self.returncode}"


def run_once(job: str, request: Any, *, env: dict[str, str], timeout_s: float, max_rss_bytes: int | None = None,
             poll_s: float = 0.25, tail_lines: int = 3, pool_wait_s: float = POOL_WAIT_S) -> Outcome:
    """Runs one request in a fresh child of ``job`` and lets the child end.

    A child with a memory budget first reserves it from the process's pool
    (``calc.workers.pool``), waiting up to ``pool_wait_s``; its watchdog then stops it at
    what was granted. The child ends with this process, also when this one is killed
    (``background_env``).

    Raises:
        MemoryBusy: the pool had no room for the budget within ``pool_wait_s``.
    """
    from calc.workers.pool import shared_pool

    with shared_pool().reserve(max_rss_bytes or 0, what=f"the {job} job", wait_s=pool_wait_s) as reserved:
        # Ended with this process however it ends: the calling thread waits for the child, so it outlives it.
        child = Child(child_command(job), env if DIE_WITH_ENV in env else background_env(env, 0))
        limit = reserved.granted_bytes if max_rss_bytes is not None else None
        reply = child.ask(request, timeout_s=timeout_s, max_rss_bytes=limit, poll_s=poll_s)
        returncode = child.close(EXIT_GRACE_S)
    return Outcome(reply, returncode, tuple(child.tail(tail_lines)))
