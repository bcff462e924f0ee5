"""What each layer type keeps for its backward pass, its transient scratch, and how TensorFlow runs it.

Sources: TensorFlow's gradient functions (``tensorflow/python/ops/nn_grad.py``,
``math_grad.py``), how Keras 3 implements each layer on the TensorFlow backend
(``keras/src/backend/tensorflow/nn.py``), single-layer measurements on this project's
machine (``archive/probes/probe_layers.py``: a stack of k identical layers, the slope of
the allocator peak in k and in the batch size) and traces of real steps
(``tools/trace_step.py``).

Sizes are in units of the layer's input or output tensor (per sample, in the
compute dtype) unless a rule says otherwise. Everything the engine knows of one layer
type is its entry in ``LAYER_RULES``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackwardRule:
    """What one layer call (or fused activation) keeps alive from its forward to its backward pass.

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
        gradient_in_place: the gradient is one element-wise op of the incoming gradient
            (ReluGrad, LeakyReluGrad, EluGrad, ...), which writes into that gradient's
            buffer when nothing else reads it (TensorFlow's BinaryElementWiseOp forwards
            an input buffer). Traced: dcgan_discriminator b64 adam, no allocation for
            LeakyReluGrad.
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
    gradient_in_place: bool = False


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
# ReluGrad, Relu6Grad, EluGrad, SeluGrad, SigmoidGrad, TanhGrad: the output, and the
# input gradient written into the incoming one.
OUTPUT_GRADIENT_IN_PLACE = BackwardRule(keeps_output=True, gradient_in_place=True)
# LeakyReluGrad reads the input.
INPUT_GRADIENT_IN_PLACE = BackwardRule(keeps_input=True, gradient_in_place=True)
# A layer type without a rule keeps its input and output (an over-estimate, the safe side).
UNKNOWN = BackwardRule(keeps_input=True, keeps_output=True)

# Activation functions by Keras name: what the gradient of the op reads.
ACTIVATION_RULES: dict[str, BackwardRule] = {
    "linear": NOTHING,
    "relu": OUTPUT_GRADIENT_IN_PLACE,
    "relu6": OUTPUT_GRADIENT_IN_PLACE,
    "elu": OUTPUT_GRADIENT_IN_PLACE,
    "selu": OUTPUT_GRADIENT_IN_PLACE,
    "sigmoid": OUTPUT_GRADIENT_IN_PLACE,
    "tanh": OUTPUT_GRADIENT_IN_PLACE,
    # Softmax's gradient reads its output.
    "softmax": KEEPS_OUTPUT,
    "log_softmax": KEEPS_OUTPUT,
    # tf.nn.silu has a custom gradient that recomputes sigmoid from the input.
    # Its backward makes two tensors of the input's size, Sigmoid and 1 - sigmoid
    # (``sub``); the rest of the chain, dy * s * (1 + x * (1 - s)), writes into them,
    # so the input's gradient is one of the two: one tensor beyond the gradient.
    # Traced (tools/trace_step.py "EfficientNetV2B2-224x224x1-head1000 b64 adamw
    # float32 last_40" --layers): the step peaks at top_activation's ``sub`` with the
    # incoming gradient (Tile), Sigmoid and sub alive, 3 x 16.8 MiB, and nothing larger
    # after it.
    # Forward, x * sigmoid(x) makes the sigmoid first: one more tensor while it runs.
    "silu": BackwardRule(keeps_input=True, backward_scratch=1.0, forward_scratch=1.0),
    "swish": BackwardRule(keeps_input=True, backward_scratch=1.0, forward_scratch=1.0),
    "softplus": KEEPS_INPUT,
    "leaky_relu": INPUT_GRADIENT_IN_PLACE,
    # Keras' exact GELU (erf) and hard_silu (x * relu6(x + 3) / 6) are chains of
    # elementwise ops; measured: three tensors of the output's size kept.
    "gelu": BackwardRule(keeps_input=True, extra_outputs=2.0),
    "hard_silu": BackwardRule(keeps_input=True, extra_outputs=2.0),
    "hard_swish": BackwardRule(keeps_input=True, extra_outputs=2.0),
    "hard_sigmoid": BackwardRule(keeps_input=True),
    "mish": BackwardRule(keeps_input=True, extra_outputs=2.0),
}


@dataclass(frozen=True)
class LayerRule:
    """One layer type: what its call keeps (``backward``) and how TensorFlow runs it.

    Attributes:
        backward: what one call keeps for the backward pass and its scratch (for an
            ``Activation`` layer, its function's rule in ``ACTIVATION_RULES``).
        elementwise: the forward is element-wise on one input, so TensorFlow can write
            the output into the input's buffer when nothing else reads it. Training-mode
            Dropout too: Keras 3's stateless dropout is select(mask, x * scale, 0), both
            ops forward x's buffer (traced: dcgan_discriminator b64, no allocation for
            the [64, 8192] output; the random uniform is made at the step's start and
            dies there).
        elementwise_in_inference: in inference mode the layer is x * inv + c with
            constant inv and c, element-wise (BatchNormalization, LayerNormalization);
            under mixed precision it still works on a float32 copy, then casts back.
        keeps_nothing_in_inference: in inference mode the gradient through it reads
            nothing (BatchNormalization's x * inv + c with constant inv; Dropout is the
            identity).
        normalization: a normalization: its input gradient sums three paths (through
            x * inv, the mean and the variance), and under mixed precision Keras 3.15's
            ``call`` casts its 16-bit input to float32 first, normalizes that copy in
            place and casts the result back (measured: frozen backbones under mixed
            precision peaked 29-43 % above a walk without the copy; docs/notes/float16-kernels.md).
        separable: a depthwise convolution, then a pointwise one; the depthwise output
            is a step of its own, and the pointwise kernel is its second weight.
        reduces_bias: its backward reduces a bias (or beta) gradient over the batch and
            the steps of a sequence (``holds_input_gradient``).
        bias_on_sequences: a layer with a bias that holds, on a sequence (a 3-D tensor),
            the input gradient of any layer above it but a normalization
            (``holds_input_gradient``).
        holds_input_gradient: a 1-D pool (tf.nn.max_pool1d / avg_pool1d: a 2-D pool
            between expand_dims and squeeze), whose input gradient stays allocated to
            the step's end when the layer below it (through element-wise layers)
            ``reduces_bias`` with a bias. Traced (archive/probes/probe_pool1d.py,
            tools/trace_step.py on conv1d_audio and unet1d): the gradient flowing into
            the backward of a layer that reduces a bias over the batch and the steps of
            a sequence stays allocated, through every earlier layer's backward and the
            updates, to the step's last events, with what writes into it in place
            (ReluGrad); the executor running those reductions last is the likely cause
            (its expensive-op queue). Conv1D(relu) -> [BatchNormalization ->]
            MaxPooling1D or AveragePooling1D and Dense -> MaxPooling1D held their pools'
            input gradients; without a bias, or above another pool, they were freed as
            the layer below finished, as MaxPooling2D's are (conv1d_audio b64 adam holds
            four, 58.6 MiB, at its peak). Dense stacks on (batch, 1024, 32) with a bias
            held every input gradient, without one none; unet1d held its convolutions'
            and its upsampling's input gradients flowing into biased Conv1Ds;
            conv1d_audio's normalizations' input gradients, flowing into biased Conv1Ds,
            were not (``bias_on_sequences``). On 4-D maps (Conv2D, oneDNN) none of this
            was seen.
        pads_into_copy: a Conv1D, which TensorFlow runs on a padded copy of its input
            when causal (Pad) and on a space-to-batch copy when dilated (SpaceToBatchND
            -> convolution -> BatchToSpaceND); the weight gradient reads that copy, so
            what the layer keeps is the copy, not the shared input. Traced
            (tools/trace_step.py "tcn.keras b16 adam", dilations 1, 2, 4, 8 with causal
            padding): each layer's padded copy lived until its backward; each dilated
            layer's space-to-batch copy, and the space-to-batch copy its backward makes
            of the incoming gradient, lived to the step's last events (freed at events
            99-116 of 118).
        sparse_gradient: the weight gradient is tf.IndexedSlices (Embedding): one float32
            row per looked-up token (the output's gradient), not a table-sized tensor.
            Keras' optimizers densify it where an op mixes it with a slot
            (UnsortedSegmentSum, table-sized, in the update's scratch) and run
            element-wise ops on the values (Adam's square, SGD's lr * g: one
            values-sized temporary more). Traced: text_cnn b64 adam peaks at the table's
            update with adam/Square (15.6 MiB, the values) and UnsortedSegmentSum_1.
        slices_gradient: a Concatenate: on sequences TensorFlow slices each input's
            gradient out of the output's when that input's producer needs it (traced:
            unet1d's skip connections' slices were made at the step's end), so the
            output's gradient lives until the earliest producer's backward starts.
        mergeable: TensorFlow merges identical stateless ops that read the same tensors
            before it runs a function (common-subexpression elimination:
            tensorflow/core/graph/optimizer_cse.cc, on by default, and Grappler's
            arithmetic optimizer dedup), so two parameter-free layers of one such type
            and configuration on one input compute one output (NASNet's cells apply
            Activation("relu") to the same tensor up to five times). Measured
            (archive/probes/probe_layers.py tworelu / onerelu --batch 64): two relu
            layers on one input cost no more than one shared layer (36 vs 40 MiB at 6
            blocks). Only types whose whole configuration the ledger shows (activation,
            pool size and strides, output shape) are merged; each merged layer's
            gradient still runs. ZeroPadding2D's padding is not in the ledger: two pads
            of one (merged) input to the same shape are taken as one (NASNet pads
            relu(p) once per 7x7 separable branch; Keras' correct_pad gives one padding
            per kernel size).
        onednn_rewritten: oneDNN's layout pass replaces its first op on the CPU
            (_MklNative* kernels), which decides the order the executor runs it in
            (``calc.engine.order``).
        grouped_by_xla: Keras 3 runs this convolution through
            ``tf.function(jit_compile=True)`` when it has groups ("grouped convolutions
            are broken on CPU without XLA", keras/src/backend/tensorflow/nn.py conv);
            ``calc.facts.kernels.grouped_depthwise_scratch``.
        fuses_pad_and_bias_add: a plain (ungrouped) Conv2D, which the CPU graph passes
            fuse with a ZeroPadding2D before it (``pads_into_conv``) and, with its bias,
            into an Add after it (``takes_fused_conv``): ``calc.engine.fusions``.
        pads_into_conv: a pad that oneDNN's layout pass fuses into the Conv2D reading it.
        takes_fused_conv: a two-input Add that Grappler's remapper fuses a biased Conv2D into.
        binary_in_place: a two-input op that, frozen, writes into an input buffer no one
            else reads (measured: two Conv2D branches + Add, frozen, peak = input + the two
            conv outputs; docs/notes/executor-order.md).
        workspace_only_in_training: its ``extra_outputs`` are oneDNN's training
            workspace (max pooling), none in inference.
        float16_im2col: under mixed_float16 on a CPU its gradient runs
            Conv2DBackpropFilter / Conv2DBackpropInput (for SeparableConv2D: its
            pointwise 1x1 convolution), which allocate im2col buffers (``calc.facts.kernels``).
        float16_matmul: under mixed_float16 on a CPU its MatMul casts both operands and
            its result to float32 (``calc.facts.kernels``).
    """

    backward: BackwardRule = NOTHING
    elementwise: bool = False
    elementwise_in_inference: bool = False
    keeps_nothing_in_inference: bool = False
    normalization: bool = False
    separable: bool = False
    reduces_bias: bool = False
    bias_on_sequences: bool = False
    holds_input_gradient: bool = False
    pads_into_copy: bool = False
    sparse_gradient: bool = False
    slices_gradient: bool = False
    mergeable: bool = False
    onednn_rewritten: bool = False
    grouped_by_xla: bool = False
    fuses_pad_and_bias_add: bool = False
    pads_into_conv: bool = False
    takes_fused_conv: bool = False
    binary_in_place: bool = False
    workspace_only_in_training: bool = False
    float16_im2col: bool = False
    float16_matmul: bool = False


LAYER_RULES: dict[str, LayerRule] = {
    "InputLayer": LayerRule(),
    "Conv1D": LayerRule(CONV, reduces_bias=True, bias_on_sequences=True, pads_into_copy=True),
    "Conv2D": LayerRule(CONV, onednn_rewritten=True, grouped_by_xla=True, fuses_pad_and_bias_add=True,
                        float16_im2col=True),
    "Conv3D": LayerRule(CONV),
    "Conv2DTranspose": LayerRule(CONV),
    "DepthwiseConv2D": LayerRule(CONV, onednn_rewritten=True),
    # On a rank-4 input (ConvNeXt's pointwise layers, via tf.tensordot) Keras' Dense
    # keeps no second copy of its input: a Dense(64)+Dense(16) pair on 4-D maps kept
    # 5.75 maps per pair (its outputs are 5; archive/probes/probe_layers.py dense4x
    # --batch 64: 48 / 140 MiB at 2 / 6 pairs), and ConvNeXtTiny's per-sample slope
    # (224 px, SGD, batch 4 -> 12: 188 MiB per sample) matches the rules without a copy
    # (193) and not with one (237).
    "Dense": LayerRule(LINEAR, reduces_bias=True, bias_on_sequences=True, onednn_rewritten=True,
                       float16_matmul=True),
    "EinsumDense": LayerRule(LINEAR),
    # Depthwise then pointwise: keeps its input and the depthwise output.
    # The depthwise output exists between the two convolutions, kept or not.
    "SeparableConv2D": LayerRule(BackwardRule(keeps_input=True, input_for_weights_only=True, extra_outputs=1.0,
                                              forward_scratch=1.0),
                                 separable=True, onednn_rewritten=True, float16_im2col=True),
    # Keras 3 BatchNormalization on TF: moments (Square reads x) and x * inv + c
    # (Mul reads x): the input, once. In inference mode it is x * inv + c with
    # constant inv: nothing kept per sample.
    # Its backward sums three paths (through x * inv, the mean and the variance):
    # measured, two input-sized temporaries beyond the input gradient. Keras 3.15's
    # call() starts with ops.cast(inputs, result_type(inputs.dtype, "float32")).
    "BatchNormalization": LayerRule(BackwardRule(keeps_input=True, backward_scratch=2.0, upcasts=True),
                                    normalization=True, elementwise_in_inference=True,
                                    keeps_nothing_in_inference=True, reduces_bias=True),
    # LayerNormalization: moments of x and the normalized x, both kept: measured 2x.
    # keras/src/ops/nn.py _layer_normalization casts x to float32 first, like BN.
    "LayerNormalization": LayerRule(BackwardRule(keeps_input=True, extra_outputs=1.0, backward_scratch=2.0,
                                                 upcasts=True),
                                    normalization=True, elementwise_in_inference=True, reduces_bias=True),
    "Activation": LayerRule(elementwise=True, mergeable=True),  # its backward: ACTIVATION_RULES
    "ReLU": LayerRule(OUTPUT_GRADIENT_IN_PLACE, elementwise=True),
    "Softmax": LayerRule(KEEPS_OUTPUT),
    "LeakyReLU": LayerRule(INPUT_GRADIENT_IN_PLACE, elementwise=True),
    "ELU": LayerRule(OUTPUT_GRADIENT_IN_PLACE, elementwise=True),
    # Keras 3 PReLU.call: relu(x) - alpha * relu(-x). ReluGrad keeps both relu outputs
    # (and alpha's gradient reads relu(-x)): two tensors of the output's size, the input
    # none. Traced (residual_sep b64 bf16): 18.0 MiB kept for a 9.0 MiB output.
    "PReLU": LayerRule(BackwardRule(extra_outputs=2.0)),
    # MaxPoolGrad reads the input and the output; oneDNN's max-pool also keeps a
    # workspace for its backward (measured: half an output's size).
    "MaxPooling2D": LayerRule(BackwardRule(keeps_input=True, keeps_output=True, extra_outputs=0.5),
                              mergeable=True, onednn_rewritten=True, workspace_only_in_training=True),
    "MaxPooling1D": LayerRule(BackwardRule(keeps_input=True, keeps_output=True, extra_outputs=0.5),
                              holds_input_gradient=True, workspace_only_in_training=True),
    # AvgPoolGrad needs only the input's shape.
    "AveragePooling2D": LayerRule(mergeable=True, onednn_rewritten=True),
    "GlobalAveragePooling2D": LayerRule(mergeable=True),
    "GlobalAveragePooling1D": LayerRule(),
    "GlobalMaxPooling2D": LayerRule(BackwardRule(keeps_input=True, keeps_output=True)),
    "Add": LayerRule(mergeable=True, takes_fused_conv=True, binary_in_place=True),
    "Subtract": LayerRule(),
    "Average": LayerRule(),
    "Concatenate": LayerRule(mergeable=True, slices_gradient=True),
    # Multiply's gradient reads both inputs (dA = dY * B, dB = dY * A).
    "Multiply": LayerRule(KEEPS_INPUT),
    # Keras 3's UpSampling2D (nearest, its default) is ops.repeat along height, then width:
    # tf.repeat tiles an expanded copy, so the height-repeated map (half the output) lives
    # while the second repeat runs; TileGrad sums the gradient back in the same two steps
    # (half an output = two inputs) and reads no forward tensor. Bilinear and the other
    # modes (tf.image.resize, whose gradient reads the input) are not told apart here.
    "UpSampling2D": LayerRule(BackwardRule(forward_scratch=0.5, backward_scratch=2.0)),
    "ZeroPadding2D": LayerRule(mergeable=True, pads_into_conv=True),
    "Cropping2D": LayerRule(),
    "Flatten": LayerRule(VIEW),
    "Reshape": LayerRule(VIEW),
    "Permute": LayerRule(),
    "Identity": LayerRule(VIEW),
    "Rescaling": LayerRule(elementwise=True),
    "Normalization": LayerRule(elementwise=True),
    # Keras dropout keeps a byte mask of the output (measured 1 byte per element).
    "Dropout": LayerRule(BackwardRule(mask_bytes_per_element=1), elementwise=True, keeps_nothing_in_inference=True),
    "SpatialDropout2D": LayerRule(BackwardRule(mask_bytes_per_element=1), keeps_nothing_in_inference=True),
    # ConvNeXt's LayerScale multiplies by a per-channel variable: dGamma reads x.
    "LayerScale": LayerRule(KEEPS_INPUT),
    "StochasticDepth": LayerRule(),
    # InceptionResNetV2's residual scaling (keras/src/applications/inception_resnet_v2.py
    # CustomScaleLayer.call: inputs[0] + inputs[1] * scale, scale a Python float): both
    # gradients are dY times a constant, so nothing is kept. Measured: InceptionResNetV2
    # 160 px b8 SGD peaked at 615 MiB; counted as unknown (keeping inputs and output)
    # the estimate was 748 MiB.
    "CustomScaleLayer": LayerRule(),
    # The steps of a MultiHeadAttention call (calc.keras.profile). An einsum of two
    # tensors is a batched matmul: each input's gradient reads the other.
    "Einsum": LayerRule(KEEPS_INPUT),
    # ops.dot_product_attention on TensorFlow: the scores cast to float32 and scaled (a
    # second scores-sized tensor while the softmax runs), softmax in float32, its output
    # kept; the gradient (g - sum(g * y)) * y holds one more scores-sized temporary.
    "AttentionSoftmax": LayerRule(BackwardRule(keeps_output=True, forward_scratch=1.0, backward_scratch=1.0)),
    "Cast": LayerRule(BackwardRule(casts_to_compute=True)),
    # Embedding: a gather from the table; its gradient is the output's gradient scattered
    # by the (integer, model-input) indices, so nothing of the forward pass is kept.
    "Embedding": LayerRule(sparse_gradient=True),
    "GlobalMaxPooling1D": LayerRule(BackwardRule(keeps_input=True, keeps_output=True)),
    "AveragePooling1D": LayerRule(holds_input_gradient=True),
    # archive/probes/probe_layers.py (k = 2 and 6 layers on 32x32x16 maps, or on 1024x32
    # sequences for the 1-D kinds, batch 32). The 1-D layers run as their 2-D kernels
    # between expand_dims and squeeze, and keep what those keep:
    "Conv1DTranspose": LayerRule(CONV),
    "Conv3DTranspose": LayerRule(CONV),
    "DepthwiseConv1D": LayerRule(CONV),
    "SeparableConv1D": LayerRule(BackwardRule(keeps_input=True, input_for_weights_only=True, extra_outputs=1.0,
                                              forward_scratch=1.0)),
    # Padding, cropping and nearest repeats read no forward tensor in their gradients
    # (measured flat: 12 / 16 MiB and 16 / 16 MiB at 2 / 6 pairs, where keeping input and
    # output gave 40 / 76 and 44 / 95).
    # SpatialDropout1D's mask is (batch, 1, channels): nothing of the sequence's size
    # (measured flat, 8 / 8 MiB).
    **dict.fromkeys(("ZeroPadding1D", "ZeroPadding3D", "Cropping1D", "Cropping3D", "UpSampling1D",
                     "SpatialDropout1D"), LayerRule()),
    # x * noise (GaussianDropout) and AlphaDropout's a * (x * kept + alpha' * (1 - kept)) + b
    # keep a noise or mask tensor of the output's size and dtype for the gradient; the
    # latter makes the uniform draw, the float mask and 1 - mask while it runs (measured
    # 20.5-32 MiB over four runs at 6 layers, 19.4 without the scratch). x + noise
    # (GaussianNoise) needs nothing for its gradient, yet measured about one output per
    # layer kept (8 -> 14-16 MiB from 2 to 6 layers); counted as measured, not explained.
    "GaussianNoise": LayerRule(BackwardRule(extra_outputs=1.0)),
    "GaussianDropout": LayerRule(BackwardRule(extra_outputs=1.0)),
    "AlphaDropout": LayerRule(BackwardRule(extra_outputs=1.0, forward_scratch=2.0)),
    # x / sqrt(sum(x^2)): the gradient reads x (and the small norm).
    "UnitNormalization": LayerRule(KEEPS_INPUT),
    # Keras 3 GroupNormalization: casts x (viewed as groups) to float32, moments of it
    # (Square reads x), then x * inv + res with inv and res per sample and group: like
    # BatchNormalization, the (float32) input once. No inference form: a frozen one still
    # normalizes by the sample's own moments. Measured (archive/probes/probe_layers.py gn;
    # runs at 2 layers differ by 20 %): 2.0 MiB, one float32 feature map, per layer in
    # float32 and mixed_bfloat16. One input-sized backward temporary, not BN's two:
    # float32 b32 10-12 / 20 MiB at 2 / 6 layers (two would be 15.1 / 23.8, one 13.0 /
    # 21.6), b64 24 / 40 (two: 25.9 / 43.2); mixed_bfloat16 11-13 / 19-21 (one: 11.9 / 20.5).
    "GroupNormalization": LayerRule(BackwardRule(keeps_input=True, backward_scratch=1.0, upcasts=True),
                                    normalization=True),
    # The gradient of an element-wise max or min selects by comparing the inputs: both kept.
    "Maximum": LayerRule(KEEPS_INPUT),
    "Minimum": LayerRule(KEEPS_INPUT),
    # Preprocessing and augmentation layers inside a model: they act on the model's input,
    # which needs no gradient, and have no weights, so no backward pass reaches them; each
    # makes its output (image transforms via ImageProjectiveTransformV3).
    **dict.fromkeys(("RandomFlip", "RandomRotation", "RandomZoom", "RandomTranslation", "RandomContrast",
                     "RandomBrightness", "RandomCrop", "Resizing", "CenterCrop"), LayerRule()),
}
# What the engine assumes of a layer type without an entry.
UNKNOWN_LAYER = LayerRule(UNKNOWN)


def is_known_layer_type(layer_type: str) -> bool:
    return layer_type in LAYER_RULES


def layer_rule(layer_type: str) -> LayerRule:
    """The layer type's entry in ``LAYER_RULES`` (``UNKNOWN_LAYER`` without one)."""
    return LAYER_RULES.get(layer_type, UNKNOWN_LAYER)


def rule_for(layer_type: str, activation: str = "linear") -> tuple[BackwardRule, BackwardRule, bool]:
    """Returns ``(layer rule, fused activation rule, known)`` for one layer call.

    Unknown layer types are treated as keeping their input and output (an
    over-estimate, the safe side) and reported as unknown.
    """
    act = ACTIVATION_RULES.get(activation)
    known_act = act is not None
    if act is None:
        act = UNKNOWN
    if layer_type == "Activation":
        return act, NOTHING, known_act
    layer = LAYER_RULES.get(layer_type)
    if layer is None:
        return UNKNOWN, act, False
    return layer.backward, act, known_act
