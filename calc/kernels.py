"""Temporaries of TensorFlow's float16 CPU kernels, which oneDNN does not take over.

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

Measured one op at a time on this machine (``python benchmarks/probe_f16_kernels.py``):
the buffer sizes above to 0.1 MiB (before the pool's chunk rounding), and none of it
under float32 or mixed_bfloat16. Traced in real steps: NASNetMobile 96 px b4 and
MobileNetV2 96 px b2 peak at a ``Conv2DBackpropInput`` buffer of [165, 2209, 32] and
[157, 576, 144] (docs/MEASUREMENTS.md, stop 12).
"""

from __future__ import annotations

import math

from calc.types import LayerStats

HALF = 2
FLOAT32 = 4
# tensorflow/core/kernels/conv_grad_*_ops.cc: l3_cache_size = 30 MiB, l2 = 256 KiB.
WORKING_SET_BYTES = 30 << 20
PARALLEL_UNIT_BYTES = 256 << 10
# Layer types whose backward runs Conv2DBackpropFilter / Conv2DBackpropInput (for
# SeparableConv2D: its pointwise 1x1 convolution).
IM2COL_TYPES = ("Conv2D", "SeparableConv2D")
MATMUL_TYPES = ("Dense",)


def _pointwise(layer: LayerStats, in_channels: int) -> tuple[int, int, int] | None:
    """(out_pixels, filter_size, out_channels) of the convolution the kernels run, or None."""
    if not layer.output_shapes or len(layer.output_shapes[0]) != 3:
        return None
    weights = layer.trainable_weight_elements or layer.non_trainable_weight_elements
    out_h, out_w, out_c = layer.output_shapes[0]
    if layer.layer_type == "SeparableConv2D":
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
    if layer.layer_type not in IM2COL_TYPES or not (filter_grad or input_grad):
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
    if layer.layer_type not in MATMUL_TYPES:
        return 0, ()
    weights = layer.trainable_weight_elements or layer.non_trainable_weight_elements
    if not weights:
        return 0, ()
    return FLOAT32 * weights[0], (FLOAT32 * in_elements, FLOAT32 * out_elements)
