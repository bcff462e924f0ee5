"""Ops that TensorFlow's CPU graph passes fuse in a frozen (inference) step."""

from __future__ import annotations

import math

from calc.engine.training import output_channels
from calc.facts.layers import layer_rule
from calc.types import Device, ModelProfile, Precision, TrainingConfig


def cpu_fusions(profile: ModelProfile, config: TrainingConfig, frozen: list[bool],
                input_channels: list[int]) -> tuple[set[int], dict[int, tuple[int, int]]]:
    """Ops that TensorFlow's CPU graph passes fuse in a frozen (inference) step.

    Returns the ZeroPadding2D layers whose pad is fused into the Conv2D that reads it,
    and, per Add layer, ``(conv layer, addend input)`` of the biased Conv2D fused into it.

    - oneDNN's layout pass rewrites ``Pad`` + ``Conv2D`` into one op
      (``_MklPadWithConv2D`` / ``_MklPadWithFusedConv2D``, tensorflow/core/common_runtime/
      mkl_layout_pass.cc) when the pad's only reader is the convolution: the padded
      tensor is never made. In training the filter gradient reads it too, so no fusion.
    - Grappler's remapper (``FindContractionWithBiasAddAndAdd``,
      tensorflow/core/grappler/optimizers/remapper.cc) turns a ``Conv2D`` + ``BiasAdd``
      whose only reader is a two-input ``Add`` of one shape (float32 or bfloat16, on the
      CPU) into ``_FusedConv2D(x, filter, bias, addend)``: the input at port 0 is tried
      first, then port 1. The fused op runs when the ``Add`` would, writes into the
      addend's buffer when nothing else reads it, and the convolution's own output is
      never made.

    Traced (``tools/trace_step.py "ResNet50V2-224x224x3-head1000 b16 sgd float32
    frozen"``): no allocation for any ``*_0_conv`` shortcut, one ``BiasAdd`` per stage
    (its first block's main branch, into which the shortcut conv then writes), none for
    the ZeroPadding2D before each block's 3x3 conv nor for the stem's; ResNet50 and
    DenseNet121 frozen allocate no stem pad either; EfficientNetB0's and MobileNetV2's
    pads before a depthwise conv are allocated (not fused).
    """
    if config.device is Device.GPU or config.precision is Precision.MIXED_FLOAT16:
        return set(), {}
    layers = profile.layers
    readers: dict[int, list[int]] = {}
    for i, layer in enumerate(layers):
        for t in dict.fromkeys(layer.input_ids):
            readers.setdefault(t, []).append(i)
    outputs = set(profile.output_ids)
    producer = {t: i for i, layer in enumerate(layers) for t in layer.output_ids}

    def only_reader(t: int) -> int:
        r = readers.get(t, [])
        return r[0] if len(r) == 1 and t not in outputs else -1

    def plain_conv(i: int) -> bool:
        layer = layers[i]
        if (not layer_rule(layer.layer_type).fuses_pad_and_bias_add or not frozen[i] or len(layer.input_ids) != 1
                or len(layer.output_ids) != 1):
            return False
        k = math.prod(layer.detail_ints("kernel_size") or (1,))
        c_out = output_channels(layer)
        # A grouped Conv2D is compiled by XLA in Keras (no grappler fusion).
        return bool(layer.trainable_weight_elements) and (
            layer.trainable_weight_elements[0] == k * input_channels[layer.input_ids[0]] * c_out)

    def biased_conv(t: int, add: int) -> bool:
        """``t`` is made by a plain, linear Conv2D with a bias that only the Add ``add`` reads."""
        conv = producer.get(t, -1)
        return (conv != -1 and only_reader(t) == add and plain_conv(conv) and layers[conv].activation == "linear"
                and len(layers[conv].trainable_weight_elements) == 2
                and layers[conv].trainable_weight_elements[1] == output_channels(layers[conv]))

    pads: set[int] = set()
    adds: dict[int, tuple[int, int]] = {}
    for i, layer in enumerate(layers):
        if not frozen[i] or len(layer.output_ids) != 1:
            continue
        rule = layer_rule(layer.layer_type)
        if rule.pads_into_conv and len(layer.input_ids) == 1:
            reader = only_reader(layer.output_ids[0])
            if reader != -1 and plain_conv(reader):
                pads.add(i)
        elif rule.takes_fused_conv and len(layer.input_ids) == 2:
            a, b = layer.input_ids
            if a == b or profile.tensor_elements[a] != profile.tensor_elements[b]:
                continue
            port = next((port for port in (0, 1) if biased_conv(layer.input_ids[port], i)), None)
            if port is not None:
                adds[i] = (producer[layer.input_ids[port]], layer.input_ids[1 - port])
    return pads, adds
