"""One upload read at a time server-wide, first come first served, each visitor told their
place: reading an uploaded model is a child process of up to 4 GiB and 180 s (builds and
compiles run on the engine's workers instead: ``calc.service``).

A session whose script is stopped while it waits (its visitor left, or changed a widget)
leaves the queue, so the sessions behind it move up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class TurnQueue:
    """First come, first served, one at a time."""

    def __init__(self, poll_s: float = 0.5) -> None:
        self.poll_s = poll_s
        self._cond = threading.Condition()
        self._queue: list[object] = []

    @contextmanager
    def turn(self, on_wait: Callable[[int], None] = lambda ahead: None) -> Iterator[None]:
        """Waits for this caller's turn, calling ``on_wait(requests ahead)`` when that number changes."""
        token = object()
        with self._cond:
            self._queue.append(token)
        try:
            told = 0
            while ahead := self._ahead(token):
                if ahead != told:
                    on_wait(ahead)  # outside the lock: a page update may stop this script
                    told = ahead
                with self._cond:
                    if self._queue.index(token) == told:  # nobody ahead has left since
                        self._cond.wait(self.poll_s)
            yield
        finally:
            with self._cond:
                self._queue.remove(token)
                self._cond.notify_all()

    def _ahead(self, token: object) -> int:
        with self._cond:
            return self._queue.index(token)

    def waiting(self) -> int:
        """Requests in the queue, the one being served included."""
        with self._cond:
            return len(self._queue)


READS = TurnQueue()  # uploaded files, read one at a time
