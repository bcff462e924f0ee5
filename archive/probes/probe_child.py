"""What every probe's child process starts with: TensorFlow on one inter-op and one
intra-op thread (the measurement protocol, ../shared/MEMORY_FACTS.md), Keras, and the
engine. A probe's CHILD code is ``PREAMBLE`` followed by its own lines; ``ROOT`` is
substituted by the probe before it runs the child."""

PREAMBLE = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
import keras, numpy as np
from keras import layers as L
sys.path.insert(0, ROOT)
from calc.keras_adapter import profile_model
from calc.estimate import estimate_memory
from calc.types import TrainingConfig
'''


# A frozen MobileNetV2-style stage (benchmarks/probe_frozen.py, benchmarks/bfc_sim.py):
# given ``steps`` (names below), ``size``, ``keras`` and ``L`` (keras.layers), defines
# ``backbone`` (frozen, called with training=False) and ``model`` (it + a new head).
FROZEN_STAGE = r'''
inp = keras.Input((size, size, 32)); x = inp
for s in steps:
    x = {"expand": lambda: L.Conv2D(96, 1, use_bias=False),
         "bn": lambda: L.BatchNormalization(),
         "relu6": lambda: L.ReLU(6.0),
         "relu": lambda: L.Activation("relu"),
         "pad": lambda: L.ZeroPadding2D(((0, 1), (0, 1))),
         "dw2": lambda: L.DepthwiseConv2D(3, strides=2, use_bias=False),
         "dw1": lambda: L.DepthwiseConv2D(3, padding="same", use_bias=False),
         "conv3": lambda: L.Conv2D(96, 3, padding="same"),
         "project": lambda: L.Conv2D(24, 1, use_bias=False)}[s]()(x)
backbone = keras.Model(inp, x)
backbone.trainable = False
i2 = keras.Input((size, size, 32))
y = backbone(i2, training=False)
out = L.Dense(10, activation="softmax")(L.GlobalAveragePooling2D()(y))
model = keras.Model(i2, out)
'''

# The stages probed: layer names in order (expand 1x1 -> BN -> ReLU6 -> pad -> depthwise s2 -> BN -> ReLU6 -> project -> BN).
FROZEN_VARIANTS = {
    "mbv2": "expand bn relu6 pad dw2 bn relu6 project bn",
    "expand": "expand",
    "expand_bn": "expand bn",
    "expand_bn_relu6": "expand bn relu6",
    "expand_relu6": "expand relu6",
    "expand_relu6_pad": "expand relu6 pad",
    "expand_relu6_pad_dw2": "expand relu6 pad dw2",
    "expand_relu6_dw1": "expand relu6 dw1",
    "expand_relu_conv3": "expand relu conv3",
}

# One warm-up step, reset, one measured step of ``model`` on a random batch: defines
# ``before`` (allocator current before the step) and ``peak`` (its peak), CPU:0.
FROZEN_STEP = r'''
model.compile(optimizer=globals().get("optimizer", "sgd"), loss="sparse_categorical_crossentropy")
xb = np.random.rand(batch, *model.input_shape[1:]).astype("float32"); yb = np.random.randint(0, 10, size=(batch,))
model.train_on_batch(xb, yb)
tf.config.experimental.reset_memory_stats("CPU:0")
before = tf.config.experimental.get_memory_info("CPU:0")["current"]
model.train_on_batch(xb, yb)
peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
'''


def run_child(code: str, timeout: float = 300) -> dict:
    """Runs a probe's child code in a fresh Python process and returns its ``RESULT {json}``.

    Raises RuntimeError with the end of the child's stderr when no result came back.
    """
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(out.stderr[-2000:])


def last_line(exc: Exception) -> list[str]:
    """The last line of a failed child's stderr, as the probes print it."""
    return str(exc).strip().splitlines()[-1:]
