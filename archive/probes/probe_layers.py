"""Single-layer-type probes: a stack of k identical layers, measured and estimated.

Each probe is a small functional model: Input(32x32x16) -> 1x1 Conv2D -> k layers of
one type -> global average pooling -> Dense softmax (a kind named ``1d_...``: a sequence,
Input(1024x32) -> 1x1 Conv1D -> k layers -> GlobalAveragePooling1D -> Dense softmax). It is measured (allocator peak of
one training step, the MEMORY_FACTS.md protocol, in a fresh process) and estimated,
at two depths, so both the per-layer cost (the slope in k) and the transient part
show. Prints one line per probe.

    python benchmarks/probe_layers.py [kind ...] [--batch 32] [--precision float32]
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from probe_child import PREAMBLE, run_child  # noqa: E402  (beside this script)

KINDS = {
    "conv": "L.Conv2D(16, 3, padding='same')",
    "convrelu": "L.Conv2D(16, 3, padding='same', activation='relu')",
    "bn": "L.BatchNormalization()",
    "bnrelu": "[L.BatchNormalization(), L.Activation('relu')]",
    "relu": "L.Activation('relu')",
    "relu6": "L.ReLU(6.0)",
    "dw": "L.DepthwiseConv2D(3, padding='same', use_bias=False)",
    "dense": "L.Dense(16)",
    "swish": "L.Activation('swish')",
    "gelu": "L.Activation('gelu')",
    "hswish": "L.Activation('hard_swish')",
    "sigmoid": "L.Activation('sigmoid')",
    "ln": "L.LayerNormalization(epsilon=1e-6)",
    "dropout": "L.Dropout(0.3)",
    "zpad": "[L.ZeroPadding2D(1), L.Cropping2D(1)]",
    "maxpool": "L.MaxPooling2D(3, strides=1, padding='same')",
    "avgpool": "L.AveragePooling2D(3, strides=1, padding='same')",
    "gconv": "L.Conv2D(16, 7, padding='same', groups=16)",
    "dense4x": "[L.Dense(64), L.Dense(16)]",
    "sep": "L.SeparableConv2D(16, 3, padding='same')",
    "sepblock": "[L.Activation('relu'), L.SeparableConv2D(16, 3, padding='same', use_bias=False), L.BatchNormalization()]",
    "residual": "'residual'",
    "tworelu": "'tworelu'",
    "onerelu": "'onerelu'",
    "concat": "'concat'",
    "se": "'se'",
    "cnblock": "'cnblock'",
    "denseblock": "'denseblock'",
    # Layer types without a rule before stop 21 (counted as keeping input and output).
    "gn": "L.GroupNormalization(groups=4)",
    "unitnorm": "L.UnitNormalization()",
    "gnoise": "L.GaussianNoise(0.1)",
    "gdrop": "L.GaussianDropout(0.1)",
    "adrop": "L.AlphaDropout(0.1)",
    "maximum": "'maximum'",
    "1d_conv": "L.Conv1D(32, 3, padding='same')",
    "1d_zpad": "[L.ZeroPadding1D(1), L.Cropping1D(1)]",
    "1d_up": "[L.UpSampling1D(2), L.AveragePooling1D(2)]",
    "1d_avgpool": "L.AveragePooling1D(3, strides=1, padding='same')",
    "1d_sep": "L.SeparableConv1D(32, 3, padding='same')",
    "1d_dw": "L.DepthwiseConv1D(3, padding='same')",
    "1d_convT": "L.Conv1DTranspose(32, 3, padding='same')",
    "1d_spdrop": "L.SpatialDropout1D(0.2)",
}

CHILD = PREAMBLE + r'''
kind, k, batch, precision = KIND, K, BATCH, PRECISION
keras.config.set_dtype_policy(precision)
shape = (1024, 32) if kind.startswith("1d_") else (32, 32, 16)
inp = keras.Input(shape)
x = (L.Conv1D(32, 1) if len(shape) == 2 else L.Conv2D(16, 1))(inp)
for _ in range(k):
    spec = SPEC
    if spec == "residual":
        y = L.Conv2D(16, 3, padding="same")(x); y = L.Activation("relu")(y); x = L.Add()([x, y])
    elif spec in ("tworelu", "onerelu"):
        # Two Activation layers on one input (NASNet's cells) against one shared layer.
        a = L.Activation("relu")(x); b = L.Activation("relu")(x) if spec == "tworelu" else a
        x = L.Add()([L.Conv2D(16, 3, padding="same")(a), L.Conv2D(16, 3, padding="same")(b)])
    elif spec == "concat":
        y = L.Conv2D(8, 1)(x); x = L.Concatenate()([x, y]); x = L.Conv2D(16, 1)(x)
    elif spec == "cnblock":
        # One ConvNeXt block as keras.applications builds it (convnext.py ConvNeXtBlock).
        from keras.src.applications.convnext import LayerScale
        y = L.Conv2D(16, 7, padding="same", groups=16)(x); y = L.LayerNormalization(epsilon=1e-6)(y)
        y = L.Dense(64)(y); y = L.Activation("gelu")(y); y = L.Dense(16)(y)
        y = LayerScale(1e-6, 16)(y); x = L.Add()([x, L.Activation("linear")(y)])
    elif spec == "denseblock":
        # One DenseNet conv block (densenet.py conv_block): BN-ReLU-1x1 conv-BN-ReLU-3x3 conv, concat.
        y = L.BatchNormalization(epsilon=1.001e-5)(x); y = L.Activation("relu")(y); y = L.Conv2D(32, 1, use_bias=False)(y)
        y = L.BatchNormalization(epsilon=1.001e-5)(y); y = L.Activation("relu")(y)
        y = L.Conv2D(8, 3, padding="same", use_bias=False)(y); x = L.Concatenate()([x, y])
    elif spec == "maximum":
        x = L.Maximum()([x, L.Conv2D(16, 3, padding="same")(x)])
    elif spec == "se":
        s = L.GlobalAveragePooling2D(keepdims=True)(x); s = L.Conv2D(16, 1, activation="sigmoid")(s); x = L.Multiply()([x, s])
    else:
        for layer in (spec if isinstance(spec, list) else [spec]):
            x = layer(x)
x = (L.GlobalAveragePooling1D() if len(shape) == 2 else L.GlobalAveragePooling2D())(x)
out = L.Dense(10, activation="softmax")(x)
model = keras.Model(inp, out)
profile = profile_model(model)
est = estimate_memory(profile, TrainingConfig(batch_size=batch, optimizer="sgd", precision=precision))
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
xb = np.random.rand(batch, *shape).astype("float32"); yb = np.random.randint(0, 10, size=(batch,))
model.train_on_batch(xb, yb)
tf.config.experimental.reset_memory_stats("CPU:0")
model.train_on_batch(xb, yb)
peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
print("RESULT", json.dumps({"measured": peak, "estimated": est.peak_bytes, "phase": est.peak_phase,
                            "unknown": sorted(profile.unknown_layer_types)}))
'''


def run(kind: str, k: int, batch: int, precision: str) -> dict:
    code = CHILD.replace("ROOT", repr(ROOT)).replace("KIND", repr(kind)).replace("SPEC", KINDS[kind])
    code = code.replace("K, BATCH, PRECISION", f"{k}, {batch}, {precision!r}")
    return run_child(code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*", default=list(KINDS))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--precision", default="float32")
    args = parser.parse_args()
    unit = 32 * 32 * 16 * 4 * args.batch  # one float32 feature map of the stack
    print(f"{'probe':10s} {'k':>2s} {'measured':>9s} {'estimated':>9s} {'error':>7s}  (MiB; a feature map is "
          f"{unit / 2**20:.2f} MiB, a 1-D kind's {2 * unit / 2**20:.2f})")
    for kind in args.kinds:
        for k in (2, 6):
            r = run(kind, k, args.batch, args.precision)
            err = (r["estimated"] - r["measured"]) / r["measured"]
            print(f"{kind:10s} {k:2d} {r['measured'] / 2**20:9.2f} {r['estimated'] / 2**20:9.2f} {err * 100:+6.1f}%  {r['phase']}"
                  + (f"  (no rule: {', '.join(r['unknown'])})" if r["unknown"] else ""), flush=True)


if __name__ == "__main__":
    main()
