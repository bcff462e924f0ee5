"""How many gradients (and update temporaries) are alive at once in a training step.

    python benchmarks/probe_gradients.py [--layers 4,8,16] [--opts sgd,adam,adadelta] [--width 1024]
                                         [--batch 8] [--act relu] [--spatial 4] [--accum N] [--distinct]
                                         [--precision mixed_float16]

A chain of N Dense(width, no bias) layers (each kernel width^2 float32; 4 MiB at
1024) with a tiny head, batch 8 so that activations stay under the allocator's
256 KiB tracking threshold. The MEMORY_FACTS.md protocol (1x1 threads, warm-up step,
reset, one step; with ``--accum N`` (gradient_accumulation_steps) the warm-up is N
steps and the measured step is the next one that applies the update; ``--distinct``
gives every kernel its own shape, widths 1024 + 8, + 16, ...; ``--precision`` sets Keras' global
dtype policy, and the warm-up then goes on until a step has applied its update, and the
measured step is repeated until it applies its own, as ``calc.measure`` does under
mixed_float16's loss scaling). Prints the step's increment over what was resident, in kernels.
If gradients were applied as soon as they exist, the increment would not grow with
N; if every gradient waits for the whole backward pass, it grows by one kernel per
layer (plus the update's temporaries, if they too run for every variable at once).
"""

from __future__ import annotations

import subprocess
import sys

CHILD = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
import keras, numpy as np
from keras import layers as L
name, n, width, batch, act = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
spatial, accum, distinct = int(sys.argv[6]), int(sys.argv[7]), sys.argv[8] == "1"
keras.mixed_precision.set_global_policy(sys.argv[9])
classes = {"sgd": "SGD", "sgdm": "SGD", "adam": "Adam", "adamw": "AdamW", "nadam": "Nadam", "adamax": "Adamax",
           "rmsprop": "RMSprop", "adagrad": "Adagrad", "adadelta": "Adadelta", "ftrl": "Ftrl",
           "lion": "Lion", "lamb": "Lamb", "adafactor": "Adafactor"}
kwargs = {"momentum": 0.9} if name in ("sgdm", "rmspropm") else {}
if name.endswith("_ema"):
    name, kwargs = name[:-4], {"use_ema": True}
if name == "rmspropc":
    kwargs = {"centered": True}
if accum > 1:
    kwargs["gradient_accumulation_steps"] = accum
opt = getattr(keras.optimizers, classes[name.rstrip("mc") if name.startswith("rmsprop") else name])(**kwargs)
inp = keras.Input((spatial, spatial, width) if spatial else (width,))
x = inp
weights = 0
for i in range(n):
    w = width + 8 * (i + 1) if distinct else width
    weights += x.shape[-1] * w * 4
    x = L.Dense(w, use_bias=False, activation=None if act == "linear" else act)(x)
if spatial:
    x = L.GlobalAveragePooling2D()(x)
out = L.Dense(10, use_bias=False)(x)
m = keras.Model(inp, out)
m.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
x = np.random.rand(batch, *((spatial, spatial) if spatial else ()), width).astype("float32"); y = np.random.randint(0, 10, size=(batch,))
inner = getattr(m.optimizer, "inner_optimizer", m.optimizer)
def applies():
    done = int(inner.iterations.numpy())
    m.train_on_batch(x, y)
    return int(inner.iterations.numpy()) > done
for _ in range(2 * accum - 1):  # the Nth step applies the update; measure the 2Nth
    m.train_on_batch(x, y)
for _ in range(40):  # mixed_float16: until the loss scale lets a step apply its update
    if int(inner.iterations.numpy()) > 0 or applies():
        break
for _ in range(40):
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    if applies():
        break
peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
k = width * width * 4
print(f"{name:9s} N={n:3d} resident {before / k:6.2f} kernels, step added {(peak - before) / k:6.2f} kernels"
      f" (kernels {weights / 2**20:.1f} MiB, resident {before / 2**20:.1f} MiB)")
"""


def _arg(argv, flag, default):
    return argv[argv.index(flag) + 1] if flag in argv else default


def main(argv: list[str]) -> None:
    layers = [int(v) for v in _arg(argv, "--layers", "4,8,16").split(",")]
    opts = _arg(argv, "--opts", "sgd,adam,adadelta").split(",")
    width, batch = _arg(argv, "--width", "1024"), _arg(argv, "--batch", "8")
    act = _arg(argv, "--act", "linear")
    spatial = _arg(argv, "--spatial", "0")  # > 0: Dense on (spatial, spatial, width) maps
    accum = _arg(argv, "--accum", "1")
    distinct = "1" if "--distinct" in argv else "0"
    precision = _arg(argv, "--precision", "float32")
    for name in opts:
        for n in layers:
            out = subprocess.run([sys.executable, "-c", CHILD, name, str(n), width, batch, act, spatial, accum, distinct,
                                  precision],
                                 capture_output=True, text=True, timeout=300)
            print(out.stdout.strip() or f"{name} N={n}: failed: {out.stderr.strip().splitlines()[-1:]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
