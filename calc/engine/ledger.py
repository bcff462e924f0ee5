"""The walk's running account of live allocations, per component, and the moments it keeps."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from calc.engine.counting import counted_bytes
from calc.engine.events import Alloc, Event, Free, Mark, Phase
from calc.facts.allocator import UNTRACKED_BELOW


class Component(enum.IntEnum):
    """The parts of the peak, in ``MemoryBreakdown``'s order. ``OTHER`` holds the optimizer's
    update temporaries beyond the running update's: those made before their gradient
    (``early_temporaries`` in ``calc.facts.optimizers``) and, under mixed_float16, those of
    every variable updated together (``branch_temporaries``); ``OPTIMIZER_STATE`` is the slots alone."""

    WEIGHTS = 0
    GRADIENTS = 1
    OPTIMIZER_STATE = 2
    ACTIVATIONS = 3
    BACKWARD_TRANSIENT = 4
    INPUT_BATCH = 5
    OTHER = 6


W, G, OPT, ACT, TRANS, INPUT, OTHER = Component
COMPONENTS = tuple(c.name.lower() for c in Component)


@dataclass(frozen=True)
class Moment:
    """Live allocations at one moment of the step, per component.

    ``fixed`` holds bytes that do not depend on the batch (already counted as the
    allocator counts them); ``per_sample`` holds, per component, pairs of
    (bytes per sample of one tensor, how many such tensors are live).
    """

    phase: Phase
    fixed: tuple[int, ...]
    per_sample: tuple[tuple[tuple[int, int], ...], ...]
    below: int = UNTRACKED_BELOW  # the device's ``untracked_below``

    def components(self, batch: int) -> list[int]:
        return [
            f + sum(n * counted_bytes(size * batch, self.below) for size, n in hist)
            for f, hist in zip(self.fixed, self.per_sample)
        ]

    def total(self, batch: int) -> int:
        return sum(self.components(batch))


@dataclass(frozen=True)
class StepPlan:
    """The moments of one step that can be its peak for some batch size.

    ``kept_per_sample`` holds, per ledger row, the bytes per sample it holds for the
    backward pass (its outputs that a gradient reads, plus what it keeps privately).
    """

    moments: tuple[Moment, ...]
    unknown_layer_types: tuple[str, ...]
    kept_per_sample: tuple[int, ...] = ()

    def peak_moment(self, batch: int) -> Moment:
        return max(self.moments, key=lambda m: m.total(batch))


class Ledger:
    """Running live allocations of the walk, per component.

    With ``record`` it also writes the walk as allocator events (``calc.engine.events``),
    batch-independent, a ``Mark`` after each moment. Changes of the fixed components
    (gradients, early optimizer temporaries, ...) become blocks of their own; weights and
    optimizer slots set before the first tensor are resident and left out
    (``calc.engine.resident`` places them). A feature map is recorded under its tensor's
    key, so its death frees its own allocation. For the rest, when one of several
    same-size tensors dies, the forward pass frees the oldest and the backward pass the
    newest.
    """

    def __init__(self, record: bool = False, below: int = UNTRACKED_BELOW, keep_moments: bool = True) -> None:
        self.below = below
        self.keep_moments = keep_moments  # False: the events alone (the allocator simulation reads no moment)
        self.fixed = [0] * len(Component)
        self.live: list[dict[int, int]] = [{} for _ in Component]
        self._sorted: list[tuple[tuple[int, int], ...] | None] = [None] * len(Component)  # live, as a moment keeps it
        self.moments: list[Moment] = []
        self.events: list[Event] | None = [] if record else None
        self._seen = [0] * len(Component)
        self._blocks: list[list[tuple[int, int]]] = [[] for _ in Component]
        self._ids: dict[tuple[int, int], list[int]] = {}
        self._keyed: dict[object, int] = {}  # a tensor's key -> its allocation's id
        self._serial = 0
        self._started = False
        self.forward = True

    def _new_id(self) -> int:
        self._serial += 1
        return self._serial

    def _sync_fixed(self) -> None:
        events = self.events
        if events is None:
            return
        for comp, value in enumerate(self.fixed):
            delta = value - self._seen[comp]
            self._seen[comp] = value
            if not self._started and comp in (W, OPT):
                continue  # resident before the step
            if delta > 0:
                sid = self._new_id()
                self._blocks[comp].append((sid, delta))
                events.append(Alloc(sid, 0, delta))
            elif delta < 0:
                self._free_fixed(comp, -delta)
        self._started = True

    def _free_fixed(self, comp: int, need: int) -> None:
        """Frees ``need`` bytes of a fixed component's blocks: one of that size, else the oldest."""
        assert self.events is not None
        blocks = self._blocks[comp]
        exact = next((b for b in blocks if b[1] == need), None)
        if exact is not None:
            blocks.remove(exact)
            self.events.append(Free(exact[0]))
            return
        while need > 0 and blocks:  # free the oldest, keep the remainder
            sid, size = blocks.pop(0)
            self.events.append(Free(sid))
            if size > need:
                rest = self._new_id()
                blocks.insert(0, (rest, size - need))
                self.events.append(Alloc(rest, 0, size - need))
            need -= size

    def add(self, component: int, per_sample_bytes: int, count: int = 1, key: object = None) -> None:
        """Adds ``count`` tensors of this size (or removes ``-count``); ``key`` names one tensor.

        A keyed tensor's removal frees its own allocation event; unkeyed, the forward pass
        frees the oldest of that size and the backward pass the newest.
        """
        if per_sample_bytes <= 0 or count == 0:
            return
        hist = self.live[component]
        self._sorted[component] = None
        n = hist.get(per_sample_bytes, 0) + count
        if n:
            hist[per_sample_bytes] = n
        else:
            del hist[per_sample_bytes]
        if self.events is not None:
            self._sync_fixed()
            ids = self._ids.setdefault((component, per_sample_bytes), [])
            for _ in range(count):
                sid = self._new_id()
                ids.append(sid)
                if key is not None:
                    self._keyed[key] = sid
                self.events.append(Alloc(sid, per_sample_bytes, 0))
            for _ in range(-count):
                keyed = self._keyed.pop(key, None) if key is not None else None
                if keyed is not None and keyed in ids:
                    ids.remove(keyed)
                    self.events.append(Free(keyed))
                else:
                    self.events.append(Free(ids.pop(0) if self.forward else ids.pop()))

    def remove(self, component: int, per_sample_bytes: int, key: object = None) -> None:
        self.add(component, per_sample_bytes, -1, key)

    def rekey(self, old: object, new: object) -> None:
        """A tensor written into another's buffer takes over its allocation."""
        if old in self._keyed:
            self._keyed[new] = self._keyed.pop(old)

    def add_fixed(self, component: int, nbytes: int) -> None:
        """Adds (or with a negative size frees) one batch-independent block of its own."""
        self.fixed[component] += nbytes
        self._sync_fixed()

    def grow_fixed(self, component: int, nbytes: int) -> None:
        """Adds (or frees) batch-independent bytes, recorded with the next change that syncs."""
        self.fixed[component] += nbytes

    def _sorted_live(self, component: int) -> tuple[tuple[int, int], ...]:
        """A component's live tensors as (size, count) pairs by size, kept until it changes."""
        pairs = self._sorted[component]
        if pairs is None:
            pairs = self._sorted[component] = tuple(sorted(self.live[component].items()))
        return pairs

    def snapshot(self, phase: Phase, extra_fixed: int = 0, extra_per_sample: tuple[int, ...] = ()) -> None:
        """Keeps the moment ``phase``, with temporaries alive only then (transient)."""
        if self.keep_moments:
            self._keep_moment(phase, extra_fixed, extra_per_sample)
        if self.events is not None:
            self._sync_fixed()
            temporaries = [Alloc(self._new_id(), 0, extra_fixed)] if extra_fixed > 0 else []
            temporaries += [Alloc(self._new_id(), size, 0) for size in extra_per_sample if size > 0]
            self.events.extend(temporaries)
            self.events.extend(Free(t.id) for t in temporaries)
            self.events.append(Mark(phase))

    def _keep_moment(self, phase: Phase, extra_fixed: int, extra_per_sample: tuple[int, ...]) -> None:
        fixed = list(self.fixed)
        fixed[TRANS] += extra_fixed
        per_sample = [self._sorted_live(c) for c in range(len(self.live))]
        if any(size > 0 for size in extra_per_sample):
            hist = dict(self.live[TRANS])
            for size in extra_per_sample:
                if size > 0:
                    hist[size] = hist.get(size, 0) + 1
            per_sample[TRANS] = tuple(sorted(hist.items()))
        self.moments.append(Moment(phase, tuple(fixed), tuple(per_sample), self.below))
