"""One memory budget for all of a process's children together.

Each child has its own budget (``calc.workers.budgets``), which its watchdog enforces; this
pool bounds their sum. A child reserves its budget from the pool before it starts a request
and waits while the others hold too much; a long-lived worker (the build worker, a compile
worker) keeps, between requests, only what it holds resident, and grows back to its budget,
waiting if need be, before its next request. So the process tree's children stay under the
pool however many tabs ask for builds, compiles, uploads and measurements at once.

The pool is ``CALC_CHILDREN_GIB`` GiB, else three quarters of the host's memory (the rest for
the server, the system and the page cache) less the memory limits of the server's own cluster's
workers (``calc.cluster``: builds and compiles, each under its nanny's limit). A reservation
larger than the whole pool is granted the pool: that child then runs alone, under the pool as
its budget.
"""

from __future__ import annotations

import math
import os
import threading
import time

from calc.workers.budgets import gib

POOL_ENV = "CALC_CHILDREN_GIB"
HOST_SHARE = 0.75
MIN_POOL_BYTES = 1 << 30


class MemoryBusy(ValueError):
    """The pool stayed too full for a reservation within its wait (one line for the user)."""


def host_memory_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """The host's memory (``MemTotal``), or None where it cannot be read."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def pool_bytes() -> int:
    """``CALC_CHILDREN_GIB`` (0.25 to 4096 GiB), else ``HOST_SHARE`` of the host's memory (8 GiB
    where it cannot be read) less the limits of this host's own cluster's workers; at least 1 GiB."""
    try:
        setting = float(os.environ.get(POOL_ENV, "nan"))
    except ValueError:
        setting = math.nan
    if math.isfinite(setting) and 0.25 <= setting <= 4096:
        return int(setting * 2**30)
    host = host_memory_bytes()
    share = int(HOST_SHARE * host) if host else 8 << 30
    return max(MIN_POOL_BYTES, share - own_cluster_bytes())


def own_cluster_bytes() -> int:
    """The memory limits of the workers this host's own cluster runs (none where the server uses a cluster
    elsewhere, ``CALC_DASK_SCHEDULER``)."""
    from calc.cluster.settings import own_workers, shared_cluster, worker_limits

    if shared_cluster():
        return 0
    limits = worker_limits()
    return sum(limits[kind] * count for kind, count in own_workers().items())


class MemoryPool:
    """Bytes reserved by children, never more than ``total_bytes`` together."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self._held = 0
        self._cond = threading.Condition()

    @property
    def held_bytes(self) -> int:
        with self._cond:
            return self._held

    def reserve(self, nbytes: int, *, what: str, wait_s: float) -> Reservation:
        """A reservation of ``nbytes`` (at most the whole pool), once the others leave room for it.

        Raises:
            MemoryBusy: no room came within ``wait_s`` seconds.
        """
        reservation = Reservation(self, what)
        reservation.resize(nbytes, wait_s=wait_s)
        return reservation

    def _resize(self, reservation: Reservation, nbytes: int, wait_s: float) -> None:
        nbytes = max(0, min(nbytes, self.total_bytes))
        deadline = time.monotonic() + wait_s
        with self._cond:
            while nbytes > reservation.granted_bytes and self._held - reservation.granted_bytes + nbytes > self.total_bytes:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise MemoryBusy(f"The server's memory for background work ({gib(self.total_bytes)}) is in use "
                                     f"by other visitors' work: {reservation.what} waited {wait_s:.0f} s for "
                                     f"{gib(nbytes)}. Try again in a minute.")
                self._cond.wait(left)
            self._held += nbytes - reservation.granted_bytes
            reservation.granted_bytes = nbytes
            self._cond.notify_all()


class Reservation:
    """A child's share of the pool: ``granted_bytes``, grown (waiting) or shrunk by ``resize``."""

    def __init__(self, pool: MemoryPool, what: str) -> None:
        self.pool = pool
        self.what = what
        self.granted_bytes = 0

    def resize(self, nbytes: int, *, wait_s: float = 0.0) -> int:
        """Holds ``nbytes`` (at most the pool) from now on; returns what is granted.

        Raises:
            MemoryBusy: growing found no room within ``wait_s`` (the reservation is unchanged).
        """
        self.pool._resize(self, nbytes, wait_s)
        return self.granted_bytes

    def release(self) -> None:
        self.pool._resize(self, 0, 0.0)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_POOL: MemoryPool | None = None
_POOL_LOCK = threading.Lock()


def shared_pool() -> MemoryPool:
    """This process's pool, sized on first use (``pool_bytes``)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = MemoryPool(pool_bytes())
        return _POOL
