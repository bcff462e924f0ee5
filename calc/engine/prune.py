"""Which moments of a walk can be the step's peak for some batch size."""

from __future__ import annotations

from calc.engine.counting import counted_array
from calc.engine.ledger import Moment

# Batch sizes at which moments are compared to find the ones that can be the peak.
PROBE_BATCHES = tuple(sorted({*range(1, 129), *(int(1.08 ** k) for k in range(60, 300))}))


def _sums(moments, batches):
    """Each moment's bytes at each batch size, in float64: fixed bytes plus its tensors' counted sizes,
    summed by a BLAS product (numpy's int64 product has none, and was most of a walk's pruning)."""
    import numpy as np

    entries = [(row, size, n) for row, m in enumerate(moments) for hist in m.per_sample for size, n in hist]
    fixed = np.array([sum(m.fixed) for m in moments], dtype=np.float64)
    b = np.asarray(list(batches), dtype=np.int64)
    if not entries:
        return np.repeat(fixed[:, None], len(b), axis=1)
    rows, each_size, n = (np.asarray(column, dtype=np.int64) for column in zip(*entries))
    sizes, columns = np.unique(each_size, return_inverse=True)
    counts = np.zeros((len(moments), len(sizes)), dtype=np.float64)
    np.add.at(counts, (rows, columns), n.astype(np.float64))
    per_size = counted_array(sizes[:, None] * b[None, :], moments[0].below)
    return fixed[:, None] + counts @ per_size.astype(np.float64)


def totals(moments, batches):
    """Peak candidates' totals in bytes, one row per moment, one column per batch size: exact while a
    total is under 2**53 bytes (8 PiB), as every sum of integers below it is in float64."""
    import numpy as np

    return np.rint(_sums(moments, batches)).astype(np.int64)


def prune(moments: list[Moment]) -> tuple[Moment, ...]:
    """Keeps the moments within 1 % of the largest at some probed batch size."""
    at = _sums(moments, PROBE_BATCHES)  # summed in float64: at the largest probes (10**10 samples) int64 sums wrap
    keep = (at >= 0.99 * at.max(axis=0)).any(axis=1)
    return tuple(m for m, k in zip(moments, keep) if k)
