"""What each layer keeps from its forward pass for its backward pass."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from calc.engine.graph import TensorGraph
from calc.engine.training import Flow
from calc.facts.dtypes import FLOAT32
from calc.facts.layers import NOTHING, is_known_layer_type, layer_rule, rule_for
from calc.types import LayerStats, ModelProfile, TrainingConfig


def padded_conv1d(layer: LayerStats) -> tuple[bool, bool]:
    """(causal or dilated, dilated) for a layer that ``pads_into_copy``; (False, False) for anything else."""
    if not layer_rule(layer.layer_type).pads_into_copy:
        return False, False
    dilated = any(d > 1 for d in layer.detail_ints("dilation_rate"))
    return dilated or "padding=causal" in layer.detail, dilated


def tensors(multiple: float, size: int) -> list[int]:
    """``multiple`` tensors of ``size`` bytes: whole ones, then one fractional."""
    whole = int(multiple)
    rest = int((multiple - whole) * size)
    return [size] * whole + ([rest] if rest else [])


@dataclass(frozen=True)
class Keeps:
    """What the backward pass holds from the forward pass: shared tensors by id, private ones by size.

    Per tensor, ``keepers``: how many layers' backward read it. Per layer: ``kept_ids``, the
    shared tensors it keeps; ``private``, its own kept tensors (per-sample bytes), freed by
    its backward; ``private_to_end``, its own kept copies that outlive its backward (a
    dilated Conv1D's space-to-batch copy); ``private_fixed``, batch-independent bytes it
    keeps (the 16-bit kernel copy its input gradient reads). ``unknown``: layer types (with
    their activation) without a rule.
    """

    keepers: list[int]
    kept_ids: list[list[int]]
    private: list[list[int]]
    private_to_end: list[list[int]]
    private_fixed: list[int]
    unknown: tuple[str, ...]


def what_backward_keeps(profile: ModelProfile, config: TrainingConfig, flow: Flow, graph: TensorGraph,
                        count: Callable[[int], int]) -> Keeps:
    """Goes over the layers that run backward; ``count`` counts a batch-independent request."""
    layers = profile.layers
    precision, cb = config.precision, config.precision.compute_bytes
    alias = graph.alias
    keepers = [0] * len(profile.tensor_elements)
    kept_ids: list[list[int]] = [[] for _ in layers]
    private: list[list[int]] = [[] for _ in layers]
    private_to_end: list[list[int]] = [[] for _ in layers]
    padded_copies: set[tuple] = set()  # (input, kernel size, dilation) of each padded Conv1D input copy
    private_fixed = [0] * len(layers)
    # A cached profile lists the types unknown when it was built; some may have a rule now.
    unknown: set[str] = {t for t in profile.unknown_layer_types if not is_known_layer_type(t)}
    for i, layer in enumerate(layers):
        if not flow.backward[i]:
            continue
        rule, act, known = rule_for(layer.layer_type, layer.activation)
        if not known:
            unknown.add(layer.layer_type if layer.activation == "linear" else f"{layer.layer_type}({layer.activation})")
        if flow.inference[i] and layer_rule(layer.layer_type).keeps_nothing_in_inference:
            rule = NOTHING
        need_input = any(flow.requires_grad[t] for t in layer.input_ids)
        keep: list[int] = []
        if rule.keeps_input and (flow.has_weights[i] or (need_input and not rule.input_for_weights_only)):
            for t in layer.input_ids:
                _keep_input(profile, config, graph, layer, rule.upcasts, t, padded_copies,
                            keep, private[i], private_to_end[i])
        if rule.keeps_output:
            keep.extend(alias[t] for t in layer.output_ids)
        for t in layer.output_ids:
            e = profile.tensor_elements[t]
            private[i].extend(tensors(rule.extra_outputs, (FLOAT32 if precision.is_mixed and rule.upcasts else cb) * e))
            if rule.mask_bytes_per_element:
                private[i].append(rule.mask_bytes_per_element * e)
            if act.keeps_input:
                private[i].append(cb * e)  # the pre-activation tensor
            private[i].extend(tensors(act.extra_outputs, cb * e))
        if act.keeps_output:
            keep.extend(alias[t] for t in layer.output_ids)
        if precision.is_mixed and rule.input_for_weights_only and need_input:
            # dX = dY * W^T reads the 16-bit copy of the kernel made for the forward pass.
            private_fixed[i] += sum(count(cb * e) for e in layer.trainable_weight_elements)
        if i in graph.twins:
            private[i], private_fixed[i] = [], 0  # its twin's forward made them
        for t in set(keep):
            if graph.producer[t] != -1:  # model inputs are live all step anyway
                keepers[t] += 1
                kept_ids[i].append(t)
    return Keeps(keepers, kept_ids, private, private_to_end, private_fixed, tuple(sorted(unknown)))


def _keep_input(profile: ModelProfile, config: TrainingConfig, graph: TensorGraph, layer: LayerStats, upcasts: bool,
                t: int, padded_copies: set[tuple], keep: list[int], own: list[int], own_to_end: list[int]) -> None:
    """What a layer keeps of its input ``t``: the shared tensor (into ``keep``), or a copy of
    its own (per-sample bytes into ``own``, or ``own_to_end`` when it outlives the layer's backward)."""
    precision = config.precision
    elems = profile.tensor_elements[t]
    if precision.is_mixed and upcasts:
        own.append(FLOAT32 * elems)  # the float32 copy is what is kept
        return
    if precision.is_mixed and graph.producer[graph.alias[t]] == -1 and not layer.float32_compute:
        # Keras casts a float32 model input to the compute dtype: the copy is kept.
        own.append(precision.compute_bytes * elems)
        return
    padded, dilated = padded_conv1d(layer)
    if not padded:
        keep.append(graph.alias[t])
        return
    # The padded or space-to-batch copy is kept (``pads_into_copy``); convolutions that pad
    # one input alike share one (common-subexpression elimination: WaveNet's gate pairs
    # made 4 SpaceToBatchND for 8 dilated layers).
    key = (graph.alias[t], layer.detail_ints("kernel_size"), layer.detail_ints("dilation_rate"))
    if key not in padded_copies:
        padded_copies.add(key)
        (own_to_end if dilated else own).append(graph.nbytes[graph.alias[t]])
