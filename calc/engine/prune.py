"""Which moments of a walk can be the step's peak for some batch size."""

from __future__ import annotations

from calc.engine.counting import counted_array
from calc.engine.ledger import Moment

# Batch sizes at which moments are compared to find the ones that can be the peak.
PROBE_BATCHES = tuple(sorted({*range(1, 129), *(int(1.08 ** k) for k in range(60, 300))}))


def totals(moments, batches):
    """Peak candidates' totals, one row per moment, one column per batch size."""
    import numpy as np

    sizes = sorted({size for m in moments for hist in m.per_sample for size, _ in hist})
    index = {size: i for i, size in enumerate(sizes)}
    counts = np.zeros((len(moments), max(1, len(sizes))), dtype=np.int64)
    for row, m in enumerate(moments):
        for hist in m.per_sample:
            for size, n in hist:
                counts[row, index[size]] += n
    fixed = np.array([sum(m.fixed) for m in moments], dtype=np.int64)
    b = np.asarray(list(batches), dtype=np.int64)
    if not sizes:
        return np.repeat(fixed[:, None], len(b), axis=1)
    per_size = counted_array(np.asarray(sizes, dtype=np.int64)[:, None] * b[None, :], moments[0].below)
    return fixed[:, None] + counts @ per_size


def prune(moments: list[Moment]) -> tuple[Moment, ...]:
    """Keeps the moments within 1 % of the largest at some probed batch size."""
    at = totals(moments, PROBE_BATCHES)
    keep = (at >= 0.99 * at.max(axis=0)).any(axis=1)
    return tuple(m for m, k in zip(moments, keep) if k)
