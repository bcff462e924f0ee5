"""Writes the validation set's own-model files: architectures that are not Keras applications.

    python tools/custom_models.py [--out calc/data/models] [--only NAME ...]

Users bring their own models as ``.keras`` files; the catalogue cases never exercise
that path. These are the kinds people build themselves:

- image networks: a plain CNN with a large Flatten -> Dense head on a non-square
  one-channel input (50x180x1), a small U-Net (Conv2DTranspose, UpSampling2D,
  Concatenate, per-pixel softmax), a residual network with SeparableConv2D and PReLU, a
  ConvMixer (DepthwiseConv2D, GELU, LayerNormalization), Conv(relu) ->
  BatchNormalization blocks, an Inception-like fan-out, the Keras MNIST convnet, ResNet-20
  for CIFAR, a convolutional autoencoder, the image-classification-from-scratch network
  with its augmentation layers inside, a transfer-learning file with MobileNetV2 nested in
  it, the Keras DCGAN discriminator and the Keras Oxford-pets segmentation network;
- a multilayer perceptron and a tabular Dense -> BatchNormalization network;
- attention and text networks: a small ViT and a text transformer (MultiHeadAttention,
  with and without dropout), a text CNN (Embedding, GlobalMaxPooling1D);
- recurrent networks: the Keras IMDB example's two bidirectional LSTMs on 200 token ids,
  a GRU text classifier and a two-layer LSTM forecaster on 120 steps of 16 features;
- 1-D networks: a convolutional network on a waveform, an ECG-style Conv1D ->
  BatchNormalization -> ReLU -> MaxPooling1D classifier, a 1-D U-Net (UpSampling1D,
  Conv1DTranspose, ZeroPadding1D, Cropping1D, Concatenate), one with BatchNormalization
  and Conv1DTranspose, a keyword-spotting network (strided Conv1D, SeparableConv1D,
  DepthwiseConv1D, AveragePooling1D, SpatialDropout1D, GaussianNoise, GlobalMaxPooling1D),
  a temporal convolutional network (dilated causal Conv1D, residual Add), a token-wise MLP
  (LayerNormalization, Dense with GELU, residual Add) on 256 steps, a WaveNet-style network
  (gated causal dilated Conv1D, residual and skip sums) and a dilated "same"-padded Conv1D
  stack with BatchNormalization labelling every step.

Weights are saved as zeros: the memory of a step does not depend on their values, and
zeros compress, so git stores each file in a few KiB (on disk they are 0.1-22 MB). The files are data for
``calc/data/validation_custom_cpu.json`` (``tools/measure_validation.py --custom``).
"""

from __future__ import annotations

import argparse
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def _vgg_bn(keras):
    """Conv(relu) -> BatchNormalization blocks, as many tutorials write them."""
    L = keras.layers
    inp = keras.Input((96, 96, 3))
    x = inp
    for filters in (32, 64, 128):
        x = L.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = L.BatchNormalization()(x)
        x = L.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = L.BatchNormalization()(x)
        x = L.MaxPooling2D()(x)
        x = L.SpatialDropout2D(0.1)(x)
    x = L.GlobalMaxPooling2D()(x)
    x = L.Dense(128, activation="elu")(x)
    out = L.Dense(20, activation="softmax")(x)
    return keras.Model(inp, out, name="vgg_bn")


def _inception_mini(keras):
    """Blocks that fan out into three branches and concatenate (Inception-like)."""
    L = keras.layers
    inp = keras.Input((80, 80, 3))
    x = L.Conv2D(32, 3, strides=2, padding="same", activation="relu")(inp)
    for filters in (16, 32):
        a = L.Conv2D(filters, 1, activation="relu")(x)
        b = L.Conv2D(filters, 3, padding="same", activation="relu")(L.Conv2D(filters, 1, activation="relu")(x))
        c = L.Conv2D(filters, 1, activation="relu")(L.AveragePooling2D(3, strides=1, padding="same")(x))
        x = L.Concatenate()([a, b, c])
        x = L.BatchNormalization()(x)
    x = L.GlobalAveragePooling2D()(x)
    out = L.Dense(10, activation="softmax")(x)
    return keras.Model(inp, out, name="inception_mini")


def _mlp(keras):
    """Fully connected layers on a flattened image: large Dense kernels, small activations."""
    L = keras.layers
    inp = keras.Input((32, 32, 3))
    x = L.Flatten()(inp)
    x = L.Dense(1024, activation="relu")(x)
    x = L.Dropout(0.2)(x)
    x = L.Dense(1024, activation="tanh")(x)
    x = L.LayerNormalization()(x)
    out = L.Dense(10, activation="softmax")(x)
    return keras.Model(inp, out, name="mlp")


def _mnist_cnn(keras):
    """The Keras MNIST convnet example (28x28x1)."""
    L = keras.layers
    inp = keras.Input((28, 28, 1))
    x = L.Conv2D(32, 3, activation="relu")(inp)
    x = L.Conv2D(64, 3, activation="relu")(x)
    x = L.Dropout(0.25)(L.MaxPooling2D()(x))
    x = L.Dropout(0.5)(L.Dense(128, activation="relu")(L.Flatten()(x)))
    return keras.Model(inp, L.Dense(10, activation="softmax")(x), name="mnist_cnn")


def _resnet20(keras):
    """ResNet-20 for 32x32 CIFAR images: three stages of three basic blocks."""
    L = keras.layers
    inp = keras.Input((32, 32, 3))
    x = L.ReLU()(L.BatchNormalization()(L.Conv2D(16, 3, padding="same", use_bias=False)(inp)))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(3):
            stride = 2 if stage and not block else 1
            y = L.ReLU()(L.BatchNormalization()(L.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)))
            y = L.BatchNormalization()(L.Conv2D(filters, 3, padding="same", use_bias=False)(y))
            if stride != 1:
                x = L.BatchNormalization()(L.Conv2D(filters, 1, strides=stride, use_bias=False)(x))
            x = L.ReLU()(L.Add()([x, y]))
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inp, L.Dense(10, activation="softmax")(x), name="resnet20")


def _autoencoder(keras):
    """A convolutional encoder-decoder with strided convolutions and Conv2DTranspose."""
    L = keras.layers
    inp = keras.Input((64, 64, 3))
    x = inp
    for filters in (32, 64, 128):
        x = L.Conv2D(filters, 3, strides=2, padding="same", activation="relu")(x)
    for filters in (128, 64, 32):
        x = L.Conv2DTranspose(filters, 3, strides=2, padding="same", activation="relu")(x)
    return keras.Model(inp, L.Conv2D(8, 3, padding="same", activation="softmax")(x), name="autoencoder")


def _vit_tiny(keras):
    """The Keras ViT example's shape: 6 px patches of a 72x72 image, 8 blocks of 4-head attention."""
    L = keras.layers
    inp = keras.Input((72, 72, 3))
    x = L.Conv2D(64, 6, strides=6)(inp)  # patch embedding: 144 patches of 64 values
    x = L.Reshape((144, 64))(x)
    for _ in range(8):
        y = L.LayerNormalization(epsilon=1e-6)(x)
        y = L.MultiHeadAttention(num_heads=4, key_dim=64, dropout=0.1)(y, y)
        x = L.Add()([y, x])
        y = L.LayerNormalization(epsilon=1e-6)(x)
        y = L.Dense(128, activation="gelu")(y)
        y = L.Dropout(0.1)(y)
        y = L.Dense(64, activation="gelu")(y)
        y = L.Dropout(0.1)(y)
        x = L.Add()([y, x])
    x = L.LayerNormalization(epsilon=1e-6)(x)
    x = L.Flatten()(x)
    x = L.Dropout(0.5)(x)
    x = L.Dense(512, activation="gelu")(x)
    x = L.Dropout(0.5)(x)
    return keras.Model(inp, L.Dense(100, activation="softmax")(x), name="vit_tiny")


def _text_transformer(keras):
    """The Keras text-classification transformer: token embedding, one block of 2-head attention."""
    L = keras.layers
    inp = keras.Input((200,), dtype="int32")
    x = L.Embedding(20000, 32)(inp)
    y = L.MultiHeadAttention(num_heads=2, key_dim=32)(x, x)  # no dropout: ops.dot_product_attention
    y = L.Dropout(0.1)(y)
    x = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, y]))
    y = L.Dense(32, activation="relu")(x)
    y = L.Dense(32)(y)
    y = L.Dropout(0.1)(y)
    x = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, y]))
    x = L.GlobalAveragePooling1D()(x)
    x = L.Dropout(0.1)(x)
    x = L.Dense(20, activation="relu")(x)
    x = L.Dropout(0.1)(x)
    return keras.Model(inp, L.Dense(2, activation="softmax")(x), name="text_transformer")


def _text_cnn(keras):
    """The Keras text-classification-from-scratch model: Embedding, strided Conv1D, global max pool."""
    L = keras.layers
    inp = keras.Input((500,), dtype="int32")
    x = L.Embedding(20000, 128)(inp)
    x = L.Dropout(0.5)(x)
    x = L.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = L.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = L.GlobalMaxPooling1D()(x)
    x = L.Dense(128, activation="relu")(x)
    x = L.Dropout(0.5)(x)
    return keras.Model(inp, L.Dense(2, activation="softmax")(x), name="text_cnn")


def _xception_entry(L, x, stem, sizes):
    """The entry flow both Keras examples below share: a strided stem, then per size two
    ReLU -> SeparableConv2D -> BatchNormalization, a strided max pool, and a strided 1x1
    residual convolution added."""
    x = L.Conv2D(stem, 3, strides=2, padding="same")(x)
    x = L.BatchNormalization()(x)
    x = L.Activation("relu")(x)
    previous = x
    for size in sizes:
        for _ in range(2):
            x = L.Activation("relu")(x)
            x = L.SeparableConv2D(size, 3, padding="same")(x)
            x = L.BatchNormalization()(x)
        x = L.MaxPooling2D(3, strides=2, padding="same")(x)
        residual = L.Conv2D(size, 1, strides=2, padding="same")(previous)
        x = L.Add()([x, residual])
        previous = x
    return x


def _augmented_xception(keras):
    """The Keras image-classification-from-scratch model, its augmentation inside (128 px)."""
    L = keras.layers
    inp = keras.Input((128, 128, 3))
    x = L.RandomFlip("horizontal")(inp)
    x = L.RandomRotation(0.1)(x)
    x = L.Rescaling(1.0 / 255)(x)
    x = _xception_entry(L, x, 128, (256, 512, 728))
    x = L.SeparableConv2D(1024, 3, padding="same")(x)
    x = L.BatchNormalization()(x)
    x = L.Activation("relu")(x)
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dropout(0.25)(x)
    return keras.Model(inp, L.Dense(2, activation="softmax")(x), name="augmented_xception")


def _transfer_mobilenet(keras):
    """The usual transfer-learning file: MobileNetV2 (no top) nested in a model with a new head."""
    L = keras.layers
    base = keras.applications.MobileNetV2(weights=None, include_top=False, input_shape=(160, 160, 3))
    inp = keras.Input((160, 160, 3))
    x = L.Rescaling(1.0 / 127.5, offset=-1)(inp)
    x = base(x)
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dropout(0.2)(x)
    return keras.Model(inp, L.Dense(5, activation="softmax")(x), name="transfer_mobilenet")


def _dcgan_discriminator(keras):
    """The Keras DCGAN example's discriminator: strided convolutions with LeakyReLU."""
    L = keras.layers
    inp = keras.Input((64, 64, 3))
    x = inp
    for filters in (64, 128, 128):
        x = L.Conv2D(filters, 4, strides=2, padding="same")(x)
        x = L.LeakyReLU(negative_slope=0.2)(x)
    x = L.Flatten()(x)
    x = L.Dropout(0.2)(x)
    return keras.Model(inp, L.Dense(2, activation="softmax")(x), name="dcgan_discriminator")


def _tabular_bn(keras):
    """A tabular network: Dense -> BatchNormalization -> ReLU -> Dropout blocks on 64 features."""
    L = keras.layers
    inp = keras.Input((64,))
    x = inp
    for units in (512, 512, 256):
        x = L.Dense(units)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU()(x)
        x = L.Dropout(0.3)(x)
    return keras.Model(inp, L.Dense(10, activation="softmax")(x), name="tabular_bn")


def _segmentation_xception(keras):
    """The Keras Oxford-pets segmentation model (Xception-style U-Net), 128 px, 3 classes."""
    L = keras.layers
    inp = keras.Input((128, 128, 3))
    x = _xception_entry(L, inp, 32, (64, 128, 256))
    previous = x
    for filters in (256, 128, 64, 32):
        x = L.Activation("relu")(x)
        x = L.Conv2DTranspose(filters, 3, padding="same")(x)
        x = L.BatchNormalization()(x)
        x = L.Activation("relu")(x)
        x = L.Conv2DTranspose(filters, 3, padding="same")(x)
        x = L.BatchNormalization()(x)
        x = L.UpSampling2D(2)(x)
        residual = L.UpSampling2D(2)(previous)
        residual = L.Conv2D(filters, 1, padding="same")(residual)
        x = L.Add()([x, residual])
        previous = x
    return keras.Model(inp, L.Conv2D(3, 3, activation="softmax", padding="same")(x), name="segmentation_xception")


def _imdb_bilstm(keras):
    """The Keras 'Bidirectional LSTM on IMDB' example: Embedding(20000, 128), two Bidirectional(LSTM(64))."""
    L = keras.layers
    inp = keras.Input((200,), dtype="int32")
    x = L.Embedding(20000, 128)(inp)
    x = L.Bidirectional(L.LSTM(64, return_sequences=True))(x)
    x = L.Bidirectional(L.LSTM(64))(x)
    return keras.Model(inp, L.Dense(1, activation="sigmoid")(x), name="imdb_bilstm")


def _text_gru(keras):
    """Embedding(10000, 64) -> GRU(256, return_sequences) -> GRU(128) -> Dense, on 150 token ids."""
    L = keras.layers
    inp = keras.Input((150,), dtype="int32")
    x = L.Embedding(10000, 64)(inp)
    x = L.GRU(256, return_sequences=True)(x)
    x = L.GRU(128)(x)
    x = L.Dense(64, activation="relu")(x)
    return keras.Model(inp, L.Dense(5, activation="softmax")(x), name="text_gru")


def _lstm_forecast(keras):
    """A forecaster on 120 steps of 16 features: LSTM(128, return_sequences) -> LSTM(64) -> Dense(24)."""
    L = keras.layers
    inp = keras.Input((120, 16))
    x = L.LSTM(128, return_sequences=True)(inp)
    x = L.LSTM(64)(x)
    return keras.Model(inp, L.Dense(24)(x), name="lstm_forecast")


def _ecg_cnn(keras):
    """An ECG-style classifier on 5000 samples: four Conv1D -> BN -> ReLU -> MaxPooling1D(2) blocks."""
    L = keras.layers
    inp = keras.Input((5000, 1))
    x = inp
    for filters in (32, 64, 128, 128):
        x = L.Conv1D(filters, 7, padding="same")(x)
        x = L.BatchNormalization()(x)
        x = L.Activation("relu")(x)
        x = L.MaxPooling1D(2)(x)
    x = L.GlobalAveragePooling1D()(x)
    x = L.Dropout(0.3)(x)
    return keras.Model(inp, L.Dense(5, activation="softmax")(x), name="ecg_cnn")


def _unet1d(keras):
    """A 1-D U-Net on 2048 steps of 2 channels, two classes per step."""
    L = keras.layers
    inp = keras.Input((2048, 2))
    skips, x = [], inp
    for filters in (16, 32, 64):
        x = L.Conv1D(filters, 5, padding="same", activation="relu")(x)
        skips.append(x)
        x = L.MaxPooling1D(2)(x)
    x = L.Conv1D(128, 3, padding="same", activation="relu")(x)
    for filters, skip in zip((64, 32, 16), reversed(skips)):
        if filters == 32:
            x = L.Conv1DTranspose(filters, 2, strides=2)(x)
        else:
            x = L.Cropping1D(1)(L.ZeroPadding1D(1)(L.UpSampling1D(2)(x)))
        x = L.Concatenate()([x, skip])
        x = L.Conv1D(filters, 5, padding="same", activation="relu")(x)
    return keras.Model(inp, L.Conv1D(2, 1, activation="softmax")(x), name="unet1d")


def _kws_sep1d(keras):
    """Keyword spotting on 1 s of 16 kHz audio: strided Conv1D, separable and depthwise 1-D convolutions."""
    L = keras.layers
    inp = keras.Input((16000, 1))
    x = L.GaussianNoise(0.01)(inp)
    x = L.Conv1D(64, 80, strides=4, padding="same")(x)
    x = L.BatchNormalization()(x)
    x = L.ReLU()(x)
    x = L.MaxPooling1D(4)(x)
    for _ in range(3):
        x = L.SeparableConv1D(64, 3, padding="same", use_bias=False)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU()(x)
        x = L.SpatialDropout1D(0.1)(x)
    x = L.AveragePooling1D(4)(x)
    x = L.DepthwiseConv1D(3, padding="same")(x)
    x = L.GlobalMaxPooling1D()(x)
    return keras.Model(inp, L.Dense(12, activation="softmax")(x), name="kws_sep1d")


def _tcn(keras):
    """A temporal convolutional network: residual blocks of dilated causal Conv1D (1, 2, 4, 8)."""
    L = keras.layers
    inp = keras.Input((2048, 8))
    x = L.Conv1D(32, 1)(inp)
    for dilation in (1, 2, 4, 8):
        y = L.Conv1D(32, 3, padding="causal", dilation_rate=dilation, activation="relu")(x)
        y = L.Conv1D(32, 3, padding="causal", dilation_rate=dilation, activation="relu")(y)
        x = L.Add()([x, y])
    x = L.GlobalAveragePooling1D()(x)
    return keras.Model(inp, L.Dense(6, activation="softmax")(x), name="tcn")


def _unet1d_bn(keras):
    """A 1-D U-Net with BatchNormalization, four levels, Conv1DTranspose upsampling, 3 classes per step."""
    L = keras.layers

    def block(x, filters):
        x = L.Conv1D(filters, 3, padding="same", use_bias=False)(x)
        return L.Activation("relu")(L.BatchNormalization()(x))

    inp = keras.Input((1024, 4))
    skips, x = [], inp
    for filters in (16, 32, 64, 128):
        x = block(x, filters)
        skips.append(x)
        x = L.MaxPooling1D(2)(x)
    x = block(x, 256)
    for filters, skip in zip((128, 64, 32, 16), reversed(skips)):
        x = L.Conv1DTranspose(filters, 2, strides=2)(x)
        x = block(L.Concatenate()([x, skip]), filters)
    return keras.Model(inp, L.Conv1D(3, 1, activation="softmax")(x), name="unet1d_bn")


def _token_mlp(keras):
    """Three pre-norm feed-forward blocks on 256 tokens of 64 features (a transformer without attention)."""
    L = keras.layers
    inp = keras.Input((256, 64))
    x = inp
    for _ in range(3):
        y = L.LayerNormalization(epsilon=1e-6)(x)
        y = L.Dense(256, activation="gelu")(y)
        y = L.Dense(64)(y)
        x = L.Add()([x, y])
    x = L.GlobalAveragePooling1D()(L.LayerNormalization(epsilon=1e-6)(x))
    return keras.Model(inp, L.Dense(10, activation="softmax")(x), name="token_mlp")


def _wavenet_lite(keras):
    """WaveNet-style: gated (tanh x sigmoid) causal dilated Conv1Ds, residual and skip sums, on 4000 samples."""
    L = keras.layers
    inp = keras.Input((4000, 1))
    x = L.Conv1D(24, 2, padding="causal")(inp)
    skips = []
    for dilation in (1, 2, 4, 8, 16):
        t = L.Conv1D(24, 2, padding="causal", dilation_rate=dilation, activation="tanh")(x)
        g = L.Conv1D(24, 2, padding="causal", dilation_rate=dilation, activation="sigmoid")(x)
        y = L.Multiply()([t, g])
        skips.append(L.Conv1D(24, 1)(y))
        x = L.Add()([x, L.Conv1D(24, 1)(y)])
    x = L.Activation("relu")(L.Add()(skips))
    x = L.GlobalAveragePooling1D()(L.Conv1D(32, 1, activation="relu")(x))
    return keras.Model(inp, L.Dense(10, activation="softmax")(x), name="wavenet_lite")


def _dilated_seg(keras):
    """Dilated "same" Conv1Ds (1, 2, 4, 8) with BatchNormalization, a class for each of 3000 steps."""
    L = keras.layers
    inp = keras.Input((3000, 3))
    x = inp
    for dilation in (1, 2, 4, 8):
        x = L.Conv1D(32, 3, padding="same", dilation_rate=dilation)(x)
        x = L.Activation("relu")(L.BatchNormalization()(x))
    return keras.Model(inp, L.Conv1D(4, 1, activation="softmax")(x), name="dilated_seg")


BUILDERS = {"plain_cnn": _plain_cnn, "unet_small": _unet, "residual_sep": _residual,
            "convmixer": _convmixer, "conv1d_audio": _conv1d, "vgg_bn": _vgg_bn,
            "inception_mini": _inception_mini, "mlp": _mlp, "mnist_cnn": _mnist_cnn, "resnet20": _resnet20,
            "autoencoder": _autoencoder, "vit_tiny": _vit_tiny, "text_transformer": _text_transformer,
            "text_cnn": _text_cnn, "augmented_xception": _augmented_xception,
            "transfer_mobilenet": _transfer_mobilenet, "dcgan_discriminator": _dcgan_discriminator,
            "tabular_bn": _tabular_bn, "segmentation_xception": _segmentation_xception,
            "imdb_bilstm": _imdb_bilstm, "text_gru": _text_gru, "lstm_forecast": _lstm_forecast,
            "ecg_cnn": _ecg_cnn, "unet1d": _unet1d, "kws_sep1d": _kws_sep1d,
            "tcn": _tcn, "unet1d_bn": _unet1d_bn, "token_mlp": _token_mlp,
            "wavenet_lite": _wavenet_lite, "dilated_seg": _dilated_seg}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "calc", "data", "models"))
    parser.add_argument("--only", nargs="+", choices=sorted(BUILDERS), help="write these models only")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np

    os.makedirs(args.out, exist_ok=True)
    for name, build in BUILDERS.items():
        if args.only and name not in args.only:
            continue
        keras.backend.clear_session()
        model = build(keras)
        model.set_weights([np.zeros(w.shape, w.dtype) for w in model.get_weights()])
        path = os.path.join(args.out, f"{name}.keras")
        model.save(path)
        print(f"{path}: {model.count_params():,} parameters, {os.path.getsize(path):,} bytes")


if __name__ == "__main__":
    main()
