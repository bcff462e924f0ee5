"""What one request adds to the allocator peak TensorFlow reports."""

from __future__ import annotations

from calc.facts.allocator import ALLOCATION_GRANULE, FRAGMENTATION, SPLIT_ALWAYS_ABOVE, UNTRACKED_BELOW
from calc.types import Device


def untracked_below(device: Device) -> int:
    """Requests smaller than this leave the reported peak unchanged on ``device``.

    On a GPU TensorFlow's BFC allocator serves every request, however small, from its
    pool and counts it (rounded to 256 bytes); only the CPU build has the separate
    small-size allocator (``UNTRACKED_BELOW``). Counting them on the H100 slice (50 cases)
    under-predicts fewer steps (docs/notes/allocator.md).
    """
    return 0 if device is Device.GPU else UNTRACKED_BELOW


def counted_bytes(nbytes: int, below: int = UNTRACKED_BELOW) -> int:
    """Bytes one allocation adds to the allocator peak TensorFlow reports (``below``: ``untracked_below``).

    Its size in whole granules plus the fitted ``FRAGMENTATION``, which stands in for the
    chunks the allocator hands out unsplit.
    """
    if nbytes < below:
        return 0
    rounded = -(-nbytes // ALLOCATION_GRANULE) * ALLOCATION_GRANULE
    if rounded >= SPLIT_ALWAYS_ABOVE:
        return rounded
    return rounded + int(rounded * FRAGMENTATION) // ALLOCATION_GRANULE * ALLOCATION_GRANULE


def raw_bytes(nbytes: int, below: int = UNTRACKED_BELOW) -> int:
    """What one allocation asks the allocator for (the simulation adds the chunk effects)."""
    return 0 if nbytes < below else -(-nbytes // ALLOCATION_GRANULE) * ALLOCATION_GRANULE


def granules(nbytes: float) -> int:
    """``nbytes`` rounded down to whole allocation granules."""
    return int(nbytes) // ALLOCATION_GRANULE * ALLOCATION_GRANULE


def counted_array(nbytes, below: int = UNTRACKED_BELOW):
    """``counted_bytes`` over a numpy array of request sizes."""
    import numpy as np

    rounded = -(-nbytes // ALLOCATION_GRANULE) * ALLOCATION_GRANULE
    frag = (rounded * FRAGMENTATION).astype(np.int64) // ALLOCATION_GRANULE * ALLOCATION_GRANULE
    out = np.where(rounded >= SPLIT_ALWAYS_ABOVE, rounded, rounded + frag)
    return np.where(nbytes < below, 0, out)
