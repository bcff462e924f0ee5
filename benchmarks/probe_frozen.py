"""Forward-pass peaks of a frozen backbone (inference mode), measured and estimated.

    python benchmarks/probe_frozen.py [variant ...] [--batch 16] [--size 112]

A "backbone" functional model of one MobileNetV2-style inverted-residual stage (or a
variant below) on a size x size x 32 input, frozen (trainable=False) and called with
training=False under a GlobalAveragePooling + Dense head, SGD. Each variant is
measured (the MEMORY_FACTS.md protocol, a fresh process, 1x1 threads) and estimated
by the engine on the same model. Prints MiB and the unit: one float32 96-channel map.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VARIANTS = {
    # expand 1x1 -> BN -> ReLU6 -> pad -> depthwise s2 -> BN -> ReLU6 -> project -> BN
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

CHILD = PREAMBLE + r'''
steps, batch, size = STEPS.split(), BATCH, SIZE
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
profile = profile_model(model, backbone=backbone)
est = estimate_memory(profile, TrainingConfig(batch_size=batch, optimizer="sgd", train_mode="frozen_backbone"))
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
xb = np.random.rand(batch, size, size, 32).astype("float32"); yb = np.random.randint(0, 10, size=(batch,))
model.train_on_batch(xb, yb)
tf.config.experimental.reset_memory_stats("CPU:0")
before = tf.config.experimental.get_memory_info("CPU:0")["current"]
model.train_on_batch(xb, yb)
peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
print("RESULT", json.dumps({"measured": peak - before, "estimated": est.peak_bytes - est.weights_bytes - est.optimizer_state_bytes, "phase": est.peak_phase}))
'''


def main(argv: list[str]) -> None:
    batch = int(argv[argv.index("--batch") + 1]) if "--batch" in argv else 16
    size = int(argv[argv.index("--size") + 1]) if "--size" in argv else 112
    names = [a for a in argv if a in VARIANTS] or list(VARIANTS)
    unit = size * size * 96 * 4 * batch / 2**20
    print(f"step above resident, MiB (one 96-channel map = {unit:.1f} MiB; input = {unit / 3:.1f} MiB)")
    for name in names:
        code = (CHILD.replace("ROOT", repr(ROOT)).replace("STEPS", repr(VARIANTS[name]))
                .replace("BATCH", str(batch)).replace("SIZE", str(size)))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
        if line is None:
            print(f"{name}: failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(line[7:])
        print(f"{name:22s} measured {r['measured'] / 2**20:7.1f}  estimated {r['estimated'] / 2**20:7.1f}"
              f"  ({r['measured'] / 2**20 / unit:4.2f} vs {r['estimated'] / 2**20 / unit:4.2f} maps)  {r['phase']}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
