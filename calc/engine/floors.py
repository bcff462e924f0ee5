"""The walk's peak raised to the simulated allocator's: the step's requests replayed through
``calc.engine.allocator.BFC`` after modelled histories of the pool."""

from __future__ import annotations

from functools import lru_cache

from calc.engine.allocator import BFC
from calc.engine.counting import raw_bytes, untracked_below
from calc.engine.events import Alloc, Event, Free
from calc.engine.resident import resident_counted, resident_state
from calc.engine.training import partly_frozen
from calc.engine.walk import simulate
from calc.facts.allocator import UNTRACKED_BELOW
from calc.types import ModelProfile, TrainingConfig


def replay(pool, events, batch: int, below: int = UNTRACKED_BELOW) -> dict:
    """Places one step's allocation events, at this batch, in ``pool`` (its ``alloc`` / ``free``).

    Requests the allocator's statistics do not count (under ``below``: 256 KiB on the
    CPU, ``untracked_below``) are left out. On a GPU, where they count, those under 256
    KiB are added to the pool's bytes in use at their rounded size without being placed:
    they fill the small bins, not the regions the large tensors compete for (placing
    each one gave the same validation figures, and a dashboard curve up to a quarter
    slower). Returns the handles still allocated, by event id (a small request's: its size).
    """
    live: dict = {}
    alloc, free, count = pool.alloc, pool.free, pool.count
    for ev in events:
        kind = type(ev)
        if kind is Alloc:
            nbytes = ev.per_sample * batch + ev.fixed
            if nbytes >= UNTRACKED_BELOW:
                live[ev.id] = alloc(nbytes)
            elif nbytes >= below and nbytes > 0:
                live[ev.id] = size = raw_bytes(nbytes, below)
                count(size)
        elif kind is Free:
            handle = live.pop(ev.id, None)
            if handle is None:
                continue
            if type(handle) is int:
                count(-handle)
            else:
                free(handle)
    return live


@lru_cache(maxsize=64)
def allocator_events(profile: ModelProfile, config: TrainingConfig) -> tuple[Event, ...]:
    """The walk's allocation events, recorded once per configuration (the batch set aside)."""
    return tuple(simulate(profile, config, record=True, moments=False).events)


@lru_cache(maxsize=16384)
def history_peak(profile: ModelProfile, config: TrainingConfig, batch: int, drawn: bool) -> int:
    """The simulated peak of the step replayed after one history of the pool.

    The real pool's layout before the step also depends on what the build, the compile
    and the first step allocate beside the variables, which the walk does not know, and
    the step's peak is sensitive to it (docs/notes/allocator.md: Xception 299 px frozen
    moves by 140 MiB with the head's optimizer). So the step is replayed after two
    histories (``calc.engine.resident.resident_pool``): the measured per-variable pattern
    (``drawn``) and the one-value-per-variable one; ``floored`` takes the larger for frozen
    steps, the smaller in full training. On the 99 frozen points, the larger: median
    |error| 4.2 %, 8 points more than 5 % low and 2 more than 10 % low (each history alone:
    4.0 / 3.2 % median, 12 / 11 more than 5 % low, 5 / 6 more than 10 % low).

    The protocol's warm-up step leaves regions the measured step reuses. Replaying the
    walk's own step first gave the same peaks on the 41 measured frozen points, at twice
    the cost, so the step is replayed once; the real warm-up differs from later steps by
    copying the optimizer's slots among its tensors, which sets the real layout
    (docs/notes/allocator.md) and is not modelled.
    """
    bfc = BFC.restored(resident_state(profile, config, drawn))
    bfc.reset_peak()
    replay(bfc, allocator_events(profile, config), batch, below=untracked_below(config.device))
    return bfc.peak


def allocator_peaks(profile: ModelProfile, config: TrainingConfig, batch: int) -> tuple[int, int]:
    """The simulated peaks after the two histories: drawn kernels, then one value per variable."""
    return history_peak(profile, config, batch, True), history_peak(profile, config, batch, False)


def allocator_peak_at(profile: ModelProfile, config: TrainingConfig, batch: int) -> int:
    """The larger of the two histories' simulated peaks (``allocator_peaks``)."""
    return max(allocator_peaks(profile, config, batch))


@lru_cache(maxsize=8192)
def fresh_peak(profile: ModelProfile, config: TrainingConfig, batch: int) -> int:
    """The step replayed alone in new regions, plus the variables and slots as the walk counts them.

    The regions start at the size the drawn history's pool would grow by next; the
    holes the variables' making leaves in the pool are ignored (where a step's small
    tensors land in them is what the two histories disagree on).
    """
    bfc = BFC(initial_region=resident_state(profile, config, True)[0])
    replay(bfc, allocator_events(profile, config), batch, below=untracked_below(config.device))
    return resident_counted(profile, config) + bfc.peak


def floored(profile: ModelProfile, config: TrainingConfig, batch: int, walk: int) -> int:
    """The walk's peak at this batch, raised to the simulated allocator's where that is more.

    The walk counts each tensor at its size plus the fitted ``FRAGMENTATION``; the
    simulation (``calc.engine.allocator.BFC`` over the walk's own requests) hands out whole
    chunks, and how many depends on the pool's layout before the step, which the engine
    knows only as modelled histories (``history_peak``: the variables with their kernels
    drawn, or made from one value each; ``fresh_peak``: the step in new regions past them).

    - With part of the model in inference (frozen backbone, last N layers), the larger of
      the two histories: a frozen forward pass frees each feature map soon after making
      it, so the peak is a few large tensors in whole chunks (docs/notes/frozen-steps.md: the walk
      alone missed frozen MobileNetV2 / DenseNet121 by up to -32 %).
    - In full training, only what every history agrees on: the smallest of the three.
      The smaller of the two histories alone raised steps whose peak sits in the resident
      pool's holes (MobileNet 128 px b1 Adadelta); the smallest of three keeps the walk's
      median |error| on the CPU full-training cases and under-predicts fewer of them
      (docs/notes/allocator.md; ``archive/probes/full_training_floors.py``).
      Each further history is replayed only when the ones before are above the walk.
    """
    if partly_frozen(profile, config):
        return max(walk, allocator_peak_at(profile, config, batch))
    first = history_peak(profile, config, batch, True)
    if first <= walk:
        return walk
    fresh = fresh_peak(profile, config, batch)
    if fresh <= walk:
        return walk
    return max(walk, min(first, fresh, history_peak(profile, config, batch, False)))
