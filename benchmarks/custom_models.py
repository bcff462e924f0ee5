"""Writes the validation set's own-model files: architectures that are not Keras applications.

    python benchmarks/custom_models.py [--out calc/data/models]

Users bring their own models as ``.keras`` files; the catalogue cases never exercise
that path. These five are the kinds people build themselves: a plain CNN with a large
Flatten -> Dense head on a non-square one-channel input (seed 002's shape, 50x180x1),
a small U-Net (Conv2DTranspose, UpSampling2D, Concatenate, per-pixel softmax), a
residual network with SeparableConv2D and PReLU, a ConvMixer (DepthwiseConv2D, GELU,
LayerNormalization) and a 1-D convolutional network on a waveform.

Weights are saved as zeros: the memory of a step does not depend on their values, and
zeros compress, so each file stays a few KiB. The files are data for
``calc/data/validation_custom_cpu.json`` (``benchmarks/measure_validation.py --custom``).
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _plain_cnn(keras):
    L = keras.layers
    inp = keras.Input((50, 180, 1))
    x = L.Conv2D(32, 3, padding="same", activation="relu")(inp)
    x = L.MaxPooling2D()(x)
    x = L.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = L.MaxPooling2D()(x)
    x = L.Conv2D(128, 3, padding="same")(x)
    x = L.BatchNormalization()(x)
    x = L.LeakyReLU()(x)
    x = L.MaxPooling2D()(x)
    x = L.Flatten()(x)
    x = L.Dropout(0.5)(x)
    x = L.Dense(256, activation="relu")(x)
    out = L.Dense(10, activation="softmax")(x)
    return keras.Model(inp, out, name="plain_cnn")


def _unet(keras):
    L = keras.layers

    def block(x, filters):
        for _ in range(2):
            x = L.Conv2D(filters, 3, padding="same", use_bias=False)(x)
            x = L.BatchNormalization()(x)
            x = L.ReLU()(x)
        return x

    inp = keras.Input((128, 128, 3))
    skips, x = [], inp
    for filters in (16, 32, 64):
        x = block(x, filters)
        skips.append(x)
        x = L.MaxPooling2D()(x)
    x = block(x, 128)
    for i, (filters, skip) in enumerate(zip((64, 32, 16), reversed(skips))):
        if i % 2 == 0:
            x = L.Conv2DTranspose(filters, 2, strides=2, padding="same")(x)
        else:
            x = L.UpSampling2D()(x)
        x = L.Concatenate()([x, skip])
        x = block(x, filters)
    out = L.Conv2D(4, 1, activation="softmax")(x)
    return keras.Model(inp, out, name="unet_small")


def _residual(keras):
    L = keras.layers
    inp = keras.Input((96, 96, 3))
    x = L.Conv2D(32, 3, strides=2, padding="same")(inp)
    x = L.BatchNormalization()(x)
    x = L.PReLU(shared_axes=[1, 2])(x)
    for filters, stride in ((32, 1), (64, 2), (64, 1), (128, 2)):
        shortcut = x
        y = L.SeparableConv2D(filters, 3, strides=stride, padding="same")(x)
        y = L.BatchNormalization()(y)
        y = L.Activation("relu")(y)
        y = L.SeparableConv2D(filters, 3, padding="same")(y)
        y = L.BatchNormalization()(y)
        if stride != 1 or shortcut.shape[-1] != filters:
            shortcut = L.Conv2D(filters, 1, strides=stride)(shortcut)
        x = L.Activation("relu")(L.Add()([y, shortcut]))
    x = L.GlobalAveragePooling2D()(x)
    out = L.Dense(100, activation="softmax")(x)
    return keras.Model(inp, out, name="residual_sep")


def _convmixer(keras):
    L = keras.layers
    inp = keras.Input((64, 64, 3))
    x = L.Conv2D(128, 4, strides=4)(inp)
    x = L.Activation("gelu")(x)
    x = L.BatchNormalization()(x)
    for _ in range(4):
        y = L.DepthwiseConv2D(5, padding="same")(x)
        y = L.Activation("gelu")(y)
        y = L.LayerNormalization()(y)
        x = L.Add()([x, y])
        x = L.Conv2D(128, 1)(x)
        x = L.Activation("gelu")(x)
        x = L.BatchNormalization()(x)
    x = L.GlobalAveragePooling2D()(x)
    out = L.Dense(10, activation="softmax")(x)
    return keras.Model(inp, out, name="convmixer")


def _conv1d(keras):
    L = keras.layers
    inp = keras.Input((8000, 1))
    x = inp
    for filters in (16, 32, 64, 128):
        x = L.Conv1D(filters, 9, padding="same", activation="relu")(x)
        x = L.BatchNormalization()(x)
        x = L.MaxPooling1D(4)(x)
    x = L.GlobalAveragePooling1D()(x)
    x = L.Dense(64, activation="relu")(x)
    out = L.Dense(12, activation="softmax")(x)
    return keras.Model(inp, out, name="conv1d_audio")


BUILDERS = {"plain_cnn": _plain_cnn, "unet_small": _unet, "residual_sep": _residual,
            "convmixer": _convmixer, "conv1d_audio": _conv1d}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "calc", "data", "models"))
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np

    os.makedirs(args.out, exist_ok=True)
    for name, build in BUILDERS.items():
        keras.backend.clear_session()
        model = build(keras)
        model.set_weights([np.zeros(w.shape, w.dtype) for w in model.get_weights()])
        path = os.path.join(args.out, f"{name}.keras")
        model.save(path)
        print(f"{path}: {model.count_params():,} parameters, {os.path.getsize(path):,} bytes")


if __name__ == "__main__":
    main()
