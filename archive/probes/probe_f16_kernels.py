"""What TensorFlow's convolution-gradient and MatMul kernels allocate beyond their output, per dtype.

    python benchmarks/probe_f16_kernels.py

Runs one op at a time eagerly on the CPU (1 inter-op / 1 intra-op thread, as the
measurement protocol), each twice so the second call finds a warmed pool, and prints
the allocator peak above the op's output next to ``calc.kernels``' rule for the
Keras layer that would run it:

- ``Conv2DBackpropFilter`` / ``Conv2DBackpropInput`` at the shapes of NASNetMobile's
  and MobileNetV2's traced peaks and a few others, batch 1 included;
- ``MatMul`` at a classifier head's and at larger shapes.

Under float16 the extra bytes are the im2col buffer and the float32 copies the rule
names (plus at most a chunk's rounding); under float32 and bfloat16 (oneDNN) they are
near zero. About a minute.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

from calc.kernels import im2col_buffer_bytes, matmul_upcasts  # noqa: E402
from calc.types import LayerStats  # noqa: E402

MIB = 2 ** 20
# (batch, side, in channels, out channels, kernel, stride)
CONVS = (
    (4, 47, 32, 11, 1, 1),   # NASNetMobile 96 px stem_1 1x1 (traced: [165, 2209, 32])
    (2, 24, 144, 24, 1, 1),  # MobileNetV2 96 px block_2_project (traced: [157, 576, 144])
    (1, 24, 144, 24, 1, 1),  # the same at batch 1: the input gradient's one-image buffer
    (8, 56, 64, 64, 3, 1),
    (2, 112, 32, 64, 3, 2),
    (16, 14, 256, 256, 3, 1),
)
MATMULS = ((8, 2048, 1000), (512, 1024, 1000), (64, 8192, 4096))


def extra_bytes(fn) -> int:
    """Allocator peak of ``fn()`` above what was live before, minus its result."""
    fn()
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    result = fn()
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - before
    return peak - result.shape.num_elements() * result.dtype.size


def conv_layer(side: int, c_in: int, c_out: int, k: int, stride: int) -> LayerStats:
    out = -(-side // stride)
    return LayerStats(name="conv", layer_type="Conv2D", input_ids=(0,), output_ids=(1,),
                      output_shapes=((out, out, c_out),), trainable_weight_elements=(k * k * c_in * c_out,),
                      detail=f"kernel_size=({k}, {k}) strides=({stride}, {stride})")


def main() -> None:
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    print(f"{'op':58s} {'float16':>8s} {'rule':>7s} {'float32':>8s} {'bfloat16':>8s}  (MiB beyond the output)")
    for n, side, c_in, c_out, k, s in CONVS:
        out = -(-side // s)
        layer = conv_layer(side, c_in, c_out, k, s)
        for kind in ("filter", "input"):
            got = {}
            for dtype in (tf.float16, tf.float32, tf.bfloat16):
                x = tf.cast(tf.random.normal([n, side, side, c_in]), dtype)
                f = tf.cast(tf.random.normal([k, k, c_in, c_out]), dtype)
                dy = tf.cast(tf.random.normal([n, out, out, c_out]), dtype)
                if kind == "filter":
                    op = lambda: tf.raw_ops.Conv2DBackpropFilter(  # noqa: E731
                        input=x, filter_sizes=[k, k, c_in, c_out], out_backprop=dy,
                        strides=[1, s, s, 1], padding="SAME")
                else:
                    op = lambda: tf.raw_ops.Conv2DBackpropInput(  # noqa: E731
                        input_sizes=[n, side, side, c_in], filter=f, out_backprop=dy,
                        strides=[1, s, s, 1], padding="SAME")
                got[dtype.name] = extra_bytes(op)
            rule = im2col_buffer_bytes(layer, c_in, filter_grad=kind == "filter", input_grad=kind == "input")
            if kind == "input" and n == 1:
                rule = out * out * k * k * c_in * 2  # batch 1: one image (the rule is for batch 2 and up)
            name = f"Conv2DBackprop{kind.capitalize()} b{n} {side}px {c_in}->{c_out} {k}x{k}/{s}"
            print(f"{name:58s} {got['float16'] / MIB:8.2f} {rule / MIB:7.2f} "
                  f"{got['float32'] / MIB:8.2f} {got['bfloat16'] / MIB:8.2f}", flush=True)
    for m, k, n in MATMULS:
        layer = LayerStats(name="dense", layer_type="Dense", input_ids=(0,), output_ids=(1,),
                           output_shapes=((n,),), trainable_weight_elements=(k * n, n))
        fixed, per_sample = matmul_upcasts(layer, k, n)
        rule = fixed + m * sum(per_sample)
        got = {}
        for dtype in (tf.float16, tf.float32, tf.bfloat16):
            a = tf.cast(tf.random.normal([m, k]), dtype)
            b = tf.cast(tf.random.normal([k, n]), dtype)
            got[dtype.name] = extra_bytes(lambda: tf.matmul(a, b))  # noqa: B023
        name = f"MatMul [{m}, {k}] x [{k}, {n}]"
        print(f"{name:58s} {got['float16'] / MIB:8.2f} {rule / MIB:7.2f} "
              f"{got['float32'] / MIB:8.2f} {got['bfloat16'] / MIB:8.2f}", flush=True)


if __name__ == "__main__":
    main()
