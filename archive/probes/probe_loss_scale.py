"""Does the measured step apply its update under mixed_float16?

    python benchmarks/probe_loss_scale.py [steps]

ResNet50V2 at 64 px, batch 8, 1000 classes, SGD momentum, mixed_float16, 1x1 threads.
After each train_on_batch prints LossScaleOptimizer's dynamic scale, the inner
optimizer's iteration count (0 = no update applied yet) and the allocator's current
bytes. Found (TF 2.21, Keras 3.15): the scale halves on every one of the first steps
(32768 -> 16384 -> 8192 ...) and iterations stays 0: the gradients overflow float16
and the update is skipped, so the validation protocol's second step measures a
skipped update under mixed_float16.
"""

import os
import sys

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)

import keras  # noqa: E402


def main(steps: int) -> None:
    keras.config.set_dtype_policy("mixed_float16")
    m = keras.applications.ResNet50V2(weights=None, input_shape=(64, 64, 3), classes=1000)
    m.compile(optimizer=keras.optimizers.SGD(momentum=0.9), loss="sparse_categorical_crossentropy")
    x = np.random.rand(8, 64, 64, 3).astype("float32")
    y = np.random.randint(0, 1000, size=(8,))
    print("before any step: current", round(tf.config.experimental.get_memory_info("CPU:0")["current"] / 2**20, 1), "MiB")
    for i in range(steps):
        m.train_on_batch(x, y)
        o = m.optimizer
        print(f"step {i + 1}: scale {float(o.dynamic_scale.numpy()):.0f}, inner iterations "
              f"{int(o.inner_optimizer.iterations.numpy())}, current "
              f"{tf.config.experimental.get_memory_info('CPU:0')['current'] / 2**20:.1f} MiB", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
