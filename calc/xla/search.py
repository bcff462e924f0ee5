"""The largest batch whose compiled plan fits a card: a search over XLA's plans, compiling few."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from calc.catalogue import ModelFile, ModelSpec
from calc.types import TrainingConfig
from calc.xla.compute import compute_plan


@dataclass(frozen=True)
class XlaMaxBatch:
    """The largest batch whose compiled plan fits, and how it was found."""

    max_batch: int  # 0: not even one sample fits
    compiled: tuple[tuple[int, int], ...]  # (per-device batch, needed bytes) of every plan consulted

    @property
    def compiles(self) -> int:
        return len(self.compiled)


def max_batch_xla(needed: Callable[[int], int], usable_bytes: int, start: int, *, limit: int = 1 << 16) -> XlaMaxBatch:
    """The largest per-device batch B with ``needed(B) <= usable_bytes`` and ``needed(B + 1) > usable_bytes``.

    ``needed`` compiles (or reads) the plan at a batch. ``start`` (the walk's answer) is the
    first guess; until a batch that does not fit is known the guess is the last one scaled
    to the budget, and at least half as large again. Inside the
    bracket each guess is where the line between its two ends crosses the budget (regula
    falsi), and a bisection follows any guess that did not halve the bracket: near the
    card's memory XLA's plans stop growing in a straight line (docs/XLA_PLAN.md), so the
    search cannot rely on one. B and B + 1 are both compiled.
    """
    known: dict[int, int] = {}

    def at(b: int) -> int:
        if b not in known:
            known[b] = needed(b)
        return known[b]

    lo, hi = 0, limit + 1  # lo fits (0 trivially), hi does not
    b, bisect = min(max(1, start), limit), False
    while hi - lo > 1:
        width = hi - lo
        if at(b) <= usable_bytes:
            lo = b
        else:
            hi = b
        if hi - lo <= 1:
            break
        if hi > limit:  # no batch that does not fit yet: scale to the budget, growing by half at least
            b = min(max(lo * usable_bytes // max(known[lo], 1), lo + max(1, lo // 2)), limit)
        elif lo == 0 or bisect:
            b = (lo + hi) // 2
        else:
            m_lo, m_hi = known[lo], known[hi]
            b = lo + int((usable_bytes - m_lo) * (hi - lo) / (m_hi - m_lo)) if m_hi > m_lo else (lo + hi) // 2
        b = min(max(b, lo + 1), hi - 1)
        bisect = (hi - lo) * 2 > width
    if 1 <= lo < limit:
        at(lo + 1)
    return XlaMaxBatch(lo, tuple(sorted(known.items())))


def plan_max_batch(spec: ModelSpec | ModelFile, config: TrainingConfig, gpu_key: str, usable_bytes: int,
                   start: int, remat: str = "", **kwargs: Any) -> XlaMaxBatch:
    """``max_batch_xla`` over compiled plans: the largest per-device batch whose plan fits ``usable_bytes``."""

    def needed(per_device: int) -> int:
        one = replace(config, batch_size=per_device, num_gpus=1)
        return compute_plan(spec, one, gpu_key, remat, **kwargs).peak_bytes

    return max_batch_xla(needed, usable_bytes, start)
