"""A configuration's XLA plans along the batch: the compiled points, a line between them where
XLA's plan is a straight line, and the largest batch that fits.

Away from the card's memory a plan grows by the same bytes for each sample (its activations,
gradients and input): a line through two plans compiled well apart gives a third within
0.3 % (docs/notes/gpu-and-xla.md). XLA's GPU compiler rematerialises when the step's
temporaries pass its scheduler's memory limit (xla/service/gpu/gpu_compiler.cc,
``GetSchedulerMemoryLimit``): 80 % of the card's memory, less the program's inputs and
outputs (aliased ones once), times ``xla_gpu_memory_limit_slop_factor`` (95 %). Above it
XLA recomputes what it would otherwise keep, and the plan bends under the line. XLA's remat
pass decides by its own count of the schedule's memory, not the final plan's: EfficientNetB0
under mixed_float16 on a T4 was rematerialised (7.7 % under the line) where the final plan's
temporaries were 93 % of the limit. So the line counts only where its temporaries are under
half the limit (the line region); past that only compiled plans count.

Pure: a curve is built from the child's answers (``calc.xla.cache.read_family``), never compiles.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Iterable

# XLA's scheduler limit: device memory x 80 / 100 when the module names none (JAX names
# none), and xla_gpu_memory_limit_slop_factor's default, 95.
SCHEDULER_SHARE = (80, 100)
SLOP_PERCENT = 95
_SLOP_FLAG = re.compile(r"--xla_gpu_memory_limit_slop_factor=(\d+)\b")


def slop_percent(xla_flags: str) -> int:
    """``xla_gpu_memory_limit_slop_factor`` as these XLA flags set it (the last one counts), else its default.

    >>> slop_percent("--xla_gpu_autotune_level=0 --xla_gpu_memory_limit_slop_factor=8")
    8
    """
    found = _SLOP_FLAG.findall(xla_flags)
    return int(found[-1]) if found else SLOP_PERCENT


class PointSource(str, Enum):
    """Where a point of the curve comes from."""

    COMPILED = "compiled"  # XLA's plan at this very batch
    DRAWN = "drawn"  # on the line through two compiled plans, in the line region


@dataclass(frozen=True)
class CompiledPoint:
    """One compiled plan's bytes: its peak, and the part that is XLA's temporaries."""

    batch: int  # per device
    peak_bytes: int
    temp_bytes: int

    @property
    def io_bytes(self) -> int:
        """The program's inputs and outputs (the state once, the batch, the loss): the peak less the temporaries."""
        return self.peak_bytes - self.temp_bytes


@dataclass(frozen=True)
class CurvePoint:
    """The plan at one batch, and what it is."""

    batch: int  # per device
    peak_bytes: int
    source: PointSource
    through: tuple[int, ...] = ()  # DRAWN: the compiled batches its line passes through


def compiled_point(batch: int, raw: dict[str, Any]) -> CompiledPoint:
    """A child's answer (``calc.keras.plan.PlanModel.plan``) as a point: peak = arguments + temporaries
    + outputs - aliased, as ``calc.xla.plan.plan_from_analysis`` reads it."""
    peak = raw["argument_bytes"] + raw["temp_bytes"] + raw["output_bytes"] - raw["alias_bytes"]
    return CompiledPoint(batch, int(peak), int(raw["temp_bytes"]))


def largest_where(holds: Callable[[int], bool], lo: int, hi: int | None = None) -> int:
    """The largest batch from ``lo`` (where ``holds``) up to ``hi`` (where it does not; unbounded if None,
    doubling from ``lo`` to below 2**24) at which ``holds``, by bisection (``holds`` falls once)."""
    if hi is None:
        hi = lo * 2
        while holds(hi) and hi < 1 << 24:
            lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo


def settle_width(batch: int) -> int:
    """How close the search brackets the largest batch: exactly (B fits, B + 1 does not) up to 199,
    within 1 % above, where one sample more or less changes nothing a user decides."""
    return max(1, batch // 100)


@dataclass(frozen=True)
class MaxBatch:
    """The largest one-device batch whose plan fits a budget, and how it is known.

    ``settled``: a batch that fits and one that does not are both compiled, ``settle_width``
    apart; ``batch`` is then the compiled one that fits. Otherwise ``batch`` is the best
    answer so far: the largest compiled batch that fits, or where the line through compiled
    plans crosses the budget in the line region, whichever is larger; nearer the card's memory
    XLA rematerialises, so more may fit than the line says.
    """

    batch: int  # 0: not even one sample fits
    source: PointSource
    settled: bool
    fits: int | None  # the largest compiled batch that fits (None: none fits or none compiled)
    exceeds: int | None  # the smallest compiled batch above it that does not fit


@dataclass(frozen=True)
class PlanCurve:
    """Every compiled plan of one configuration (the batch aside) on one card.

    Args:
        points: the compiled plans, any order.
        device_memory_bytes: the card's memory as XLA's compiler sees it (``GpuTarget.device_memory_size``).
        slop: the ``xla_gpu_memory_limit_slop_factor`` the plans were compiled with (95 unless XLA's flags
            set another: ``tools/near_limit.py --slop``).

    >>> curve = PlanCurve.of([CompiledPoint(16, 1_700, 1_500), CompiledPoint(64, 5_600, 5_300)], 10**6)
    >>> curve.at(32)
    CurvePoint(batch=32, peak_bytes=3000, source=<PointSource.DRAWN: 'drawn'>, through=(16, 64))
    """

    points: tuple[CompiledPoint, ...]
    device_memory_bytes: int
    slop: int = SLOP_PERCENT
    kept_per_sample: int = 0  # bytes a verdict keeps free beside each sample's plan (``calc.xla.kept``)

    @classmethod
    def of(cls, points: Iterable[CompiledPoint], device_memory_bytes: int, slop: int = SLOP_PERCENT,
           kept_per_sample: int = 0) -> PlanCurve:
        by_batch = {p.batch: p for p in points}
        return cls(tuple(by_batch[b] for b in sorted(by_batch)), device_memory_bytes, slop, kept_per_sample)

    def adding(self, *points: CompiledPoint) -> PlanCurve:
        """The same curve with these plans compiled too."""
        return PlanCurve.of((*self.points, *points), self.device_memory_bytes, self.slop, self.kept_per_sample)

    def keeping(self, per_sample_bytes: int) -> PlanCurve:
        """The same plans, whose largest batch keeps ``per_sample_bytes`` free per sample beside each plan: a
        batch fits where its plan and that room together fit the budget."""
        return PlanCurve(self.points, self.device_memory_bytes, self.slop, per_sample_bytes)

    def needed(self, batch: int, peak_bytes: int) -> int:
        """What a batch whose plan peaks at ``peak_bytes`` needs of the budget: the plan and the room kept."""
        return peak_bytes + self.kept_per_sample * batch

    # --- where the line holds ----------------------------------------------------------

    def remat_limit_bytes(self, io_bytes: int) -> int:
        """XLA's scheduler limit on temporaries for a program with ``io_bytes`` of inputs and outputs."""
        share, whole = SCHEDULER_SHARE
        return (self.device_memory_bytes * share // whole - io_bytes) * self.slop // 100

    def below_limit(self, peak_bytes: int, temp_bytes: int) -> bool:
        """True in the line region: the temporaries under half XLA's rematerialisation limit."""
        return temp_bytes <= self.remat_limit_bytes(peak_bytes - temp_bytes) // 2

    @property
    def anchors(self) -> tuple[CompiledPoint, ...]:
        """The compiled plans a line may pass through: those in the line region, where XLA keeps
        every activation (a rematerialised plan sits under the line)."""
        return tuple(p for p in self.points if self.below_limit(p.peak_bytes, p.temp_bytes))

    def compiled(self, batch: int) -> CompiledPoint | None:
        return next((p for p in self.points if p.batch == batch), None)

    def _line(self, batch: int) -> tuple[float, float, tuple[int, int]] | None:
        """(peak, temporaries, the two batches) on the line at ``batch``: between the anchors around it,
        above them on the line through the smallest and the largest. None below the smallest anchor:
        at small batches XLA's choices of layout and algorithm move the plan by a few samples' worth
        (ResNet50 under mixed_float16 on an H100: batch 16 planned 9.8 % above the line through 32 and
        512), which is much of a small plan."""
        anchors = self.anchors
        if len(anchors) < 2 or batch < anchors[0].batch:
            return None
        above = [p for p in anchors if p.batch >= batch]
        if above:
            b = above[0]
            a = max((p for p in anchors if p.batch < batch), key=lambda p: p.batch, default=None)
            if a is None:  # the smallest anchor itself
                a, b = anchors[0], anchors[1]
        else:
            a, b = anchors[0], anchors[-1]
        t = (batch - a.batch) / (b.batch - a.batch)
        return (a.peak_bytes + t * (b.peak_bytes - a.peak_bytes), a.temp_bytes + t * (b.temp_bytes - a.temp_bytes),
                (a.batch, b.batch))

    def line_peak(self, batch: int) -> int | None:
        """The line's peak at ``batch``, past XLA's limit too: what the plan would be if XLA kept every
        activation (None below the line's start, or with fewer than two anchors)."""
        line = self._line(batch)
        return None if line is None else round(line[0])

    def drawn(self, batch: int) -> CurvePoint | None:
        """The line's point at ``batch`` in the line region (compiled or not); None past it, below the
        line's start, or with fewer than two anchors."""
        line = self._line(batch)
        if line is None:
            return None
        peak, temp, through = line
        if not self.below_limit(round(peak), round(temp)):
            return None
        return CurvePoint(batch, round(peak), PointSource.DRAWN, through)

    def at(self, batch: int) -> CurvePoint | None:
        """The plan at ``batch``: compiled, or drawn on the line in the line region; None nearer the
        card's memory without a compiled plan, or with fewer than two anchors."""
        if (point := self.compiled(batch)) is not None:
            return CurvePoint(batch, point.peak_bytes, PointSource.COMPILED)
        return self.drawn(batch)

    def line_start(self) -> int | None:
        """The smallest batch the line is drawn from: the smallest anchor (None with fewer than two)."""
        anchors = self.anchors
        return anchors[0].batch if len(anchors) >= 2 else None

    def line_end(self) -> int | None:
        """The largest batch the line is drawn to: past it XLA's temporaries would pass half its
        rematerialisation limit (None with fewer than two anchors)."""
        start = self.line_start()
        if start is None or self.drawn(start) is None:
            return None
        return largest_where(lambda b: self.drawn(b) is not None, start)

    # --- the largest batch -------------------------------------------------------------

    def bracket(self, budget_bytes: int) -> tuple[int | None, int | None]:
        """(the largest compiled batch that fits, the smallest compiled batch above it that does not)."""
        fits = [p.batch for p in self.points if self.needed(p.batch, p.peak_bytes) <= budget_bytes]
        lo = max(fits) if fits else None
        over = [p.batch for p in self.points if self.needed(p.batch, p.peak_bytes) > budget_bytes
                and p.batch > (lo or 0)]
        return lo, (min(over) if over else None)

    def line_crossing(self, budget_bytes: int) -> int | None:
        """The largest batch whose drawn point fits the budget (None: no line, or not even at its start)."""
        def fits(batch: int) -> bool:
            point = self.drawn(batch)
            return point is not None and self.needed(batch, point.peak_bytes) <= budget_bytes

        end, start = self.line_end(), self.line_start()
        if end is None or start is None or not fits(start):
            return None
        return end if fits(end) else largest_where(fits, start, end)

    def line_crossing_drawn_on(self, budget_bytes: int) -> int | None:
        """The largest batch at which the line, drawn on past its region, stays within the budget: a guess for
        the search, not an answer (past the region XLA rematerialises, so its plan lies under the line, but
        not always: DenseNet121 on an L4 planned 6.7 % over it at 1.3 times the region's end)."""
        def within(batch: int) -> bool:
            peak = self.line_peak(batch)
            return peak is not None and self.needed(batch, peak) <= budget_bytes

        start = self.line_start()
        return None if start is None or not within(start) else largest_where(within, start)

    def max_batch(self, budget_bytes: int) -> MaxBatch | None:
        """The largest batch whose plan fits ``budget_bytes``, as well as the plans known tell it;
        None before any plan is compiled."""
        if not self.points:
            return None
        lo, hi = self.bracket(budget_bytes)
        if hi is not None and hi - (lo or 0) <= settle_width(lo or 0):
            return MaxBatch(lo or 0, PointSource.COMPILED, True, lo, hi)
        crossing = self.line_crossing(budget_bytes)
        if crossing is not None and hi is not None:
            crossing = min(crossing, hi - 1)
        if crossing is not None and crossing > (lo or 0):
            return MaxBatch(crossing, PointSource.DRAWN, False, lo, hi)
        return MaxBatch(lo or 0, PointSource.COMPILED, False, lo, hi)

    def next_search_batch(self, budget_bytes: int, start: int, limit: int = 1 << 16) -> int | None:
        """The next batch to compile in the search for the largest batch that fits; None once settled.

        Until a batch that does not fit is compiled: where the line crosses the budget (XLA can
        only fit more than the line near its limit, never less), or where it would cross it drawn
        on past its region when the budget lies beyond (a compile there, under or over the
        budget, says more than one at the region's end, which fits), else, past the line, the
        largest fitting batch scaled to the budget and at least half as large again. Inside a bracket: where the line
        between its two ends crosses the budget (regula falsi), kept within its middle half, so
        each compile at least quarters it; near the card's memory XLA's plans stop growing in a
        straight line, so the search cannot rely on one.
        """
        if not self.points:
            return max(1, min(start, limit))
        lo, hi = self.bracket(budget_bytes)
        low = lo or 0
        if hi is not None and hi - low <= settle_width(low):
            return None
        if hi is None:
            if low >= limit:
                return None
            guess = self.line_crossing(budget_bytes) or 0
            if guess and guess == self.line_end():  # the budget lies past the line's region: where the line,
                guess = max(guess, self.line_crossing_drawn_on(budget_bytes) or 0)  # drawn on, crosses it
            top = self.compiled(low)
            if guess <= low and top is not None:  # past the line: XLA rematerialises, the plan bends under it
                guess = max(low * budget_bytes // max(self.needed(low, top.peak_bytes), 1), low + max(1, low // 2))
            return min(max(guess, low + 1), limit)
        if low == 0:
            return max(1, hi // 2) if hi > 1 else None
        m_lo, m_hi = self.compiled(low), self.compiled(hi)
        assert m_lo is not None and m_hi is not None
        width = hi - low
        n_lo, n_hi = self.needed(low, m_lo.peak_bytes), self.needed(hi, m_hi.peak_bytes)
        if width <= 4 or n_hi <= n_lo:
            guess = low + width // 2
        else:
            guess = low + int((budget_bytes - n_lo) * width / (n_hi - n_lo))
            guess = min(max(guess, low + width // 4), hi - width // 4)
        return min(max(guess, low + 1), hi - 1)

    def search_left(self, budget_bytes: int) -> int:
        """About how many compiles the search still needs (for a progress line; 0 once settled)."""
        lo, hi = self.bracket(budget_bytes)
        low = lo or 0
        if not self.points:
            return 4
        if hi is None:
            return 3
        width = hi - low
        settle = settle_width(low)
        return 0 if width <= settle else max(1, math.ceil(math.log(width / settle, 4)) + 1)

    # --- a second plan for the line ------------------------------------------------------

    def second_anchor(self) -> int | None:
        """A batch whose plan, with the one compiled, gives a line: None when two anchors are known.

        A power of two (so that visitors asking other batches share it), far from the compiled
        plan and inside the line region: the largest up to the batch where the temporaries
        would reach half XLA's limit, if that is at least twice the compiled batch (the line is
        drawn upwards from its smaller plan); else the smallest of 8 or more below it, else 1.
        That batch is guessed from the compiled plan, all its temporaries taken to grow with the
        batch (so the guess is short of it).
        """
        anchors = self.anchors
        if len(anchors) >= 2 or not self.points:
            return None
        ref = anchors[0] if anchors else self.points[0]
        known = {p.batch for p in self.points}
        per_sample = max(1, ref.temp_bytes // ref.batch)
        region_batch = max(1, self.remat_limit_bytes(ref.io_bytes) // 2 // per_sample)
        candidates = [1 << k for k in range(0, 24) if (1 << k) <= region_batch and (1 << k) not in known]
        above = [c for c in candidates if c >= 2 * ref.batch]
        if above:
            return max(above)
        below = [c for c in candidates if c < ref.batch]
        roomy = [c for c in below if c >= 8]
        return min(roomy) if roomy else max(below, default=None)
