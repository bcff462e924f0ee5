"""What making one variable costs the allocator, per initializer, and Adam's slots.

    python benchmarks/probe_init.py [INITIALIZER ...]     # default: glorot_uniform zeros he_normal

Each run is a fresh process on one inter-op and one intra-op thread: a Dense(4096) layer
without bias on a 4096-wide input (a 64 MiB kernel) is built with the given
``kernel_initializer``; the allocator's current and peak after the build show how many
kernel-sized tensors existed at once while the variable was made. Then one Adam step
(which makes the two slots) prints current and peak again.

Found (TF 2.21, Keras 3.15, CPU): glorot_uniform and he_normal peak at 192 MiB (the
random draw, its scaled copy and the variable), zeros at 64 (the variable only); after
the Adam step 192 MiB stay (kernel and two zero-initialized slots).
"""

from __future__ import annotations

import subprocess
import sys

CHILD = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
import keras, numpy as np
MIB = 2 ** 20
init = sys.argv[1]
inp = keras.Input((4096,))
hidden = keras.layers.Dense(4096, kernel_initializer=init, use_bias=False)(inp)
info = tf.config.experimental.get_memory_info("CPU:0")
print(f"{init:16s} 64 MiB kernel built: current {info['current'] / MIB:6.1f} MiB, peak {info['peak'] / MIB:6.1f} MiB", end="")
model = keras.Model(inp, keras.layers.Dense(10)(hidden))
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
x = np.random.rand(8, 4096).astype("float32"); y = np.random.randint(0, 10, size=(8,))
tf.config.experimental.reset_memory_stats("CPU:0")
model.train_on_batch(x, y)
info = tf.config.experimental.get_memory_info("CPU:0")
print(f"; after one Adam step: current {info['current'] / MIB:6.1f} MiB, peak {info['peak'] / MIB:6.1f} MiB")
'''


def main(argv: list[str]) -> None:
    for init in argv or ["glorot_uniform", "zeros", "he_normal"]:
        out = subprocess.run([sys.executable, "-c", CHILD, init], capture_output=True, text=True, timeout=300)
        print(out.stdout.strip() or f"{init}: failed: {out.stderr.strip().splitlines()[-1:]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
