"""Does the first training step copy the optimizer's slots? One 64 MiB Dense kernel.

    python benchmarks/probe_first_step.py OPTIMIZER [OPTIONS_AS_PYTHON_DICT] [--build]

Builds ``Dense(4096, use_bias=False)`` on 4096 inputs (a 64 MiB kernel) in this process
(one inter-op and one intra-op thread), compiles it with OPTIMIZER, and prints, in
kernels: what the optimizer's slots hold after ``optimizer.build`` (only with
``--build``; otherwise Keras makes them inside the first ``train_on_batch``), what is
held after the first and second steps, and each step's peak above what was held when it
began. A slot copied by the first step's update (stop 9's traces of whole models) would
show as one more kernel in the first step's peak than its slots and the second step's
peak explain. Example: ``python benchmarks/probe_first_step.py rmsprop "{'momentum': 0.9}"``.
"""

from __future__ import annotations

import ast
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv: list[str]) -> None:
    import keras
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    args = [a for a in argv if a != "--build"]
    name, options = args[0], (ast.literal_eval(args[1]) if len(args) > 1 else {})
    kernel_mib = 4096 * 4096 * 4 / 2**20

    def held() -> float:
        return tf.config.experimental.get_memory_info("CPU:0")["current"] / 2**20

    inputs = keras.Input((4096,))
    model = keras.Model(inputs, keras.layers.Dense(4096, use_bias=False)(inputs))
    start = held()
    optimizer = keras.optimizers.get({"class_name": name, "config": options})
    if "--build" in argv:
        optimizer.build(model.trainable_variables)
    after_build = held()
    model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
    x = tf.zeros((8, 4096))
    peaks, after = [], []
    for _ in range(2):
        tf.config.experimental.reset_memory_stats("CPU:0")
        began = held()
        model.train_on_batch(x, x)
        peaks.append(tf.config.experimental.get_memory_info("CPU:0")["peak"] / 2**20 - began)
        after.append(held())
    k = kernel_mib
    print(f"{name} {options}: slots after build {(after_build - start) / k:.2f} kernels, held after step 1 / 2 "
          f"{(after[0] - start) / k:.2f} / {(after[1] - start) / k:.2f}, step peaks above their start "
          f"{peaks[0] / k:.2f} / {peaks[1] / k:.2f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
