"""Temporaries of TensorFlow's float16 CPU kernels, which oneDNN does not take over, and of
XLA's filter gradient for grouped convolutions.

With oneDNN on (the default x86-64 build), float32 and bfloat16 convolutions and
matrix products run as oneDNN primitives with little scratch of their own. float16 has
no oneDNN path on CPUs without AVX512-FP16, so under ``mixed_float16`` TensorFlow's own
kernels run, and two of them allocate large temporaries through the allocator:

- ``Conv2DBackpropFilter`` / ``Conv2DBackpropInput`` (``Conv2DCustomBackprop*Op`` in
  ``tensorflow/core/kernels/conv_grad_{filter,input}_ops.cc``) im2col a shard of the
  batch into one buffer ``[shard, out_pixels, filter_size]``, the shard sized so that
  one work unit fits a 30 MiB "L3" working set: ``shard = ceil((30 MiB / 2) / unit)``
  with ``unit = out_pixels * filter_size + out_pixels * out_channels + filter_size *
  out_channels`` elements. The buffer does not depend on the batch. The input gradient
  uses a one-image buffer instead when the unit is at least 256 KiB of elements or the
  batch is 1.
- ``MatMul`` on float16 casts both operands and its result to float32 temporaries
  (three buffers, live together while it runs), in the forward pass and in both
  gradient products.

Measured one op at a time on this machine (``archive/probes/probe_f16_kernels.py``):
the buffer sizes above to 0.1 MiB (before the pool's chunk rounding), and none of it
under float32 or mixed_bfloat16. Traced in real steps: NASNetMobile 96 px b4 and
MobileNetV2 96 px b2 peak at a ``Conv2DBackpropInput`` buffer of [165, 2209, 32] and
[157, 576, 144] (docs/notes/float16-kernels.md). Which layer types run these kernels:
``float16_im2col`` and ``float16_matmul`` in ``calc.facts.layers``.
"""

from __future__ import annotations

import math

from calc.facts.dtypes import FLOAT32, HALF
from calc.facts.layers import layer_rule
from calc.types import Device, LayerStats, ModelProfile

# tensorflow/core/kernels/conv_grad_*_ops.cc: l3_cache_size = 30 MiB, l2 = 256 KiB.
WORKING_SET_BYTES = 30 << 20
PARALLEL_UNIT_BYTES = 256 << 10
# A float16 kernel buffer of this share of the peak or more makes it a spread caveat
# (``calc.estimate.spread_caveats``): of the 261 validation cases it was chosen on, the 15
# such steps were off by -15.9 % to +4.9 % (an 18.8 % margin covered their runs), the 119
# without any caveat -6.4 % to +8.6 % (12.0 %).
FLOAT16_BUFFER_SHARE = 0.1


def _pointwise(layer: LayerStats, in_channels: int) -> tuple[int, int, int] | None:
    """(out_pixels, filter_size, out_channels) of the convolution the kernels run, or None."""
    if not layer.output_shapes or len(layer.output_shapes[0]) != 3:
        return None
    weights = layer.trainable_weight_elements or layer.non_trainable_weight_elements
    out_h, out_w, out_c = layer.output_shapes[0]
    if layer_rule(layer.layer_type).separable:
        if len(weights) < 2 or not out_c or weights[1] % out_c:
            return None
        return out_h * out_w, weights[1] // out_c, out_c
    if not weights or not out_c or weights[0] % out_c:
        return None
    filter_size = weights[0] // out_c
    kernel = math.prod(layer.detail_ints("kernel_size")) or 1
    if filter_size != kernel * in_channels:
        return None  # grouped (ConvNeXt's depthwise Conv2D): Keras runs it through XLA
    return out_h * out_w, filter_size, out_c


def im2col_buffer_bytes(layer: LayerStats, in_channels: int, filter_grad: bool, input_grad: bool) -> int:
    """Bytes of the largest im2col buffer a float16 Conv2D's gradient ops allocate (batch 2 and up).

    ``in_channels``: channels of the layer's input; ``filter_grad`` / ``input_grad``:
    which of the two gradient ops run. 0 for other layers and grouped convolutions.
    """
    if not layer_rule(layer.layer_type).float16_im2col or not (filter_grad or input_grad):
        return 0
    dims = _pointwise(layer, in_channels)
    if dims is None:
        return 0
    pixels, filter_size, out_c = dims
    unit = pixels * filter_size + pixels * out_c + filter_size * out_c
    shard = -(-(WORKING_SET_BYTES // HALF) // unit)
    one_image = pixels * filter_size * HALF
    sizes = [shard * one_image] if filter_grad else []
    if input_grad:
        sizes.append(one_image if unit >= PARALLEL_UNIT_BYTES // HALF else shard * one_image)
    return max(sizes)


def matmul_upcasts(layer: LayerStats, in_elements: int, out_elements: int) -> tuple[int, tuple[int, ...]]:
    """float32 copies a float16 Dense's MatMul makes: (batch-independent bytes, per-sample bytes).

    The kernel's (or, in a gradient product, the kernel gradient's) float32 copy, and those
    of the input and the output per sample. Every one of the three products (forward,
    input gradient, kernel gradient) makes one kernel-sized and two per-sample buffers of
    these sizes. (0, ()) for other layers.
    """
    if not layer_rule(layer.layer_type).float16_matmul:
        return 0, ()
    weights = layer.trainable_weight_elements or layer.non_trainable_weight_elements
    if not weights:
        return 0, ()
    return FLOAT32 * weights[0], (FLOAT32 * in_elements, FLOAT32 * out_elements)


# Keras 3 runs a grouped Conv2D (groups > 1) on TensorFlow through
# ``tf.function(jit_compile=True)`` (``grouped_by_xla`` in ``calc.facts.layers``). When
# every group has one input channel (a depthwise conv written as Conv2D(C, k, groups=C),
# as in ConvNeXt), XLA's filter gradient on the CPU expands to a dense k x k x C_in x
# C_out filter: measured (archive/probes/probe_grouped_conv.py), a 7x7 Conv2D with
# groups = channels added 2.0-2.6 dense float32 filters to the step (C = 128-512),
# independent of the batch and spatial size; 2 channels per group added nothing, nor does
# DepthwiseConv2D (not compiled). ConvNeXtTiny at 224 px, SGD, batch 4 and 12: measured
# 1090 / 2592 MiB, i.e. 339 MiB batch-independent of which 107 resident, leaving ~2.1 of
# its largest dense filter (110 MiB). Modelled as two dense filters (the low end) while
# that layer's gradient runs.
XLA_DEPTHWISE_FILTER_GRAD = 2.0


def grouped_depthwise_scratch(layer: LayerStats, profile: ModelProfile, device: Device) -> int:
    """Bytes of XLA's dense filter gradient for a Conv2D with one input channel per group.

    Keras compiles grouped convolutions with XLA on every device; XLA's GPU backend hands
    them to cuDNN's grouped convolution, so only the CPU has this filter: on an H100,
    ConvNeXtBase 128 px b1 sgd peaked at 489 MiB against 955 on the CPU
    (``calc/data/gpu_tf_h100.json``), about its two dense 7x7x1024x1024 filters.

    The dense filter is float32 under every precision: ``archive/probes/probe_grouped_conv.py
    dw C=512 n=2`` added 120 MiB to the step under float32 and mixed_bfloat16 alike (and
    134 under mixed_float16), 2.4-2.7 dense float32 filters of 49 MiB; sized in the
    16-bit compute dtype, ConvNeXtTiny 160 px b8 adam was -11.3 % (bf16) and -7.3 % (f16).
    """
    if (device is Device.GPU or not layer_rule(layer.layer_type).grouped_by_xla or not layer.trainable_weight_elements
            or len(layer.input_ids) != 1):
        return 0
    kernel_size = layer.detail_ints("kernel_size")
    strides = layer.detail_ints("strides") or (1,)
    if not kernel_size or not layer.output_shapes or len(layer.output_shapes[0]) < 2:
        return 0
    k = math.prod(kernel_size)
    c_out = layer.output_shapes[0][-1]
    per_group_in = layer.trainable_weight_elements[0] // max(1, k * c_out)
    spatial_out = math.prod(layer.output_shapes[0][:-1])
    c_in = profile.tensor_elements[layer.input_ids[0]] // max(1, spatial_out * math.prod(strides))
    if per_group_in != 1 or c_in <= 1 or k * c_out != layer.trainable_weight_elements[0]:
        return 0
    return int(XLA_DEPTHWISE_FILTER_GRAD * FLOAT32 * k * c_in * c_out)
