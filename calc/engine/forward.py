"""The forward pass and the loss: each layer's outputs allocated in the executor's order,
each tensor freed after its last reader unless a gradient will read it."""

from __future__ import annotations

import math

from calc.engine.events import LOSS, Phase, Step
from calc.engine.ledger import ACT
from calc.engine.state import WalkState
from calc.facts.dtypes import FLOAT32, LABEL_BYTES
from calc.facts.layers import layer_rule, rule_for
from calc.types import Device, LayerStats, Precision


def first_stage(layer: LayerStats, precision: Precision, input_bytes: int, input_elements: int) -> tuple[int, str]:
    """Per-sample bytes of the intermediate a layer in inference makes first, and its name.

    A separable conv runs its depthwise conv, then the pointwise one. Under mixed
    precision a normalization makes a float32 copy of its input first (``normalization``
    in ``calc.facts.layers``).
    """
    rule = layer_rule(layer.layer_type)
    if rule.separable:
        return input_bytes // max(1, math.prod(layer.detail_ints("strides") or (1,))), "depthwise"
    if precision.is_mixed and rule.normalization:
        return FLOAT32 * input_elements, "float32 copy"
    return 0, ""


def inference_scratch(layer: LayerStats, staged: int) -> float:
    """Output-sized temporaries of a layer running in inference, while it runs.

    A chain of elementwise ops (GELU's 0.5 * x * (1 + erf(x / sqrt 2)), hard_swish,
    x * sigmoid(x), LayerNormalization's squared difference) needs one new tensor
    while its input lives; the next ops write in place. What training keeps of those
    intermediate results (``extra_outputs``) is gone in inference. The convolutions'
    measured forward "scratch" was the allocator's chunk waste
    (docs/notes/frozen-steps.md), which the allocator simulation counts itself; a separable conv's
    depthwise output is its own step of the walk (``staged``); max pooling's extra is
    oneDNN's training workspace.
    """
    rule, act, _ = rule_for(layer.layer_type, layer.activation)
    fused = min(1.0, act.forward_scratch + act.extra_outputs)
    if staged or rule.input_for_weights_only:
        return fused
    if layer_rule(layer.layer_type).workspace_only_in_training:
        return 0.0
    return min(1.0, rule.forward_scratch + rule.extra_outputs) + fused


def writes_in_place(state: WalkState, i: int, frozen_op: bool) -> bool:
    """Whether layer ``i`` writes its output into its input's buffer (TensorFlow forwards an
    input buffer with no other reader to the output of an element-wise op)."""
    layer = state.profile.layers[i]
    if len(layer.output_ids) != 1 or not layer.input_ids:
        return False
    rule = layer_rule(layer.layer_type)
    source, target = state.graph.alias[layer.input_ids[0]], layer.output_ids[0]
    if frozen_op and rule.binary_in_place and len(layer.input_ids) == 2:
        return state.can_take_buffer(source, target, state.pos[i])
    if len(layer.input_ids) != 1:
        return False
    elementwise = rule.elementwise or (rule.elementwise_in_inference and state.flow.inference[i])
    if not elementwise:
        return False
    if rule.elementwise_in_inference and state.config.precision.is_mixed:
        return False  # it works on a float32 copy, then casts back
    return state.can_take_buffer(source, target, state.pos[i])


def _stage_first(state: WalkState, i: int) -> int:
    """A frozen layer's first step (``first_stage``): its intermediate made from the input,
    which then dies (if this was its last reader) before the output is allocated."""
    layer, g = state.profile.layers[i], state.graph
    if not state.flow.frozen[i] or len(layer.input_ids) != 1:
        return 0
    source = g.alias[layer.input_ids[0]]
    staged, stage = first_stage(layer, state.config.precision, g.nbytes[source],
                                state.profile.tensor_elements[layer.input_ids[0]])
    if staged:
        state.ledger.add(ACT, staged)
        state.ledger.snapshot(Phase(Step.FORWARD, layer.name, stage))
        state.free_dead(state.pos[i], {source})
    return staged


def _allocate_outputs(state: WalkState, i: int, new_buffer: bool) -> None:
    """Makes layer ``i``'s outputs: in a fused conv's addend, in its input's buffer, or new."""
    layer, g, ledger = state.profile.layers[i], state.graph, state.ledger
    conv, addend = g.fused_adds.get(i, (-1, -1))
    if conv != -1:
        # The biased conv fused into this Add writes into the addend's buffer when
        # nothing else reads it, else into a new one; its own output is never made.
        source, target = g.alias[addend], layer.output_ids[0]
        if state.can_take_buffer(source, target, state.pos[i]):
            state.live[source], state.live[target] = False, True
            ledger.rekey(source, target)
        else:
            ledger.add(ACT, g.nbytes[target], key=target)
            state.live[target] = True
    elif not new_buffer and writes_in_place(state, i, state.flow.frozen[i]):
        source, target = g.alias[layer.input_ids[0]], layer.output_ids[0]
        state.live[source], state.live[target] = False, True
        ledger.rekey(source, target)
    else:
        for t in layer.output_ids:
            if g.alias[t] == t:
                ledger.add(ACT, g.nbytes[t], key=t)
                state.live[t] = True


def forward_layer(state: WalkState, i: int) -> None:
    """Runs layer ``i``'s forward: its outputs and what it keeps, the moment, then what dies."""
    layer, g, ledger = state.profile.layers[i], state.graph, state.ledger
    precision = state.config.precision
    frozen_op = state.flow.frozen[i]
    staged = _stage_first(state, i)
    cast_inputs: list[int] = []
    if frozen_op and precision.is_mixed and not layer.float32_compute:
        # Keras casts a float32 model input to the compute dtype for the layer.
        cast_inputs = [precision.compute_bytes * state.profile.tensor_elements[t] for t in layer.input_ids
                       if g.producer[g.alias[t]] == -1]
    # An elementwise chain in inference (swish, hard_swish, GELU) makes its one temporary
    # first and leaves the result there; the input dies after it (traced: EfficientNetB0
    # and MobileNetV3Large frozen, `stem_activation/mul_1`, `activation/add` allocate, the
    # conv output is freed). Same bytes as writing in place beside a temporary, but the
    # surviving buffer is the new one, which decides where later tensors land. The CPU
    # only: no GPU trace shows which buffer survives there.
    rule = rule_for(layer.layer_type, layer.activation)[0]
    scratch_share = inference_scratch(layer, staged) if frozen_op else rule.forward_scratch
    new_buffer = (frozen_op and not staged and scratch_share >= 1.0 and layer_rule(layer.layer_type).elementwise
                  and state.config.device is not Device.GPU)
    _allocate_outputs(state, i, new_buffer)
    for size in (*state.keeps.private[i], *state.keeps.private_to_end[i]):
        ledger.add(ACT, size)
    ledger.grow_fixed(ACT, state.keeps.private_fixed[i])
    if new_buffer:
        scratch_share -= 1.0  # the temporary is the output
    scratch = tuple(int(scratch_share * g.nbytes[t]) for t in layer.output_ids) + tuple(cast_inputs)
    half_fixed, half_per_sample = state.half_forward[i]
    ledger.snapshot(Phase(Step.FORWARD, layer.name), extra_fixed=half_fixed, extra_per_sample=scratch + half_per_sample)
    if staged:
        ledger.remove(ACT, staged)
    if state.kernel_casts[i]:
        ledger.add_fixed(ACT, -state.kernel_casts[i])
    conv = g.fused_adds.get(i, (-1, -1))[0]
    fused_inputs = state.profile.layers[conv].input_ids if conv != -1 else ()
    if conv != -1 and state.kernel_casts[conv]:
        ledger.add_fixed(ACT, -state.kernel_casts[conv])
    state.free_dead(state.pos[i], {g.alias[x] for x in (*layer.input_ids, *fused_inputs, *layer.output_ids)})


def run_forward(state: WalkState) -> None:
    """The forward pass in the executor's order; a conv fused into an Add runs inside it."""
    for i in state.order:
        if i not in state.graph.fused_convs:
            forward_layer(state, i)


def run_loss(state: WalkState) -> None:
    """The loss reads the predictions.

    Keras computes it in float32 (the loss's dtype), so a 16-bit prediction is cast first,
    then clipped (two ops) and its log taken, each a float32 tensor of the predictions'
    size. Traced under mixed_float16 on a per-pixel softmax (tests/test_keras_adapter.py's
    own file, [16, 64, 64, 3]): Cast, Minimum, clip_by_value and Log, 0.75 MiB each, at the
    step's peak. Per label, the sparse cross-entropy makes a float32 loss and a temporary
    and casts the labels to int64 (0.25 + 0.25 + 0.5 MiB there, one label per pixel).
    """
    profile, g = state.profile, state.graph
    loss_temporaries = []
    for t in g.outputs:
        as_float32 = FLOAT32 * profile.tensor_elements[t]
        casts = 0 if g.nbytes[t] == as_float32 else 1
        loss_temporaries += [as_float32] * (3 + casts)
    loss_temporaries.append((2 * FLOAT32 + LABEL_BYTES) * profile.label_elements)
    state.ledger.snapshot(LOSS, extra_per_sample=tuple(loss_temporaries))
