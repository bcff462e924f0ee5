"""ConvNeXt-style blocks: which part adds batch-independent memory to a training step.

    python benchmarks/probe_grouped_conv.py                 # the default sweep below
    python benchmarks/probe_grouped_conv.py dw C=512 K=7 G=1 B=1 S=6 n=1 [P=mixed_bfloat16]

Each run is a fresh process (the MEMORY_FACTS.md protocol, 1x1 threads, SGD): n blocks
of [Conv2D(C, K, groups=C/G) if "dw" in the variant, LayerNormalization if "ln",
Dense(4C, gelu if "gelu"), Dense(C), residual Add if "res"] on a B x S x S x C input.
Prints what was resident before the measured step and what the step added, in MiB.

Found (TF 2.21, Keras 3.15, CPU): Conv2D with groups = channels (one input channel
per group) runs through XLA (Keras compiles grouped convs with jit_compile=True on
TensorFlow) and its filter gradient adds ~2-2.6 dense K x K x C x C float32 filters,
independent of B and S (C=128/256/512 at K=7: +6/+30/+126 MiB; K=3/5 at C=256:
+8/+14 MiB); two channels per group (G=2) and K=1 add nothing; LayerNormalization,
GELU, Dense on 4-D maps and the residual add add nothing batch-independent.
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
import keras, numpy as np
from keras import layers as L
variant = sys.argv[1]
cfg = dict(C=256, K=7, G=1, B=1, S=6, n=1)
precision = "float32"
for a in sys.argv[2:]:
    k, v = a.split("=")
    if k == "P":
        precision = v
    else:
        cfg[k] = int(v)
keras.config.set_dtype_policy(precision)
C, K, G, B, S, n = (cfg[k] for k in "CKGBSn")
inp = keras.Input((S, S, C)); x = inp
for _ in range(n):
    y = x
    if "dw" in variant:
        y = L.Conv2D(C, K, padding="same", groups=C // G)(y)
    if "ln" in variant:
        y = L.LayerNormalization(epsilon=1e-6)(y)
    y = L.Dense(4 * C, activation="gelu" if "gelu" in variant else None)(y)
    y = L.Dense(C)(y)
    x = L.Add()([x, y]) if "res" in variant else y
out = L.Dense(10)(L.GlobalAveragePooling2D()(x))
m = keras.Model(inp, out)
m.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
xb = np.random.rand(B, S, S, C).astype("float32"); yb = np.random.randint(0, 10, size=(B,))
m.train_on_batch(xb, yb)
tf.config.experimental.reset_memory_stats("CPU:0")
before = tf.config.experimental.get_memory_info("CPU:0")["current"]
m.train_on_batch(xb, yb)
peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
dense = K * K * C * C * 4 / 2**20
print(f"{variant:14s} {' '.join(sys.argv[2:]):24s} resident {before / 2**20:7.1f} MiB  step {(peak - before) / 2**20:7.1f} MiB"
      f"  (dense KxKxCxC filter {dense:.1f} MiB)")
'''

SWEEP = [
    ["plain", "n=2"], ["plain", "n=8"], ["dw", "n=2"], ["dw", "n=8"], ["ln", "n=8"], ["gelu", "n=8"],
    ["res", "n=8"], ["dw", "C=128"], ["dw", "C=512"], ["dw", "K=3"], ["dw", "K=5"], ["dw", "K=1"],
    ["dw", "G=2"], ["dw", "B=4"], ["dw", "S=12"],
]


def main(argv: list[str]) -> None:
    for args in ([argv] if argv else SWEEP):
        out = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=300,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        print(out.stdout.strip() or f"{args}: failed: {out.stderr.strip().splitlines()[-1:]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
