"""The backward pass: the layers in reverse, each allocating its input gradients and
weight gradients and freeing what it kept, the optimizer applying gradients as they lag."""

from __future__ import annotations

from calc.engine.events import Phase, Step
from calc.engine.keeps import padded_conv1d, tensors
from calc.engine.ledger import ACT, TRANS
from calc.engine.state import WalkState
from calc.engine.update import apply_lagging_updates, gradient_ready
from calc.facts.dtypes import FLOAT32
from calc.facts.kernels import grouped_depthwise_scratch
from calc.facts.layers import layer_rule, rule_for
from calc.types import LayerStats


def held_to_the_end(state: WalkState, layer: LayerStats, t: int) -> bool:
    """Whether the input gradient ``t`` that ``layer``'s backward makes stays until the step
    ends (``holds_input_gradient`` and ``bias_on_sequences`` in calc.facts.layers)."""
    layers, g = state.profile.layers, state.graph
    i = g.producer[t]
    while i != -1 and layer_rule(layers[i].layer_type).elementwise and len(layers[i].input_ids) == 1:
        i = g.producer[g.alias[layers[i].input_ids[0]]]
    if i == -1 or not state.flow.backward[i] or len(layers[i].trainable_weight_elements) < 2:
        return False  # a model input, a frozen layer, or no bias below
    below, rule = layers[i], layer_rule(layer.layer_type)
    if rule.holds_input_gradient:
        return layer_rule(below.layer_type).reduces_bias
    return (not rule.normalization and layer_rule(below.layer_type).bias_on_sequences
            and len(below.output_shapes[0]) == 2)


def start_backward(state: WalkState) -> None:
    """The loss's gradient: one per model output, the output freed unless a gradient reads it."""
    state.ledger.forward = False
    for t in state.graph.outputs:
        state.grad_live[t] = True
        state.ledger.add(TRANS, state.graph.nbytes[t])
        if state.keepers[t] == 0:
            state.release(t)


def _scratch(state: WalkState, i: int) -> list[int]:
    """Per-sample temporaries of layer ``i``'s gradient: its rule's, of its inputs' size, and
    its activation's, of its outputs' size."""
    layer, g = state.profile.layers[i], state.graph
    rule, act, _ = rule_for(layer.layer_type, layer.activation)
    if state.config.precision.is_mixed and rule.upcasts:
        in_bytes = [FLOAT32 * state.profile.tensor_elements[t] for t in layer.input_ids]
    else:
        in_bytes = [g.nbytes[g.alias[t]] for t in layer.input_ids]
    out_bytes = [g.nbytes[t] for t in layer.output_ids]
    return [x for b in in_bytes for x in tensors(rule.backward_scratch, b)] + [
        x for b in out_bytes for x in tensors(act.backward_scratch, b)]


def _gradient_in_place(state: WalkState, i: int) -> bool:
    """Layer ``i``'s input gradient is written into its output's (``gradient_in_place``)."""
    layer, g = state.profile.layers[i], state.graph
    rule = rule_for(layer.layer_type, layer.activation)[0]
    if not (rule.gradient_in_place and not state.flow.has_weights[i] and len(layer.input_ids) == 1
            and len(layer.output_ids) == 1):
        return False
    source, target = g.alias[layer.input_ids[0]], g.alias[layer.output_ids[0]]
    if not (state.flow.requires_grad[source] and not state.grad_live[source] and state.grad_live[target]
            and source != target and g.nbytes[source] == g.nbytes[target]):
        return False
    state.grad_live[target], state.grad_live[source] = False, True
    state.held[source], state.held[target] = state.held[target], False
    return True


def _input_gradients(state: WalkState, i: int, extra: list[int]) -> None:
    """Allocates layer ``i``'s input gradients; a second contribution to one that exists is
    added into it (a temporary of its size, into ``extra``)."""
    layer, g = state.profile.layers[i], state.graph
    rule = rule_for(layer.layer_type, layer.activation)[0]
    if state.flow.has_weights[i] and rule.input_for_weights_only:
        # The weight gradient runs first (the one inter-op thread runs the last-made
        # ready op inline: Conv2DBackpropFilter before Conv2DBackpropInput); an input
        # kept for it alone is freed before the input's gradient is made.
        inputs = {g.alias[x] for x in layer.input_ids}
        for t in state.keeps.kept_ids[i]:
            if t in inputs and state.keepers[t] == 1 and state.flow.requires_grad[t]:
                state.release(t)
    in_place = _gradient_in_place(state, i)
    for t in {g.alias[x] for x in layer.input_ids}:
        if not state.flow.requires_grad[t] or in_place:
            continue
        if state.grad_live[t]:
            extra.append(g.nbytes[t])
        else:
            state.grad_live[t] = True
            state.held[t] = held_to_the_end(state, layer, t)
            state.ledger.add(TRANS, g.nbytes[t])
    if padded_conv1d(layer)[1]:
        # A dilated Conv1D's backward makes a space-to-batch copy of the incoming
        # gradient, which stays until the step ends (``pads_into_copy``).
        state.ledger.add(TRANS, sum(g.nbytes[g.alias[t]] for t in layer.output_ids))


def _free_output_gradients(state: WalkState, i: int) -> None:
    """Frees the gradients of layer ``i``'s outputs, but those held to the step's end and a
    sequence Concatenate's (``slices_gradient``), which lives until its earliest input's
    producer runs its backward."""
    layer, g = state.profile.layers[i], state.graph
    for t in {g.alias[x] for x in layer.output_ids}:
        if not state.grad_live[t]:
            continue
        state.grad_live[t] = False
        if state.held[t]:
            continue
        if layer_rule(layer.layer_type).slices_gradient and len(layer.output_shapes[0]) == 2:
            earliest = min((g.producer[g.alias[x]] for x in layer.input_ids if g.producer[g.alias[x]] != -1),
                           default=-1)
            if 0 <= earliest < i - 1:
                state.lazy_release.setdefault(earliest, []).append(t)
                continue
        state.ledger.remove(TRANS, g.nbytes[t])


def backward_layer(state: WalkState, i: int) -> None:
    """Runs layer ``i``'s backward: its gradients, the updates due, the moment, then what it frees."""
    layer, ledger = state.profile.layers[i], state.ledger
    extra = _scratch(state, i)
    _input_gradients(state, i, extra)
    if state.flow.has_weights[i]:
        gradient_ready(state, i)
    scratch_now = apply_lagging_updates(state, extra)
    if state.flow.has_weights[i]:
        scratch_now += grouped_depthwise_scratch(layer, state.profile, state.config.device)
    half_fixed, half_per_sample = state.half_backward[i]
    ledger.snapshot(Phase(Step.BACKWARD, layer.name), extra_fixed=scratch_now + half_fixed,
                    extra_per_sample=tuple(extra) + half_per_sample)
    _free_output_gradients(state, i)
    for t in state.keeps.kept_ids[i]:
        state.keepers[t] -= 1
        if state.keepers[t] == 0:
            state.release(t)
    for size in state.keeps.private[i]:
        ledger.remove(ACT, size)
    ledger.grow_fixed(ACT, -state.keeps.private_fixed[i])


def run_backward(state: WalkState) -> None:
    """The layers that run backward, last first."""
    start_backward(state)
    for i in range(len(state.profile.layers) - 1, -1, -1):
        for t in state.lazy_release.pop(i, ()):
            state.ledger.remove(TRANS, state.graph.nbytes[t])
        if state.flow.backward[i]:
            backward_layer(state, i)
