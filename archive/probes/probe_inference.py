"""Frozen (inference-mode) stacks of layers: measured step vs the engine, per variant.

    python benchmarks/probe_inference.py [--size 160] [--channels 3] [--batches 16,32] [--precision P] [--optimizer O] VARIANT ...

A variant is a sequence of layer tokens run as a frozen backbone (``training=False``)
under a trainable GlobalAveragePooling + Dense(10) head, SGD, the measurement protocol
(one warm-up step, reset, one step; 1 inter-op and 1 intra-op thread), one fresh
process per point. Tokens:

    conv:F:K:S:P:B   Conv2D(F, K, strides=S, padding "v"alid / "s"ame, use_bias=B (0/1))
    bn               BatchNormalization          relu   ReLU
    pool             MaxPooling2D(3, strides=2)  sep:F  SeparableConv2D(F, 3, padding="same")
    xblock:F         Xception's entry block (strided 1x1 residual; two separable convs, pool; Add)
    fork:E           two branches, each Conv2D(E x C, 1) then Conv2D(C, 1), added
    app:NAME:LAYER   (alone) keras.applications.NAME without its top, cut after LAYER ("all": whole)
    dense:G          a DenseNet layer: x = concat(x, conv3x3(G)(relu(bn(conv1x1(4G)(relu(bn(x)))))))

Named variants are in VARIANTS; a variant may also be given inline, tokens joined by
commas. Prints the step above the resident bytes, measured and as the engine predicts
(walk alone, and the engine's final estimate with the allocator simulation).
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from probe_child import FROZEN_STEP, PREAMBLE, last_line, run_child  # noqa: E402

MIB = 1 << 20

# The InceptionV3 stem (conv2d_bn: no bias, BatchNormalization(scale=False) in Keras;
# scale on here), and the same convolutions written VGG-style (bias, ReLU, no BN).
VARIANTS = {
    "inception_stem": "conv:32:3:2:v:0 bn relu conv:32:3:1:v:0 bn relu conv:64:3:1:s:0 bn relu pool",
    "stem_bias": "conv:32:3:2:v:1 relu conv:32:3:1:v:1 relu conv:64:3:1:s:1 relu pool",
    "stem_nobn": "conv:32:3:2:v:0 relu conv:32:3:1:v:0 relu conv:64:3:1:s:0 relu pool",
    "stem_2conv": "conv:32:3:2:v:0 bn relu conv:32:3:1:v:0 bn relu",
    "stem_3conv": "conv:32:3:2:v:0 bn relu conv:32:3:1:v:0 bn relu conv:64:3:1:s:0",
    # DenseNet121's first block (its stem pads before the pool; this one does not).
    "densenet_block": "conv:64:7:2:s:0 bn relu pool " + "dense:32 " * 6,
    "densenet_2": "conv:64:7:2:s:0 bn relu pool dense:32 dense:32",
}

CHILD = PREAMBLE + r'''
tokens, size, channels, batch, precision, optimizer = TOKENS, SIZE, CHANNELS, BATCH, PRECISION, OPTIMIZER
keras.mixed_precision.set_global_policy(precision)

def apply(tok, x):
    kind, *a = tok.split(":")
    if kind == "conv":
        f, k, s, p, b = a
        return L.Conv2D(int(f), int(k), strides=int(s), padding="valid" if p == "v" else "same", use_bias=b == "1")(x)
    if kind == "sep":
        return L.SeparableConv2D(int(a[0]), 3, padding="same", use_bias=False)(x)
    if kind == "fork":  # two branches, each 1x1 conv to E x the channels then back; Add
        c, e = x.shape[-1], int(a[0])
        branches = [L.Conv2D(c, 1, use_bias=False)(L.Conv2D(e * c, 1, use_bias=False)(x)) for _ in range(2)]
        return L.Add()(branches)
    if kind == "xblock":  # Xception's entry block: a strided 1x1 residual beside two separable convs
        f = int(a[0])
        residual = L.BatchNormalization()(L.Conv2D(f, 1, strides=2, padding="same", use_bias=False)(x))
        y = L.BatchNormalization()(L.SeparableConv2D(f, 3, padding="same", use_bias=False)(x))
        y = L.BatchNormalization()(L.SeparableConv2D(f, 3, padding="same", use_bias=False)(L.ReLU()(y)))
        return L.Add()([L.MaxPooling2D(3, strides=2, padding="same")(y), residual])
    if kind == "dense":
        g = int(a[0])
        y = L.ReLU()(L.BatchNormalization()(x))
        y = L.ReLU()(L.BatchNormalization()(L.Conv2D(4 * g, 1, use_bias=False)(y)))
        return L.Concatenate()([x, L.Conv2D(g, 3, padding="same", use_bias=False)(y)])
    return {"bn": L.BatchNormalization, "relu": L.ReLU, "pool": lambda: L.MaxPooling2D(3, strides=2)}[kind]()(x)

if tokens[0].startswith("app:"):  # a catalogue model cut after one of its layers
    _, app_name, cut = tokens[0].split(":")
    app = getattr(keras.applications, app_name)(weights=None, include_top=False, input_shape=(size, size, channels))
    backbone = keras.Model(app.input, app.output if cut == "all" else app.get_layer(cut).output)
else:
    inp = keras.Input((size, size, channels)); x = inp
    for tok in tokens:
        x = apply(tok, x)
    backbone = keras.Model(inp, x)
backbone.trainable = False
i2 = keras.Input((size, size, channels))
out = L.Dense(10, activation="softmax")(L.GlobalAveragePooling2D()(backbone(i2, training=False)))
model = keras.Model(i2, out)
config = TrainingConfig(batch_size=batch, optimizer=optimizer, train_mode="frozen_backbone", precision=precision)
est = estimate_memory(profile_model(model, backbone=backbone), config)
''' + FROZEN_STEP + r'''resident = est.weights_bytes + est.optimizer_state_bytes
print("RESULT", json.dumps({"measured": peak - before, "walk": est.peak_bytes - est.allocator_bytes - resident,
                            "engine": est.peak_bytes - resident, "phase": est.peak_phase}))
'''


def run(tokens: list[str], size: int, channels: int, batch: int, precision: str = "float32",
        optimizer: str = "sgd") -> dict | None:
    code = (CHILD.replace("ROOT", repr(ROOT)).replace("TOKENS", repr(tokens)).replace("SIZE", str(size))
            .replace("CHANNELS", str(channels)).replace("BATCH", str(batch)).replace("PRECISION", repr(precision))
            .replace("OPTIMIZER", repr(optimizer)))
    try:
        return run_child(code, timeout=600)
    except RuntimeError as exc:
        print(f"  failed: {last_line(exc)}", flush=True)
        return None


def main(argv: list[str]) -> None:
    def option(name: str, default: str) -> str:
        if name in argv:
            i = argv.index(name)
            value = argv[i + 1]
            del argv[i:i + 2]
            return value
        return default

    size = int(option("--size", "160"))
    channels = int(option("--channels", "3"))
    batches = [int(b) for b in option("--batches", "32").split(",")]
    precision = option("--precision", "float32")
    optimizer = option("--optimizer", "sgd")
    names = argv or list(VARIANTS)
    for batch in batches:
        for name in names:
            tokens = (VARIANTS[name] if name in VARIANTS else name.replace(",", " ")).split()
            r = run(tokens, size, channels, batch, precision, optimizer)
            if r:
                print(f"{name:16s} b{batch:<4d} {size}px  measured {r['measured'] / MIB:7.1f}  walk {r['walk'] / MIB:7.1f}"
                      f"  engine {r['engine'] / MIB:7.1f} MiB  (step above resident; peak at {r['phase']})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
