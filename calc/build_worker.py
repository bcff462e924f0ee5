"""Keras builds in one long-lived child process, so a server never imports TensorFlow.

Building a catalogue model allocates its weights even with ``weights=None``, and
TensorFlow's CPU allocator keeps the memory afterwards: measured here, one process
that built every catalogue model held 1.2 GiB after TensorFlow's import and 2.3 GiB
after ConvNeXtXLarge (``malloc_trim`` returned nothing). A child that does the builds
keeps that out of the server: it is started on the first build (paying TensorFlow's
import once), serves builds one at a time over a pipe, is replaced when its resident
memory passes a limit, and exits after a while without work or when the server ends
(its stdin closes). A crash or a hang in it is an error for that request only.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time

from calc.catalogue import ModelSpec
from calc.requests import spec_to_dict
from calc.types import ModelProfile


class BuildError(ValueError):
    """The builder could not produce a profile (the reason is in the message)."""


def resident_bytes(pid: int) -> int:
    """A process's resident memory (Linux /proc), 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class BuildWorker:
    """One child process that turns ``ModelSpec``s into ``ModelProfile``s.

    Args:
        max_rss_bytes: after a build that leaves the child above this, it is replaced.
        idle_s: the child exits after this long without a request.
        timeout_s: one build longer than this is stopped (and the child with it).
    """

    command = (sys.executable, "-m", "calc.keras_adapter", "--serve-builds")

    def __init__(self, *, max_rss_bytes: int = 3 * 2**30, idle_s: float = 600.0, timeout_s: float = 300.0) -> None:
        self.max_rss_bytes = max_rss_bytes
        self.idle_s = idle_s
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._idle_timer: threading.Timer | None = None
        self.started = 0  # children started so far
        self.builds = 0
        self._pending = b""  # bytes read from the child past its last complete line

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def build(self, spec: ModelSpec) -> ModelProfile:
        """Builds ``spec`` in the child and returns its profile; raises ``BuildError``."""
        from calc.profiles import profile_from_dict

        with self._lock:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            proc = self._ensure_started()
            try:
                proc.stdin.write((json.dumps(spec_to_dict(spec)) + "\n").encode())
                proc.stdin.flush()
                line = self._read_reply(proc)
            except (OSError, BuildError) as exc:
                self._stop()
                raise BuildError(f"Building {spec.name} at {spec.height}x{spec.width} failed: {exc}") from None
            self.builds += 1
            if resident_bytes(proc.pid) > self.max_rss_bytes:
                self._stop()  # the next build starts a fresh child
            self._arm_idle_timer()
        kind, _, payload = line.partition(" ")
        if kind == "PROFILE":
            return profile_from_dict(json.loads(payload))
        raise BuildError(json.loads(payload))

    def close(self) -> None:
        with self._lock:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._stop()

    def _ensure_started(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            from calc.measure import child_env

            self._proc = subprocess.Popen(
                list(self.command),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                bufsize=0, env=child_env(),
            )
            self._pending = b""
            self.started += 1
        return self._proc

    def _read_reply(self, proc: subprocess.Popen) -> str:
        """The child's next PROFILE/ERROR line; other output (library chatter) is skipped.

        Reads the pipe's raw bytes and splits lines itself: a buffered ``readline``
        after ``select`` can leave the answer in its buffer, where ``select`` no
        longer sees it, and wait out the timeout (seen when the child printed a line
        of chatter just before its answer).
        """
        deadline = time.monotonic() + self.timeout_s
        fd = proc.stdout.fileno()
        while True:
            while b"\n" in self._pending:
                raw, self._pending = self._pending.split(b"\n", 1)
                line = raw.decode("utf-8", "replace")
                if line.startswith(("PROFILE ", "ERROR ")):
                    return line
            left = deadline - time.monotonic()
            if left <= 0:
                raise BuildError(f"it took more than {self.timeout_s:.0f} s and was stopped")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                if proc.poll() is not None:
                    raise BuildError("the builder process ended (out of memory?)")
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise BuildError("the builder process ended (out of memory?)")
            self._pending += chunk

    def _arm_idle_timer(self) -> None:
        self._idle_timer = threading.Timer(self.idle_s, self._stop_if_idle)
        self._idle_timer.daemon = True
        self._idle_timer.start()

    def _stop_if_idle(self) -> None:
        if self._lock.acquire(blocking=False):  # a build in progress is not idle
            try:
                self._stop()
            finally:
                self._lock.release()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()  # the child's loop ends on end of input
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        finally:
            if proc.stdout is not None:
                proc.stdout.close()


def serve_builds(stdin, stdout) -> int:
    """The child's loop: one JSON spec per input line, one PROFILE or ERROR line back."""
    from calc.keras_adapter import profile_catalogue_model
    from calc.profiles import profile_to_dict
    from calc.requests import spec_from_dict

    for line in stdin:
        try:
            profile = profile_catalogue_model(spec_from_dict(json.loads(line)))
            stdout.write("PROFILE " + json.dumps(profile_to_dict(profile)) + "\n")
        except Exception as exc:  # any failure of one build is that request's answer
            stdout.write("ERROR " + json.dumps(f"{type(exc).__name__}: {exc}"[:500]) + "\n")
        stdout.flush()
    return 0
