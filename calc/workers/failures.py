"""Failures answered from memory for a while, so that a reload or another tab does not start
the same failing work again (a build or a compile stopped at its limit)."""

from __future__ import annotations

import time
from collections.abc import Hashable


class FailureMemory:
    """Each key's last failure (a one-line message) until it lapses; at most ``max_kept``, the
    oldest forgotten first."""

    def __init__(self, max_kept: int = 1024) -> None:
        self.max_kept = max_kept
        self._kept: dict[Hashable, tuple[str, float, float]] = {}  # key -> (message, when, lapses at)

    def remember(self, key: Hashable, message: str, keep_s: float) -> None:
        now = time.monotonic()
        self._kept.pop(key, None)
        self._kept[key] = (message, now, now + keep_s)
        while len(self._kept) > self.max_kept:
            del self._kept[next(iter(self._kept))]

    def recall(self, key: Hashable) -> tuple[str, float] | None:
        """(the message, seconds since it failed), or None when nothing is kept or it has lapsed."""
        kept = self._kept.get(key)
        if kept is None:
            return None
        message, when, lapses = kept
        now = time.monotonic()
        if now >= lapses:
            del self._kept[key]
            return None
        return message, now - when

    def clear(self) -> None:
        self._kept.clear()
