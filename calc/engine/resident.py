"""The variables and optimizer slots in the simulated pool, as Keras makes them before the step."""

from __future__ import annotations

from functools import lru_cache

from calc.engine.allocator import BFC
from calc.engine.counting import counted_bytes, untracked_below
from calc.engine.training import accumulator_reset_elements, output_channels, trainable_flags, variable_elements
from calc.facts.dtypes import FLOAT32
from calc.facts.layers import rule_for
from calc.facts.optimizers import slots_per_variable
from calc.types import ModelProfile, TrainingConfig


def randomly_initialized(profile: ModelProfile) -> tuple[bool, ...]:
    """Per variable, in ``variable_elements`` order: made by a random initializer.

    The kernels of layers that multiply by a weight (Conv, Dense, depthwise and
    separable kernels); not a trailing bias (as long as the output channels), nor
    normalization scales and statistics, which start as ones and zeros.
    """
    flags: list[bool] = []
    for layer in profile.layers:
        kernels = rule_for(layer.layer_type, layer.activation)[0].input_for_weights_only
        weights = layer.trainable_weight_elements
        last = output_channels(layer)
        for j, e in enumerate(weights):
            bias = j == len(weights) - 1 and len(weights) > 1 and e == last
            flags.append(kernels and not bias)
        flags.extend(False for _ in layer.non_trainable_weight_elements)
    return tuple(flags)


def resident_requests(profile: ModelProfile, config: TrainingConfig) -> list[int]:
    """Bytes of each variable, then of each optimizer slot, in the order Keras makes them."""
    trained = trainable_flags(profile, config)[0]
    every, trainable = variable_elements(profile, trained)
    slots = slots_per_variable(config.optimizer, config.optimizer_options, config.gradient_accumulation_steps)
    resets = accumulator_reset_elements(profile, trained) if config.gradient_accumulation_steps > 1 else []
    return [FLOAT32 * e for e in (*every, *(e for e in trainable for _ in range(slots)), *resets)]


def resident_pool(profile: ModelProfile, config: TrainingConfig, drawn_kernels: bool = True,
                  kept: list | None = None, requests: list[int] | None = None) -> BFC:
    """The simulated pool once the variables and optimizer slots exist.

    ``drawn_kernels``: as measured for one layer (``archive/probes/probe_init.py``, a 64 MiB
    Dense kernel peaks the pool at 192 MiB with glorot_uniform or he_normal, 64 with
    zeros), a kernel's random initializer makes two tensors of its size (the draw and its
    scaled copy), the variable copies the result, then both are freed; zeros and ones
    (biases, normalization, optimizer slots) become the variable without a copy.
    Otherwise every variable and slot is made from one value of its size, freed once the
    variable holds its copy. ``kept`` collects ``(index in resident_requests, chunk)`` of
    what stays. ``requests``: other sizes than ``resident_requests``, the variables first in
    its order (``tools/trace_step.py`` replays the slots its own way).
    """
    bfc = BFC()
    random = randomly_initialized(profile) if drawn_kernels else ()
    below = untracked_below(config.device)
    for k, nbytes in enumerate(resident_requests(profile, config) if requests is None else requests):
        if nbytes < below:
            continue
        if not drawn_kernels:
            value = bfc.alloc(nbytes)
            chunk = bfc.alloc(nbytes)
            bfc.free(value)
        elif k < len(random) and random[k]:
            draw, scaled = bfc.alloc(nbytes), bfc.alloc(nbytes)
            chunk = bfc.alloc(nbytes)
            bfc.free(draw)
            bfc.free(scaled)
        else:
            chunk = bfc.alloc(nbytes)
        if kept is not None:
            kept.append((k, chunk))
    return bfc


@lru_cache(maxsize=256)
def _resident_built(profile: ModelProfile, config: TrainingConfig, drawn_kernels: bool) -> tuple[tuple, int, int]:
    """``resident_pool`` once per configuration and history: its snapshot, and the bytes
    the variables, then the optimizer's slots, hold in its chunks."""
    kept: list = []
    snapshot = resident_pool(profile, config, drawn_kernels, kept=kept).snapshot()
    n_variables = len(variable_elements(profile, trainable_flags(profile, config)[0])[0])
    weights = sum(chunk.size for k, chunk in kept if k < n_variables)
    return snapshot, weights, sum(chunk.size for _, chunk in kept) - weights


def resident_state(profile: ModelProfile, config: TrainingConfig, drawn_kernels: bool) -> tuple:
    """``resident_pool`` as a snapshot, made once per configuration (every batch shares it)."""
    return _resident_built(profile, config, drawn_kernels)[0]


def resident_chunks(profile: ModelProfile, config: TrainingConfig) -> tuple[int, int]:
    """Bytes the variables, then the optimizer's slots, hold in the simulated pool's chunks.

    ``resident_pool`` with the kernels drawn (the measured pattern), the pool the drawn
    history replays the step in: each variable and slot in the chunk the simulated
    allocator hands it, which is its size rounded to 256 bytes unless a hole left by an
    earlier draw is handed out whole.
    """
    return _resident_built(profile, config, True)[1:]


@lru_cache(maxsize=128)
def resident_counted(profile: ModelProfile, config: TrainingConfig) -> int:
    """The variables and slots as the walk counts them (``counted_bytes``)."""
    below = untracked_below(config.device)
    return sum(counted_bytes(n, below) for n in resident_requests(profile, config))
