"""The estimate's public entry points: the peak of one training step, per batch and per card.

The engine (``calc.engine``) walks the step once per configuration (``plan_step``) and
raises the walk's peak to the simulated allocator's where that is more (``floored``); the
facts it applies are in ``calc.facts``.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.engine.counting import counted_bytes, untracked_below
from calc.engine.events import UPDATE_PHASE
from calc.engine.floors import allocator_peak_at, floored, replay
from calc.engine.half_kernels import float16_kernel_bytes, kernel_bytes_at
from calc.engine.ledger import COMPONENTS, Moment, StepPlan
from calc.engine.plan import plan_step
from calc.engine.prune import totals
from calc.engine.training import (
    accumulator_reset_elements,
    early_temporaries_per_variable,
    partly_frozen,
    trainable_flags,
    update_scratch_per_variable,
    waits_for_all_gradients,
    without_batch,
)
from calc.engine.walk import simulate
from calc.facts.allocator import SPLIT_ALWAYS_ABOVE
from calc.facts.dtypes import FLOAT32
from calc.facts.kernels import FLOAT16_BUFFER_SHARE, grouped_depthwise_scratch
from calc.types import MemoryBreakdown, ModelProfile, Precision, TrainingConfig

__all__ = [
    "GpuFit", "Moment", "StepPlan", "UPDATE_PHASE", "accumulator_reset_parameters", "allocator_peak",
    "counted_bytes", "early_temporaries_per_variable", "estimate_memory", "fit_on_gpu", "float16_kernel_bytes",
    "kernel_bytes_at", "largest_fixed_request_bytes", "largest_variable_bytes", "max_batch_size", "memory_curve",
    "partly_frozen", "plan_step", "replay", "spread_caveats", "step_timeline", "untracked_below",
    "update_scratch_per_variable", "waits_for_all_gradients",
]

# MemoryBreakdown's field for each of the walk's components, in the ledger's order.
COMPONENT_FIELDS = tuple(f"{name}_bytes" for name in COMPONENTS)


def estimate_memory(profile: ModelProfile, config: TrainingConfig) -> MemoryBreakdown:
    """Predicts the allocator peak of one training step on one device.

    Args:
        profile: the model's ledger (``calc.keras.profile.profile_model``).
        config: batch size (global; split over ``num_gpus``), optimizer, precision...

    Returns:
        A ``MemoryBreakdown`` whose components sum to ``peak_bytes``.

    Example:
        >>> from calc.types import LayerStats, ModelProfile, TrainingConfig
        >>> dense = LayerStats("dense", "Dense", (0,), (1,), ((10,),), (1_000_000, 10))
        >>> profile = ModelProfile("one_dense", (100_000,), (dense,), (100_000, 10), (0,), (1,))
        >>> b = estimate_memory(profile, TrainingConfig(batch_size=8, optimizer="sgd"))
        >>> b.weights_bytes == 4_320_000  # 4 MB of float32 kernel plus the fitted 8 %
        True
    """
    plan = plan_step(profile, config)
    batch = config.per_replica_batch
    m = plan.peak_moment(batch)
    parts = m.components(batch)
    walk = sum(parts)
    peak = floored(profile, without_batch(config), batch, walk)
    return MemoryBreakdown(**dict(zip(COMPONENT_FIELDS, parts)), peak_phase=str(m.phase), allocator_bytes=peak - walk)


def step_timeline(profile: ModelProfile, config: TrainingConfig) -> list[tuple[str, int]]:
    """Live bytes at every moment of the step (forward, loss, backward, update)."""
    batch = config.per_replica_batch
    return [(str(m.phase), m.total(batch)) for m in simulate(profile, without_batch(config)).moments]


def allocator_peak(profile: ModelProfile, config: TrainingConfig) -> int:
    """The peak a simulated BFC allocator reports for one measured step at this batch.

    Replays the measurement protocol (calc.workers.measure): the variables and optimizer
    slots, a reset of the peak, then the step, every request placed by
    ``calc.engine.allocator.BFC``. The events come from the walk itself (one walk per
    config, cached); only their sizes scale with the batch. 0.3-2 ms per batch for
    catalogue models (benchmarks/bench_engine.py), cached per batch.
    """
    return allocator_peak_at(profile, without_batch(config), config.per_replica_batch)


def memory_curve(profile: ModelProfile, config: TrainingConfig, batch_sizes: range | list[int]) -> list[int]:
    """Predicted peak bytes for each global batch size (one plan, evaluated per batch)."""
    plan = plan_step(profile, config)
    gpus = config.num_gpus
    per_device = [max(1, b // gpus) for b in batch_sizes]
    if not per_device:
        return []
    linear = [int(v) for v in totals(plan.moments, per_device).max(axis=0)]
    base = without_batch(config)
    return [floored(profile, base, b, v) for v, b in zip(linear, per_device)]


def max_batch_size(
    profile: ModelProfile,
    config: TrainingConfig,
    budget_bytes: int,
    *,
    overhead_bytes: int = 0,
    safety_margin: float = 0.0,
    limit: int = 1 << 20,
) -> int:
    """The largest global batch whose peak plus overhead fits ``budget * (1 - margin)``.

    Returns 0 when not even one sample per device fits; at most ``limit`` per
    device. Batches are multiples of ``num_gpus``. Peaks grow with the batch, so a
    doubling search then a bisection finds the edge. The simulated allocator
    (``calc.engine.floors.floored``) can make the peak dip between neighbouring batches;
    the search returns a batch that fits, and may miss a larger one past a jump.
    """
    if not 0.0 <= safety_margin < 1.0:
        raise ValueError(f"safety_margin must be in [0, 1). Received: safety_margin={safety_margin}")
    usable = int(budget_bytes * (1.0 - safety_margin)) - overhead_bytes
    plan = plan_step(profile, config)
    base = without_batch(config)

    def fits(per_device: int) -> bool:
        walk = max(m.total(per_device) for m in plan.moments)
        return walk <= usable and floored(profile, base, per_device, walk) <= usable

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo * config.num_gpus


@dataclass(frozen=True)
class GpuFit:
    """One configuration against one card: the verdict and the largest batch."""

    breakdown: MemoryBreakdown
    needed_bytes: int  # predicted peak + framework overhead
    usable_bytes: int  # card memory x (1 - safety margin)
    max_batch: int

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.usable_bytes


def fit_on_gpu(
    profile: ModelProfile,
    config: TrainingConfig,
    memory_bytes: int,
    *,
    overhead_bytes: int = 0,
    safety_margin: float = 0.0,
    limit: int = 1 << 20,
) -> GpuFit:
    """Whether ``config`` fits a card of ``memory_bytes``, and the largest batch that does."""
    breakdown = estimate_memory(profile, config)
    best = max_batch_size(profile, config, memory_bytes, overhead_bytes=overhead_bytes,
                          safety_margin=safety_margin, limit=limit)
    return GpuFit(breakdown, breakdown.peak_bytes + overhead_bytes, int(memory_bytes * (1.0 - safety_margin)), best)


def accumulator_reset_parameters(profile: ModelProfile, config: TrainingConfig) -> int:
    """Elements of the zeros constants that gradient accumulation holds (0 without it)."""
    if config.gradient_accumulation_steps <= 1:
        return 0
    return sum(accumulator_reset_elements(profile, trainable_flags(profile, config)[0]))


def largest_fixed_request_bytes(profile: ModelProfile, config: TrainingConfig) -> int:
    """The largest single request of the step that does not grow with the batch, in full training.

    XLA's dense filter gradient of a depthwise Conv2D with groups
    (``calc.facts.kernels.grouped_depthwise_scratch``; ConvNeXt's 7x7 convs: 220 MiB for
    ConvNeXtTiny, 880 MiB for ConvNeXtXLarge). The walk counts it at its size, but the
    allocator may hand it a free chunk up to 128 MiB larger (``SPLIT_ALWAYS_ABOVE``),
    depending on the pool: traced on ConvNeXtTiny 128 px b8 adamax mixed_float16, its
    220.9 MiB request got a 310.4 MiB chunk and set the peak. Runs of one such step are
    bimodal (docs/notes/allocator.md). 0 unless every layer trains.
    """
    if partly_frozen(profile, config):
        return 0
    return max((grouped_depthwise_scratch(layer, profile, config.device) for layer in profile.layers), default=0)


def largest_variable_bytes(profile: ModelProfile) -> int:
    """Bytes of the model's largest variable (float32 under every precision)."""
    return FLOAT32 * max((e for layer in profile.layers
                          for e in (*layer.trainable_weight_elements, *layer.non_trainable_weight_elements)), default=0)


def spread_caveats(profile: ModelProfile, config: TrainingConfig) -> dict[str, int]:
    """Why repeated runs of this step can differ widely, measured: kind -> bytes behind it.

    - ``large_variable``: a variable of 128 MiB or more (VGG's fc1 with its Flatten top):
      when the executor runs its weight gradient decides the peak (VGG16 224 px b8 SGD:
      1100-1195 or 1851 MiB).
    - ``large_fixed_request``: ``largest_fixed_request_bytes`` of 128 MiB or more (ConvNeXt),
      whose chunk depends on the pool (ConvNeXtSmall 128 px b1 Adam: 875 / 878 / 1022 MiB).
    - ``inference_layout``: part of the model runs in inference (frozen backbone, last N
      layers): the peak is a few tensors in whole chunks, simulated (runs differ by up to 15 %).
    - ``updates_together``: under mixed_float16 the peak is the update, where every variable's
      update starts at once and how many temporaries are alive together varies (the bytes:
      the update's temporaries counted; ResNet152 128 px b6 Adadelta EMA: 1543 / 1587 / 1912 MiB).
    - ``float16_buffer``: under mixed_float16 the peak is a layer whose float16 CPU kernel holds a
      buffer (calc.facts.kernels) of ``FLOAT16_BUFFER_SHARE`` of the peak or more, handed
      whatever chunk the pool has (MobileNetV3Small 128 px b2: a 17.6 MiB im2col request in a
      32 MiB chunk; the bytes: the layer's buffers).
    """
    caveats = {}
    if (variable := largest_variable_bytes(profile)) >= SPLIT_ALWAYS_ABOVE:
        caveats["large_variable"] = variable
    if (request := largest_fixed_request_bytes(profile, config)) >= SPLIT_ALWAYS_ABOVE:
        caveats["large_fixed_request"] = request
    inference = partly_frozen(profile, config)
    half = config.precision is Precision.MIXED_FLOAT16
    if inference or half:
        b = estimate_memory(profile, config)
        if inference:
            caveats["inference_layout"] = b.allocator_bytes
        if waits_for_all_gradients(config) and b.peak_phase == UPDATE_PHASE:
            caveats["updates_together"] = b.other_bytes + b.backward_transient_bytes
        if half and (buffers := kernel_bytes_at(profile, config, b.peak_phase)) >= FLOAT16_BUFFER_SHARE * b.peak_bytes:
            caveats["float16_buffer"] = buffers
    return caveats
