"""The step's tensors: who makes each, which buffer it lives in, and its bytes per sample."""

from __future__ import annotations

from dataclasses import dataclass, replace

from calc.engine.fusions import cpu_fusions
from calc.engine.training import Flow, input_channels
from calc.facts.dtypes import FLOAT32
from calc.facts.layers import layer_rule, rule_for
from calc.types import ModelProfile, TrainingConfig


@dataclass(frozen=True)
class TensorGraph:
    """The tensors of one step, as the forward pass makes them.

    Per tensor: ``producer`` (its layer, -1 for a model input), ``alias`` (the tensor whose
    buffer it lives in: itself, or a view's or a merged twin's source) and ``nbytes`` (bytes
    per sample of its own buffer). ``twins``: a layer merged by common-subexpression
    elimination -> the twin it was merged into. ``fused_adds``: per Add, ``(conv, addend)``
    of the biased Conv2D fused into it, and ``fused_convs`` the other way round
    (``calc.engine.fusions``). ``outputs``: the buffers of the model's outputs.
    """

    producer: list[int]
    alias: list[int]
    nbytes: list[int]
    twins: dict[int, int]
    fused_adds: dict[int, tuple[int, int]]
    fused_convs: dict[int, int]
    outputs: set[int]


def _twin_key(layer, alias: list[int]) -> tuple:
    """What two mergeable layers must share to compute one output (``mergeable``)."""
    return (layer.layer_type, layer.activation, tuple(alias[t] for t in layer.input_ids),
            layer.detail, layer.output_shapes, layer.float32_compute)


def tensor_graph(profile: ModelProfile, config: TrainingConfig, flow: Flow) -> TensorGraph:
    """Lays out the step's tensors: views and casts share their input's buffer, a merged
    layer's outputs its twin's, a fused pad's its input's."""
    layers = profile.layers
    precision = config.precision
    n_tensors = len(profile.tensor_elements)
    producer = [-1] * n_tensors
    alias = list(range(n_tensors))
    nbytes = [0] * n_tensors
    for t in profile.input_ids:
        nbytes[t] = FLOAT32 * profile.tensor_elements[t]
    twins: dict[int, int] = {}
    first_of: dict[tuple, int] = {}
    fused_pads, fused_adds = cpu_fusions(profile, config, flow.frozen, input_channels(profile))
    for i, layer in enumerate(layers):
        rule, _, _ = rule_for(layer.layer_type, layer.activation)
        out_bytes = FLOAT32 if layer.float32_compute else precision.compute_bytes
        if i in fused_pads:
            rule = replace(rule, aliases_input=True)  # the convolution reads the unpadded input
        twin = -1
        if layer_rule(layer.layer_type).mergeable and not layer.params and layer.output_ids:
            twin = first_of.setdefault(_twin_key(layer, alias), i)
        for t in layer.output_ids:
            producer[t] = i
            if (rule.aliases_input or rule.casts_to_compute and not precision.is_mixed) and layer.input_ids:
                alias[t] = alias[layer.input_ids[0]]
            else:
                nbytes[t] = out_bytes * profile.tensor_elements[t]
        if twin not in (-1, i):
            twins[i] = twin
            for t, u in zip(layer.output_ids, layers[twin].output_ids):
                alias[t] = alias[u]
    fused_convs = {conv: add for add, (conv, _) in fused_adds.items()}
    outputs = {alias[t] for t in profile.output_ids}
    return TensorGraph(producer, alias, nbytes, twins, fused_adds, fused_convs, outputs)
