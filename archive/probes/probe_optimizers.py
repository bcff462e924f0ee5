"""Optimizer memory, measured on one large variable.

    python benchmarks/probe_optimizers.py [sgd sgdm adam ...]

A model with one 4096x4096 Dense kernel (64 MiB) and a tiny head, batch 8, the
MEMORY_FACTS.md protocol (one thread, warm-up step, reset, one step). Prints, in
units of the kernel's size, what was resident before the step (weights + slots) and
what the step added at its peak (the gradient and the update's temporaries). Each
optimizer runs in a fresh process.
"""

from __future__ import annotations

import subprocess
import sys

OPTIMIZERS = ["sgd", "sgdm", "adam", "adamw", "nadam", "adamax", "rmsprop", "rmspropm", "adagrad", "adadelta",
              "ftrl", "lion", "lamb", "adafactor"]

CHILD = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
import keras, numpy as np
from keras import layers as L
name = sys.argv[1]
classes = {"sgd": "SGD", "sgdm": "SGD", "adam": "Adam", "adamw": "AdamW", "nadam": "Nadam", "adamax": "Adamax",
           "rmsprop": "RMSprop", "rmspropm": "RMSprop", "adagrad": "Adagrad", "adadelta": "Adadelta", "ftrl": "Ftrl",
           "lion": "Lion", "lamb": "Lamb", "adafactor": "Adafactor"}
kwargs = {"momentum": 0.9} if name in ("sgdm", "rmspropm") else {}
opt = getattr(keras.optimizers, classes[name])(**kwargs)
inp = keras.Input((4096,))
out = L.Dense(10, use_bias=False)(L.Dense(4096, use_bias=False)(inp))
m = keras.Model(inp, out)
m.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
x = np.random.rand(8, 4096).astype("float32"); y = np.random.randint(0, 10, size=(8,))
m.train_on_batch(x, y)
tf.config.experimental.reset_memory_stats("CPU:0")
before = tf.config.experimental.get_memory_info("CPU:0")["current"]
m.train_on_batch(x, y)
peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
print(f"{name:10s} resident {before / 2**26:.2f} kernels, step added {(peak - before) / 2**26:.2f} kernels")
"""


def main(names: list[str]) -> None:
    for name in names or OPTIMIZERS:
        out = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True, timeout=300)
        print(out.stdout.strip() or f"{name}: failed: {out.stderr.strip().splitlines()[-1:]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
