"""The float16 CPU kernels' own temporaries (``calc.facts.kernels``), per layer of a step."""

from __future__ import annotations

from functools import lru_cache

from calc.engine.counting import counted_bytes
from calc.engine.events import Phase, Step
from calc.engine.training import gradient_flow, input_channels, trainable_flags, without_batch
from calc.facts.kernels import im2col_buffer_bytes, matmul_upcasts
from calc.types import Device, ModelProfile, Precision, TrainingConfig

# One layer's buffers while one of its ops runs: (fixed bytes, per-sample bytes of each buffer).
Scratch = tuple[int, tuple[int, ...]]
NONE: Scratch = (0, ())


def half_kernel_scratch(profile: ModelProfile, config: TrainingConfig, has_weights: list[bool],
                        requires_grad: list[bool], backward: list[bool]) -> tuple[list[Scratch], list[Scratch]]:
    """TensorFlow's float16 CPU kernels' own temporaries, per layer: while its forward runs,
    and while its gradient runs. Nothing outside mixed_float16, and nothing on a GPU, where
    cuDNN and cuBLAS compute in float16 themselves, nor on a CPU with AVX512-FP16, where
    oneDNN does (``Device.CPU_FP16``). The fixed bytes are counted with the allocator's
    rounding and fragmentation (``counted_bytes``) in every walk."""
    forward, backward_ops = [NONE] * len(profile.layers), [NONE] * len(profile.layers)
    if config.precision is not Precision.MIXED_FLOAT16 or config.device is not Device.CPU:
        return forward, backward_ops
    channels = input_channels(profile)
    for i, layer in enumerate(profile.layers):
        if layer.float32_compute or len(layer.input_ids) != 1:
            continue
        t_in = layer.input_ids[0]
        fixed, per_sample = matmul_upcasts(layer, profile.tensor_elements[t_in],
                                           sum(profile.tensor_elements[t] for t in layer.output_ids))
        forward[i] = (counted_bytes(fixed), per_sample)
        if backward[i]:
            col = im2col_buffer_bytes(layer, channels[t_in], has_weights[i], requires_grad[t_in])
            backward_ops[i] = (counted_bytes(fixed) + counted_bytes(col), per_sample)
    return forward, backward_ops


def half_kernel_bytes(scratch: Scratch, batch: int) -> int:
    """One ``half_kernel_scratch`` entry at ``batch``."""
    fixed, per_sample = scratch
    return fixed + sum(counted_bytes(size * batch) for size in per_sample)


@lru_cache(maxsize=64)
def half_kernel_plan(profile: ModelProfile, config: TrainingConfig) -> tuple[tuple[str, Scratch, Scratch], ...]:
    """``half_kernel_scratch`` per layer name, once per configuration (every batch shares it)."""
    has_weights, requires_grad, backward = gradient_flow(profile, trainable_flags(profile, config)[0])
    forward_ops, backward_ops = half_kernel_scratch(profile, config, has_weights, requires_grad, backward)
    return tuple(zip((layer.name for layer in profile.layers), forward_ops, backward_ops))


def float16_kernel_bytes(profile: ModelProfile, config: TrainingConfig) -> dict[str, tuple[int, int]]:
    """Per layer name, under mixed_float16: the bytes TensorFlow's float16 CPU kernels hold
    beyond their outputs while the layer's forward runs and while its gradient runs, at the
    config's per-device batch (calc.facts.kernels). Layers without any are left out."""
    batch = config.per_replica_batch
    found = {}
    for name, f, b in half_kernel_plan(profile, without_batch(config)):
        forward_bytes, backward_bytes = half_kernel_bytes(f, batch), half_kernel_bytes(b, batch)
        if forward_bytes or backward_bytes:
            found[name] = (forward_bytes, backward_bytes)
    return found


def kernel_bytes_at(profile: ModelProfile, config: TrainingConfig, phase: str) -> int:
    """The float16 kernels' buffers (calc.facts.kernels) of the layer whose forward or gradient is ``phase``."""
    try:
        at = Phase.parse(phase)
    except ValueError:
        return 0
    if at.step not in (Step.FORWARD, Step.BACKWARD):
        return 0
    ops = next((ops for n, *ops in half_kernel_plan(profile, without_batch(config)) if n == at.layer), None)
    return half_kernel_bytes(ops[at.step is Step.BACKWARD], config.per_replica_batch) if ops else 0
