"""TensorFlow's BFC allocator, as far as its reported peak is concerned.

A tensor often occupies more than its size: the allocator grows its pool by regions
whose size doubles, and hands a free chunk out whole unless it is at least twice the
request or the remainder is at least 128 MiB. The peak it reports counts whole chunks,
so a step's peak jumps by tens of MiB when one tensor crosses a chunk size, and is not
monotonic in the batch (docs/notes/allocator.md: a frozen MobileNetV2 stage measured 80 MiB at
batch 8 and 64 MiB at batch 12; the full model 267 MiB at batch 24 and 447 at 28).

The model follows ``tensorflow/tsl/framework/bfc_allocator.cc``:

- requests rounded up to 256 bytes (``kMinAllocationSize``);
- 21 bins by size class (bin b holds free chunks of [256 * 2^b, 256 * 2^(b+1)), the
  last one everything larger), each ordered by (size, address);
- ``FindChunkPtr``: from the request's bin upwards, the smallest then lowest-address
  free chunk that fits; split only if it is at least twice the request or the
  remainder is at least 128 MiB (``kMaxInternalFragmentation``), else handed out whole;
- ``Extend`` with allow_growth: a new region of ``curr_region_allocation_bytes_`` (2 MiB
  at first, doubled until the request fits, else doubled after the allocation);
  regions are not coalesced with each other;
- a freed chunk merges with free neighbours in its region;
- ``bytes_in_use`` and its peak count whole chunks.

Pure Python: no TensorFlow. ``tests/test_allocator.py`` checks hand cases;
``archive/probes/bfc_sim.py`` compared the engine with it against measurements.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from calc.facts.allocator import ALLOCATION_GRANULE, INITIAL_REGION, NUM_BINS, SPLIT_ALWAYS_ABOVE


def rounded(nbytes: int) -> int:
    """The request size the allocator works with: a multiple of 256 bytes."""
    return -(-nbytes // ALLOCATION_GRANULE) * ALLOCATION_GRANULE


def bin_for(size: int) -> int:
    """The bin of a chunk size: floor(log2(size / 256)), at most the last bin."""
    b = (size >> 8).bit_length() - 1
    return b if 0 <= b < NUM_BINS else (0 if b < 0 else NUM_BINS - 1)


@dataclass(eq=False, slots=True)
class Chunk:
    """A piece of one region: in use (handed out whole) or free."""

    ptr: int
    size: int
    in_use: bool = False
    prev: Chunk | None = None
    next: Chunk | None = None


def _absorb(first: Chunk, second: Chunk) -> None:
    """Merges free ``second`` (right after ``first`` in its region) into ``first``."""
    first.size += second.size
    first.next = second.next
    if second.next is not None:
        second.next.prev = first


class BFC:
    """Best-fit with coalescing, growing by doubling regions (allow_growth).

    ``filled`` has bit b set while bin b holds a free chunk, so a search goes from the
    request's own bin straight to the next one that has any (a dashboard curve replays a
    step's requests a few hundred times).
    """

    def __init__(self, initial_region: int = INITIAL_REGION) -> None:
        self.curr_region = rounded(initial_region)
        self.regions: list[int] = []
        self.heads: list[Chunk] = []  # each region's first chunk (it never merges into a predecessor)
        self.bins: list[list[tuple[int, int, Chunk]]] = [[] for _ in range(NUM_BINS)]
        self.filled = 0
        self.next_ptr = 0
        self.in_use = 0
        self.peak = 0

    def _insert(self, c: Chunk) -> None:
        b = bin_for(c.size)
        bisect.insort(self.bins[b], (c.size, c.ptr, c))
        self.filled |= 1 << b

    def _remove(self, c: Chunk) -> None:
        b = bin_for(c.size)
        entries = self.bins[b]
        del entries[bisect.bisect_left(entries, (c.size, c.ptr))]
        if not entries:
            self.filled &= ~(1 << b)

    def _find(self, r: int) -> Chunk | None:
        b = bin_for(r)
        bins = self.bins
        entries = bins[b]
        i = bisect.bisect_left(entries, (r, -1)) if entries else 0
        if i == len(entries):  # nothing in the request's own bin fits: the smallest of the next bin that has any
            higher = self.filled >> (b + 1)
            if not higher:
                return None
            b += (higher & -higher).bit_length()
            entries, i = bins[b], 0
        c = entries.pop(i)[2]
        if not entries:
            self.filled &= ~(1 << b)
        if c.size >= 2 * r or c.size - r >= SPLIT_ALWAYS_ABOVE:
            rest = Chunk(c.ptr + r, c.size - r, False, c, c.next)
            if c.next is not None:
                c.next.prev = rest
            c.next = rest
            c.size = r
            self._insert(rest)
        return c

    def _extend(self, r: int) -> None:
        grew = False
        while r > self.curr_region:
            self.curr_region *= 2
            grew = True
        size = self.curr_region
        if not grew:
            self.curr_region *= 2
        self.regions.append(size)
        head = Chunk(self.next_ptr, size)
        self.heads.append(head)
        self._insert(head)
        self.next_ptr += size + (1 << 40)  # regions are never adjacent

    def alloc(self, nbytes: int) -> Chunk:
        r = rounded(max(1, nbytes))
        c = self._find(r)
        if c is None:
            self._extend(r)
            c = self._find(r)
            assert c is not None
        c.in_use = True
        self.count(c.size)
        return c

    def count(self, nbytes: int) -> None:
        """Adds bytes in use (a chunk handed out, or a request counted without a place: ``calc.engine.floors.replay``)."""
        self.in_use += nbytes
        if self.in_use > self.peak:
            self.peak = self.in_use

    def free(self, c: Chunk) -> None:
        c.in_use = False
        self.in_use -= c.size
        n = c.next
        if n is not None and not n.in_use:
            self._remove(n)
            _absorb(c, n)
        p = c.prev
        if p is not None and not p.in_use:
            self._remove(p)
            _absorb(p, c)
            c = p
        self._insert(c)

    def reset_peak(self) -> None:
        self.peak = self.in_use

    def snapshot(self) -> tuple:
        """The pool's layout as plain data; ``BFC.restored`` makes an equal pool from it.

        Chunks handed out before the snapshot are in use in the copy and cannot be freed
        through it (the engine snapshots the resident variables, which a step never frees).
        """
        layout: list[tuple[tuple[int, int, bool], ...]] = []
        for head in self.heads:
            chunks: list[tuple[int, int, bool]] = []
            c: Chunk | None = head
            while c is not None:
                chunks.append((c.ptr, c.size, c.in_use))
                c = c.next
            layout.append(tuple(chunks))
        return (self.curr_region, tuple(self.regions), tuple(layout), self.next_ptr, self.in_use, self.peak)

    @classmethod
    def restored(cls, state: tuple) -> BFC:
        curr_region, regions, layout, next_ptr, in_use, peak = state
        pool = cls()
        pool.curr_region, pool.regions, pool.next_ptr = curr_region, list(regions), next_ptr
        pool.in_use, pool.peak = in_use, peak
        for chunks in layout:
            prev = None
            for ptr, size, used in chunks:
                c = Chunk(ptr, size, used, prev)
                if prev is None:
                    pool.heads.append(c)
                else:
                    prev.next = c
                if not used:
                    pool._insert(c)
                prev = c
        return pool
