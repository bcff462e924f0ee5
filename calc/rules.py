"""What each layer type keeps for its backward pass, and its transient scratch.

Sources: TensorFlow's gradient functions (``tensorflow/python/ops/nn_grad.py``,
``math_grad.py``), how Keras 3 implements each layer on the TensorFlow backend
(``keras/src/backend/tensorflow/nn.py``), and single-layer measurements on this
project's machine (``benchmarks/probe_layers.py``): a stack of k identical layers,
the slope of the allocator peak in k and in the batch size.

Sizes are in units of the layer's input or output tensor (per sample, in the
compute dtype) unless a rule says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackwardRule:
    """What one layer call keeps alive from its forward to its backward pass.

    Attributes:
        keeps_input: the input is read by the gradient of the layer's weights or of
            its input (Conv2D/Dense: weight gradient; BatchNormalization: ``Square``).
        input_for_weights_only: the input is needed only for the weight gradient
            (Conv/Dense), so a frozen layer does not keep it.
        keeps_output: the output is read by the gradient (ReLU, Sigmoid, Softmax).
        extra_outputs: further tensors of the output's size kept (GELU's erf terms).
        mask_bytes_per_element: a boolean/byte mask of the output's size (Dropout).
        aliases_input: the output is a view of the input (Reshape, Flatten): no memory.
        casts_to_compute: the output is the input cast to the compute dtype: a view under
            float32 (``tf.cast`` to the same dtype returns its input), a new tensor under
            mixed precision.
        forward_scratch: temporaries of the output's size live while the layer runs.
        backward_scratch: temporaries of the input's size live while its gradient runs.
        upcasts: the layer casts a 16-bit input to float32 first and works on that
            copy (Keras 3 BatchNormalization), so under mixed precision what it keeps
            and its scratch are float32.
    """

    keeps_input: bool = False
    input_for_weights_only: bool = False
    keeps_output: bool = False
    extra_outputs: float = 0.0
    mask_bytes_per_element: int = 0
    aliases_input: bool = False
    casts_to_compute: bool = False
    forward_scratch: float = 0.0
    backward_scratch: float = 0.0
    upcasts: bool = False


NOTHING = BackwardRule()
# Conv2D/Dense: dW = input^T * dY needs the input; dX = dY * W^T needs only W.
LINEAR = BackwardRule(keeps_input=True, input_for_weights_only=True)
# oneDNN convolutions on NHWC tensors work in a blocked layout, so a reordered copy
# is live while they run. Measured: three frozen 64-channel 3x3 convs (batch 32,
# 64x64) peaked at input + output + 1.0 feature map; VGG16's block1_conv2 at 224
# (frozen, batch 16) at + 0.66; the chunk it lands in is often one just freed.
# Half an output is the middle of that range.
CONV = BackwardRule(keeps_input=True, input_for_weights_only=True, forward_scratch=0.5)
KEEPS_OUTPUT = BackwardRule(keeps_output=True)
KEEPS_INPUT = BackwardRule(keeps_input=True)
VIEW = BackwardRule(aliases_input=True)

# Activation functions by Keras name: what the gradient of the op reads.
ACTIVATION_RULES: dict[str, BackwardRule] = {
    "linear": NOTHING,
    # ReluGrad, Relu6Grad, EluGrad, SeluGrad, SigmoidGrad, TanhGrad, Softmax: output.
    "relu": KEEPS_OUTPUT,
    "relu6": KEEPS_OUTPUT,
    "elu": KEEPS_OUTPUT,
    "selu": KEEPS_OUTPUT,
    "sigmoid": KEEPS_OUTPUT,
    "tanh": KEEPS_OUTPUT,
    "softmax": KEEPS_OUTPUT,
    "log_softmax": KEEPS_OUTPUT,
    # tf.nn.silu has a custom gradient that recomputes sigmoid from the input.
    # Its backward makes two tensors of the input's size, Sigmoid and 1 - sigmoid
    # (``sub``); the rest of the chain, dy * s * (1 + x * (1 - s)), writes into them,
    # so the input's gradient is one of the two: one tensor beyond the gradient.
    # Traced (benchmarks/trace_step.py "EfficientNetV2B2-224x224x1-head1000 b64 adamw
    # float32 last_40" --layers): the step peaks at top_activation's ``sub`` with the
    # incoming gradient (Tile), Sigmoid and sub alive, 3 x 16.8 MiB, and nothing larger
    # after it; counting two beyond the gradient (stop 19 and before) held four.
    # Forward, x * sigmoid(x) makes the sigmoid first: one more tensor while it runs.
    "silu": BackwardRule(keeps_input=True, backward_scratch=1.0, forward_scratch=1.0),
    "swish": BackwardRule(keeps_input=True, backward_scratch=1.0, forward_scratch=1.0),
    "softplus": KEEPS_INPUT,
    "leaky_relu": KEEPS_INPUT,
    # Keras' exact GELU (erf) and hard_silu (x * relu6(x + 3) / 6) are chains of
    # elementwise ops; measured: three tensors of the output's size kept.
    "gelu": BackwardRule(keeps_input=True, extra_outputs=2.0),
    "hard_silu": BackwardRule(keeps_input=True, extra_outputs=2.0),
    "hard_swish": BackwardRule(keeps_input=True, extra_outputs=2.0),
    "hard_sigmoid": BackwardRule(keeps_input=True),
    "mish": BackwardRule(keeps_input=True, extra_outputs=2.0),
}

LAYER_RULES: dict[str, BackwardRule] = {
    "InputLayer": NOTHING,
    "Conv1D": CONV,
    "Conv2D": CONV,
    "Conv3D": CONV,
    "Conv2DTranspose": CONV,
    "DepthwiseConv2D": CONV,
    # On a rank-4 input (ConvNeXt's pointwise layers, via tf.tensordot) Keras' Dense
    # keeps no second copy of its input: re-measured, a Dense(64)+Dense(16) pair on 4-D
    # maps kept 5.75 maps per pair (its outputs are 5; benchmarks/probe_layers.py
    # dense4x --batch 64: 48 / 140 MiB at 2 / 6 pairs), and ConvNeXtTiny's per-sample
    # slope (224 px, SGD, batch 4 -> 12: 188 MiB per sample) matches the rules without
    # a copy (193) and not with one (237). An earlier copy rule stood in for the
    # batch-independent XLA filter gradient of its grouped convs (calc.estimate).
    "Dense": LINEAR,
    "EinsumDense": LINEAR,
    # Depthwise then pointwise: keeps its input and the depthwise output.
    # The depthwise output exists between the two convolutions, kept or not.
    "SeparableConv2D": BackwardRule(keeps_input=True, input_for_weights_only=True, extra_outputs=1.0,
                                    forward_scratch=1.0),
    # Keras 3 BatchNormalization on TF: moments (Square reads x) and x * inv + c
    # (Mul reads x): the input, once. In inference mode it is x * inv + c with
    # constant inv: nothing kept per sample.
    # Its backward sums three paths (through x * inv, the mean and the variance):
    # measured, two input-sized temporaries beyond the input gradient. Keras 3.15's
    # call() starts with ops.cast(inputs, result_type(inputs.dtype, "float32")).
    "BatchNormalization": BackwardRule(keeps_input=True, backward_scratch=2.0, upcasts=True),
    # LayerNormalization: moments of x and the normalized x, both kept: measured 2x.
    # keras/src/ops/nn.py _layer_normalization casts x to float32 first, like BN.
    "LayerNormalization": BackwardRule(keeps_input=True, extra_outputs=1.0, backward_scratch=2.0, upcasts=True),
    "Activation": NOTHING,  # resolved through ACTIVATION_RULES
    "ReLU": KEEPS_OUTPUT,
    "Softmax": KEEPS_OUTPUT,
    "LeakyReLU": KEEPS_INPUT,
    "ELU": KEEPS_OUTPUT,
    # Keras 3 PReLU.call: relu(x) - alpha * relu(-x). ReluGrad keeps both relu outputs
    # (and alpha's gradient reads relu(-x)): two tensors of the output's size, the input
    # none. Traced (residual_sep b64 bf16): 18.0 MiB kept for a 9.0 MiB output.
    "PReLU": BackwardRule(extra_outputs=2.0),
    # MaxPoolGrad reads the input and the output; oneDNN's max-pool also keeps a
    # workspace for its backward (measured: half an output's size).
    "MaxPooling2D": BackwardRule(keeps_input=True, keeps_output=True, extra_outputs=0.5),
    "MaxPooling1D": BackwardRule(keeps_input=True, keeps_output=True, extra_outputs=0.5),
    # AvgPoolGrad needs only the input's shape.
    "AveragePooling2D": NOTHING,
    "GlobalAveragePooling2D": NOTHING,
    "GlobalAveragePooling1D": NOTHING,
    "GlobalMaxPooling2D": BackwardRule(keeps_input=True, keeps_output=True),
    "Add": NOTHING,
    "Subtract": NOTHING,
    "Average": NOTHING,
    "Concatenate": NOTHING,
    # Multiply's gradient reads both inputs (dA = dY * B, dB = dY * A).
    "Multiply": KEEPS_INPUT,
    # Keras 3's UpSampling2D (nearest, its default) is ops.repeat along height, then width:
    # tf.repeat tiles an expanded copy, so the height-repeated map (half the output) lives
    # while the second repeat runs; TileGrad sums the gradient back in the same two steps
    # (half an output = two inputs) and reads no forward tensor. Bilinear and the other
    # modes (tf.image.resize, whose gradient reads the input) are not told apart here.
    "UpSampling2D": BackwardRule(forward_scratch=0.5, backward_scratch=2.0),
    "ZeroPadding2D": NOTHING,
    "Cropping2D": NOTHING,
    "Flatten": VIEW,
    "Reshape": VIEW,
    "Permute": NOTHING,
    "Identity": VIEW,
    "Rescaling": NOTHING,
    "Normalization": NOTHING,
    # Keras dropout keeps a byte mask of the output (measured 1 byte per element).
    "Dropout": BackwardRule(mask_bytes_per_element=1),
    "SpatialDropout2D": BackwardRule(mask_bytes_per_element=1),
    # ConvNeXt's LayerScale multiplies by a per-channel variable: dGamma reads x.
    "LayerScale": KEEPS_INPUT,
    "StochasticDepth": NOTHING,
    # InceptionResNetV2's residual scaling (keras/src/applications/inception_resnet_v2.py
    # CustomScaleLayer.call: inputs[0] + inputs[1] * scale, scale a Python float): both
    # gradients are dY times a constant, so nothing is kept. Measured: InceptionResNetV2
    # 160 px b8 SGD peaked at 615 MiB; counted as unknown (keeping inputs and output)
    # the estimate was 748 MiB.
    "CustomScaleLayer": NOTHING,
    # The steps of a MultiHeadAttention call (calc.keras_adapter._attention_steps). An
    # einsum of two tensors is a batched matmul: each input's gradient reads the other.
    "Einsum": KEEPS_INPUT,
    # ops.dot_product_attention on TensorFlow: the scores cast to float32 and scaled (a
    # second scores-sized tensor while the softmax runs), softmax in float32, its output
    # kept; the gradient (g - sum(g * y)) * y holds one more scores-sized temporary.
    "AttentionSoftmax": BackwardRule(keeps_output=True, forward_scratch=1.0, backward_scratch=1.0),
    "Cast": BackwardRule(casts_to_compute=True),
    # Embedding: a gather from the table; its gradient is the output's gradient scattered
    # by the (integer, model-input) indices, so nothing of the forward pass is kept.
    "Embedding": NOTHING,
    "GlobalMaxPooling1D": BackwardRule(keeps_input=True, keeps_output=True),
    "AveragePooling1D": NOTHING,
    # Stop 21, benchmarks/probe_layers.py (k = 2 and 6 layers on 32x32x16 maps, or on
    # 1024x32 sequences for the 1-D kinds, batch 32; before these rules each counted as
    # unknown, keeping its input and output). The 1-D layers run as their 2-D kernels
    # between expand_dims and squeeze, and keep what those keep:
    "Conv1DTranspose": CONV,
    "Conv3DTranspose": CONV,
    "DepthwiseConv1D": CONV,
    "SeparableConv1D": BackwardRule(keeps_input=True, input_for_weights_only=True, extra_outputs=1.0,
                                    forward_scratch=1.0),
    # Padding, cropping and nearest repeats read no forward tensor in their gradients
    # (measured flat: 12 / 16 MiB and 16 / 16 MiB at 2 / 6 pairs, where keeping input and
    # output gave 40 / 76 and 44 / 95).
    # SpatialDropout1D's mask is (batch, 1, channels): nothing of the sequence's size
    # (measured flat, 8 / 8 MiB).
    **dict.fromkeys(("ZeroPadding1D", "ZeroPadding3D", "Cropping1D", "Cropping3D", "UpSampling1D",
                     "SpatialDropout1D"), NOTHING),
    # x * noise (GaussianDropout) and AlphaDropout's a * (x * kept + alpha' * (1 - kept)) + b
    # keep a noise or mask tensor of the output's size and dtype for the gradient; the
    # latter makes the uniform draw, the float mask and 1 - mask while it runs (measured
    # 20.5-32 MiB over four runs at 6 layers, 19.4 without the scratch). x + noise
    # (GaussianNoise) needs nothing for its gradient, yet measured about one output per
    # layer kept (8 -> 14-16 MiB from 2 to 6 layers); counted as measured, not explained.
    "GaussianNoise": BackwardRule(extra_outputs=1.0),
    "GaussianDropout": BackwardRule(extra_outputs=1.0),
    "AlphaDropout": BackwardRule(extra_outputs=1.0, forward_scratch=2.0),
    # x / sqrt(sum(x^2)): the gradient reads x (and the small norm).
    "UnitNormalization": KEEPS_INPUT,
    # Keras 3 GroupNormalization: casts x (viewed as groups) to float32, moments of it
    # (Square reads x), then x * inv + res with inv and res per sample and group: like
    # BatchNormalization, the (float32) input once. No inference form: a frozen one still
    # normalizes by the sample's own moments. Measured (benchmarks/probe_layers.py gn,
    # stop 22; runs at 2 layers differ by 20 %): 2.0 MiB, one float32 feature map, per
    # layer in float32 and mixed_bfloat16. One input-sized backward temporary, not BN's
    # two: float32 b32 10-12 / 20 MiB at 2 / 6 layers (two: 15.1 / 23.8; this rule 13.0 /
    # 21.6), b64 24 / 40 (25.9 / 43.2); mixed_bfloat16 11-13 / 19-21 (11.9 / 20.5, where the
    # unknown-type rule gave 8.6 / 13.0).
    "GroupNormalization": BackwardRule(keeps_input=True, backward_scratch=1.0, upcasts=True),
    # The gradient of an element-wise max or min selects by comparing the inputs: both kept.
    "Maximum": KEEPS_INPUT,
    "Minimum": KEEPS_INPUT,
    # Preprocessing and augmentation layers inside a model: they act on the model's input,
    # which needs no gradient, and have no weights, so no backward pass reaches them; each
    # makes its output (image transforms via ImageProjectiveTransformV3).
    "RandomFlip": NOTHING,
    "RandomRotation": NOTHING,
    "RandomZoom": NOTHING,
    "RandomTranslation": NOTHING,
    "RandomContrast": NOTHING,
    "RandomBrightness": NOTHING,
    "RandomCrop": NOTHING,
    "Resizing": NOTHING,
    "CenterCrop": NOTHING,
}


def is_known_layer_type(layer_type: str) -> bool:
    return layer_type in LAYER_RULES


def rule_for(layer_type: str, activation: str = "linear") -> tuple[BackwardRule, BackwardRule, bool]:
    """Returns ``(layer rule, fused activation rule, known)`` for one layer call.

    Unknown layer types are treated as keeping their input and output (an
    over-estimate, the safe side) and reported as unknown.
    """
    act = ACTIVATION_RULES.get(activation)
    known_act = act is not None
    if act is None:
        act = BackwardRule(keeps_input=True, keeps_output=True)
    if layer_type == "Activation":
        return act, NOTHING, known_act
    layer = LAYER_RULES.get(layer_type)
    if layer is None:
        return BackwardRule(keeps_input=True, keeps_output=True), act, False
    return layer, act, known_act
