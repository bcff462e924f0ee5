"""The walk over one training step, layer by layer, in named phases over one ``WalkState``.

The step is simulated as TensorFlow runs it: the forward pass allocates each layer's
output and frees a tensor after its last forward reader unless a gradient will read
it (``calc.engine.keeps``); the backward pass runs the layers in reverse, allocating input
gradients and weight gradients and freeing what each layer kept, while the optimizer
applies each gradient a few layers after it appears. Every moment of the walk holds
its live bytes per component as fixed bytes plus the per-sample sizes of the live
tensors, so one walk serves every batch size; the moments that can be the peak for
some batch are kept (``calc.engine.prune``) and evaluated per batch.

Phases, in order: ``start_walk`` (the graph, what the backward keeps, the executor's
order, what is resident before the step), ``run_forward``, ``run_loss``,
``run_backward`` (with the lagging updates), ``run_update``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, partial

from calc.engine.backward import run_backward
from calc.engine.counting import counted_bytes, raw_bytes, untracked_below
from calc.engine.events import Event
from calc.engine.forward import run_forward, run_loss
from calc.engine.graph import tensor_graph
from calc.engine.half_kernels import half_kernel_scratch
from calc.engine.keeps import what_backward_keeps
from calc.engine.ledger import ACT, INPUT, OPT, OTHER, Ledger, Moment, StepPlan, W
from calc.engine.order import executor_order
from calc.engine.prune import prune
from calc.engine.resident import resident_chunks
from calc.engine.state import WalkState
from calc.engine.training import (
    accumulator_reset_elements,
    alive_share,
    early_temporaries_per_variable,
    flow_of,
    partly_frozen,
    variable_elements,
    without_batch,
)
from calc.engine.update import run_update
from calc.facts.dtypes import FLOAT32, LABEL_BYTES
from calc.facts.layers import layer_rule, rule_for
from calc.facts.optimizers import slots_per_variable
from calc.types import Device, ModelProfile, TrainingConfig


@dataclass
class Walk:
    """One walk: every moment, the allocation events (recorded walks only), and the plan
    (the moments that can be the peak), worked out when first asked for."""

    moments: list[Moment]
    events: list[Event]
    unknown_layer_types: tuple[str, ...]
    kept_per_sample: tuple[int, ...]

    @cached_property
    def plan(self) -> StepPlan:
        return StepPlan(prune(self.moments), self.unknown_layer_types, self.kept_per_sample)


def _resident(state: WalkState) -> None:
    """What is allocated before the step: the variables and optimizer slots (full training:
    each at its size plus the fitted ``FRAGMENTATION``, a fit of the whole walk; with part
    of the model in inference, as the simulated pool places them, since the peak is a few
    feature maps beside them: ``calc.engine.resident``), the early optimizer temporaries,
    a frozen layer's 16-bit kernel copy, and the batch with its labels."""
    profile, config, ledger, count = state.profile, state.config, state.ledger, state.count
    every, trainable = variable_elements(profile, state.flow.trained)
    if not partly_frozen(profile, config):
        ledger.fixed[W] = sum(count(FLOAT32 * e) for e in every)
        slots = slots_per_variable(config.optimizer, config.optimizer_options, config.gradient_accumulation_steps)
        ledger.fixed[OPT] = slots * sum(count(FLOAT32 * e) for e in trainable)
        if config.gradient_accumulation_steps > 1:
            resets = accumulator_reset_elements(profile, state.flow.trained)
            ledger.fixed[OPT] += sum(count(FLOAT32 * e) for e in resets)
    else:
        ledger.fixed[W], ledger.fixed[OPT] = resident_chunks(profile, without_batch(config))
    ledger.fixed[OTHER] += sum(state.early_bytes)
    for size in state.kernel_casts:
        if size:
            ledger.add_fixed(ACT, size)
    for t in profile.input_ids:
        ledger.add(INPUT, state.graph.nbytes[t])
    ledger.add(INPUT, LABEL_BYTES * profile.label_elements)


def _kernel_casts(profile: ModelProfile, config: TrainingConfig, inference: list[bool], backward: list[bool],
                  count) -> list[int]:
    """Per layer, the 16-bit copy of its kernels a frozen layer holds until it has run.

    Under mixed precision each layer casts its float32 kernel to the compute dtype. The
    cast reads only the variable, so the executor runs it at the start of the step; in
    inference the copy lives until its layer has run (in training the backward keeps it:
    ``private_fixed`` in calc.engine.keeps). Measured: ResNet50 224 px b16 frozen, adam,
    mixed_float16 / mixed_bfloat16 303.0 / 309.4 MiB, 50-56 MiB above the walk without the
    copies (its 16-bit kernels: 45 MiB); MobileNetV2 and EfficientNetB0 (4-8 MiB of
    kernels) were within 3 % without them (docs/notes/float16-kernels.md).
    """
    precision = config.precision
    return [
        sum(count(precision.compute_bytes * e) for e in layer.trainable_weight_elements)
        if inference[i] and not backward[i] and precision.is_mixed and not layer.float32_compute
        and rule_for(layer.layer_type, layer.activation)[0].input_for_weights_only else 0
        for i, layer in enumerate(profile.layers)
    ]


def start_walk(profile: ModelProfile, config: TrainingConfig, record: bool = False,
               moments: bool = True) -> WalkState:
    """Everything the phases read, and the ledger with what is allocated before the step."""
    below = untracked_below(config.device)
    count = partial(raw_bytes if record else counted_bytes, below=below)
    flow = flow_of(profile, config)
    graph = tensor_graph(profile, config, flow)
    keeps = what_backward_keeps(profile, config, flow, graph, count)
    half_forward, half_backward = half_kernel_scratch(profile, config, flow.has_weights, flow.requires_grad,
                                                      flow.backward)
    layers = profile.layers
    order = executor_order(layers, graph.producer, onednn=config.device is not Device.GPU, twin_of=graph.twins)
    pos = [0] * len(layers)
    for k, i in enumerate(order):
        pos[i] = k
    last_forward_use = [-1] * len(profile.tensor_elements)
    for i in order:
        if i in graph.twins:
            continue  # merged into its twin: it does not run
        at = pos[graph.fused_convs[i]] if i in graph.fused_convs else pos[i]  # a fused conv runs at its Add
        for t in layers[i].input_ids:
            last_forward_use[graph.alias[t]] = max(last_forward_use[graph.alias[t]], at)
    early = early_temporaries_per_variable(config)
    early_bytes = [alive_share(early * sum(count(FLOAT32 * e) for e in layer.trainable_weight_elements))
                   if flow.has_weights[i] else 0 for i, layer in enumerate(layers)]
    sparse_values = [FLOAT32 * sum(profile.tensor_elements[t] for t in layer.output_ids)
                     if layer_rule(layer.layer_type).sparse_gradient else 0 for layer in layers]
    n_tensors = len(profile.tensor_elements)
    state = WalkState(
        profile, config, count, flow, graph, keeps, order, pos, last_forward_use, half_forward, half_backward,
        early_bytes, _kernel_casts(profile, config, flow.inference, flow.backward, count), sparse_values,
        Ledger(record, below, moments), list(keeps.keepers), [False] * n_tensors, [False] * n_tensors, [False] * n_tensors)
    _resident(state)
    return state


def _kept_per_sample(state: WalkState) -> tuple[int, ...]:
    """Per layer, the bytes per sample it holds for the backward pass."""
    keeps, g = state.keeps, state.graph
    kept = [sum(own) + sum(to_end) for own, to_end in zip(keeps.private, keeps.private_to_end)]
    for t, keepers in enumerate(keeps.keepers):
        if keepers and g.producer[t] != -1:
            kept[g.producer[t]] += g.nbytes[t]
    return tuple(kept)


def simulate(profile: ModelProfile, config: TrainingConfig, record: bool = False, moments: bool = True) -> Walk:
    """Walks one training step (``record``: counting raw requests and recording the allocation
    events, for the allocator simulation; ``moments=False``: without keeping the moments)."""
    state = start_walk(profile, config, record, moments)
    run_forward(state)
    run_loss(state)
    run_backward(state)
    run_update(state)
    ledger = state.ledger
    return Walk(ledger.moments, ledger.events or [], state.keeps.unknown, _kept_per_sample(state))
