"""What the config trains: which layers, which variables, and the optimizer's per-variable figures."""

from __future__ import annotations

from dataclasses import dataclass, replace

from calc.engine.counting import granules
from calc.facts.optimizers import EARLY_TEMPORARIES_ALIVE, early_temporaries, update_scratch
from calc.types import ModelProfile, Precision, TrainingConfig, TrainMode


def without_batch(config: TrainingConfig) -> TrainingConfig:
    """The config with its batch set aside, so that every batch size shares one plan."""
    return replace(config, batch_size=config.num_gpus)


def trainable_flags(profile: ModelProfile, config: TrainingConfig) -> tuple[list[bool], list[bool]]:
    """Per layer: (its weights are trained, it runs in inference mode)."""
    n = len(profile.layers)
    if config.train_mode is TrainMode.ALL:
        return [True] * n, [False] * n
    if config.train_mode is TrainMode.FROZEN_BACKBONE:
        if not profile.has_backbone:
            raise ValueError(
                "train_mode='frozen_backbone' needs a model with a backbone and a new head "
                "(catalogue models with include_top=False)."
            )
        frozen = [layer.in_backbone for layer in profile.layers]
        return [not f for f in frozen], frozen
    first = max(0, n - config.last_n_layers)
    return [i >= first for i in range(n)], [i < first for i in range(n)]


def partly_frozen(profile: ModelProfile, config: TrainingConfig) -> bool:
    """Some layer is not trained: a frozen backbone, or the last N layers of more than N.

    The last N layers of a model with N layers or fewer is full training, and is estimated
    as such (VGG19's last 30 of 23 layers).
    """
    if config.train_mode is TrainMode.ALL:
        return False
    if config.train_mode is TrainMode.LAST_N:  # trainable_flags trains them all when N covers the model
        return config.last_n_layers < len(profile.layers)
    return not all(trainable_flags(profile, config)[0])


@dataclass(frozen=True)
class Flow:
    """Where the gradient flows, per layer and per tensor.

    ``trained``: the layer's weights are trained; ``inference``: it runs in inference mode;
    ``has_weights``: it has trained weights; ``requires_grad`` (per tensor): downstream of a
    trained weight; ``backward``: the layer runs backward; ``frozen``: in inference and
    without a backward pass.
    """

    trained: list[bool]
    inference: list[bool]
    has_weights: list[bool]
    requires_grad: list[bool]
    backward: list[bool]
    frozen: list[bool]


def gradient_flow(profile: ModelProfile, trained: list[bool]) -> tuple[list[bool], list[bool], list[bool]]:
    """Per layer, whether it has trained weights; per tensor, whether it carries a gradient
    (downstream of a trained weight); per layer, whether it runs backward."""
    has_weights = [t and layer.trainable_params > 0 for t, layer in zip(trained, profile.layers)]
    requires_grad = [False] * len(profile.tensor_elements)
    backward = [False] * len(profile.layers)
    for i, layer in enumerate(profile.layers):
        flows = has_weights[i] or any(requires_grad[t] for t in layer.input_ids)
        backward[i] = flows
        for t in layer.output_ids:
            requires_grad[t] = flows
    return has_weights, requires_grad, backward


def flow_of(profile: ModelProfile, config: TrainingConfig) -> Flow:
    trained, inference = trainable_flags(profile, config)
    has_weights, requires_grad, backward = gradient_flow(profile, trained)
    frozen = [inf and not back for inf, back in zip(inference, backward)]
    return Flow(trained, inference, has_weights, requires_grad, backward, frozen)


def output_channels(layer) -> int:
    """The last dimension of the layer's first output (0 when unknown): a bias is this long."""
    return layer.output_shapes[0][-1] if layer.output_shapes and layer.output_shapes[0] else 0


def input_channels(profile: ModelProfile) -> list[int]:
    """Channels (last dimension) of every tensor, from its producer's output shape."""
    channels = [0] * len(profile.tensor_elements)
    for t in profile.input_ids:
        channels[t] = profile.input_shape[-1] if profile.input_shape else 0
    for layer in profile.layers:
        for t, shape in zip(layer.output_ids, layer.output_shapes):
            channels[t] = shape[-1] if shape else 0
    return channels


def variable_elements(profile: ModelProfile, trained: list[bool]) -> tuple[list[int], list[int]]:
    """Elements of every variable, and of the trained ones (which get optimizer slots)."""
    every = [e for layer in profile.layers
             for e in (*layer.trainable_weight_elements, *layer.non_trainable_weight_elements)]
    trainable = [e for t, layer in zip(trained, profile.layers) if t and layer.trainable_params > 0
                 for e in layer.trainable_weight_elements]
    return every, trainable


def accumulator_reset_elements(profile: ModelProfile, trained: list[bool]) -> list[int]:
    """Elements of the zeros constants that reset gradient accumulators, one per shape.

    Keras resets each accumulator with ``assign(zeros(shape))``; TensorFlow folds the
    zeros into a constant the graph holds for good (and merges equal constants), so the
    resident part grows by one tensor per distinct variable shape. Measured
    (``archive/probes/probe_gradients.py --opts sgd --accum 2 [--distinct]``): a Dense chain
    whose kernels share one shape holds one kernel more than its kernels and
    accumulators (N = 4 and 8: 9 and 17 kernels), one with distinct shapes 2.5x what it
    holds without accumulation (N = 4: 60.4 against 24.2 MiB); ResNet50 160 px b16
    adam, accumulate 4: resident 497 MiB, 390 of weights, slots and accumulators.
    """
    seen: set[tuple] = set()
    out = []
    for t, layer in zip(trained, profile.layers):
        if not t or layer.shares_weights:
            continue
        last = output_channels(layer)
        for j, e in enumerate(layer.trainable_weight_elements):
            # A kernel's shape is told apart by its layer kind and output channels;
            # vectors (biases, scales) of one length share a shape.
            key = (e, layer.layer_type, last) if j == 0 and e != last else (e,)
            if key not in seen:
                seen.add(key)
                out.append(e)
    return out


def waits_for_all_gradients(config: TrainingConfig) -> bool:
    """Whether every update waits for every gradient (mixed_float16's loss scale)."""
    # mixed_float16: Keras' LossScaleOptimizer checks every gradient is finite and applies
    # them inside one ops.cond whose predicate needs them all. Gradient accumulation's
    # ops.cond does not wait: its predicate is the step counter, ready at the start, and
    # TensorFlow lowers the cond to per-tensor switches, so each variable's update (and
    # its early temporaries) runs as without accumulation:
    # ``archive/probes/probe_gradients.py --accum 2`` measured the same growth per layer for
    # SGD momentum (5 / 9 kernels at N = 4 / 8) as without it, and none for SGD or Adam.
    return config.precision is Precision.MIXED_FLOAT16


def early_temporaries_per_variable(config: TrainingConfig) -> int:
    """Variable-sized optimizer temporaries computed before the gradient, per variable.

    They are products of slots alone, run at the start of the step and live until their
    variable's update (``early_temporaries`` in calc.facts.optimizers). Inside the ops.cond
    of an update that waits for all gradients they depend on the branch: none early.
    """
    if waits_for_all_gradients(config):
        return 0
    return early_temporaries(config.optimizer, config.optimizer_options, config.precision.is_mixed)


def update_scratch_per_variable(config: TrainingConfig) -> int:
    """Variable-sized buffers alive during one variable's update, its gradient and its early
    temporaries included (``update_scratch`` in calc.facts.optimizers).

    EMA's momentum * average is an early temporary too, but unlike the optimizer's own it is
    not consumed by the update: the average's assign reads the updated variable, so it is
    alive beside the update's buffers, one more. Traced: MobileNetV2 96 px b2 Lion with EMA,
    frozen backbone, peaked at the head's update holding its gradient and four kernel-sized
    products (m * beta_1, g * (1 - beta_1), m * beta_2, momentum * average). Inside the
    ops.cond of an update that waits for all gradients nothing is early
    (``early_temporaries_per_variable``): none more.
    """
    ema = config.optimizer_options.use_ema and not waits_for_all_gradients(config)
    return update_scratch(config.optimizer, config.optimizer_options) + int(ema)


def alive_share(nbytes: int) -> int:
    """The part of early optimizer temporaries the peak holds (``EARLY_TEMPORARIES_ALIVE``), whole granules."""
    return granules(nbytes * EARLY_TEMPORARIES_ALIVE)
