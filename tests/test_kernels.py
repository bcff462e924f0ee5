"""The float16 CPU kernels' temporaries (calc.facts.kernels) and how the walk counts them."""

from __future__ import annotations

from calc.estimate import counted_bytes, estimate_memory
from calc.facts.kernels import im2col_buffer_bytes, matmul_upcasts
from calc.types import LayerStats, ModelProfile, TrainingConfig

MIB = 2 ** 20


def conv(out_side: int, c_in: int, c_out: int, k: int = 1, stride: int = 1, layer_type: str = "Conv2D",
         weights: tuple[int, ...] | None = None) -> LayerStats:
    return LayerStats(name="conv", layer_type=layer_type, input_ids=(0,), output_ids=(1,),
                      output_shapes=((out_side, out_side, c_out),),
                      trainable_weight_elements=weights or (k * k * c_in * c_out, c_out),
                      detail=f"kernel_size=({k}, {k}) strides=({stride}, {stride})")


def test_the_buffers_of_the_two_traced_peaks():
    # Shapes TensorFlow's profiler named at the peaks of NASNetMobile 96 px b4 and
    # MobileNetV2 96 px b2 under mixed_float16 (docs/notes/float16-kernels.md).
    assert im2col_buffer_bytes(conv(47, 32, 11), 32, True, True) == 165 * 2209 * 32 * 2
    assert im2col_buffer_bytes(conv(24, 144, 24), 144, True, True) == 157 * 576 * 144 * 2


def test_a_large_work_unit_takes_one_image_for_the_input_gradient():
    # 14x14, 3x3 x 256 -> 256: one image's matrices hold 196*2304 + 196*256 + 2304*256
    # elements, over the 128 Ki-element (256 KiB of float16) threshold, so the input
    # gradient contracts one image at a time; the filter gradient still shards the batch,
    # ceil(15 Mi elements / unit) = 15 images (measured 12.92 MiB).
    unit = 196 * 2304 + 196 * 256 + 2304 * 256
    shard = -(-(15 * MIB) // unit)
    assert shard == 15
    layer = conv(14, 256, 256, k=3)
    assert im2col_buffer_bytes(layer, 256, filter_grad=False, input_grad=True) == 196 * 2304 * 2
    assert im2col_buffer_bytes(layer, 256, filter_grad=True, input_grad=False) == shard * 196 * 2304 * 2
    assert im2col_buffer_bytes(layer, 256, filter_grad=False, input_grad=False) == 0


def test_grouped_and_separable_convolutions():
    # ConvNeXt's depthwise Conv2D (groups = channels) runs through XLA: no im2col buffer.
    depthwise = conv(14, 384, 384, k=7, weights=(7 * 7 * 1 * 384, 384))
    assert im2col_buffer_bytes(depthwise, 384, True, True) == 0
    # SeparableConv2D: the buffer belongs to its pointwise 1x1 convolution.
    separable = conv(24, 11, 11, k=7, layer_type="SeparableConv2D", weights=(7 * 7 * 11, 11 * 11, 11))
    unit = 576 * 11 + 576 * 11 + 11 * 11
    assert im2col_buffer_bytes(separable, 11, True, True) == -(-(15 * MIB) // unit) * 576 * 11 * 2


def test_a_float16_matmul_copies_its_operands_and_result_to_float32():
    head = LayerStats(name="predictions", layer_type="Dense", input_ids=(0,), output_ids=(1,),
                      output_shapes=((1000,),), trainable_weight_elements=(1280 * 1000, 1000))
    assert matmul_upcasts(head, 1280, 1000) == (4 * 1280 * 1000, (4 * 1280, 4 * 1000))
    assert matmul_upcasts(conv(24, 144, 24), 144, 24) == (0, ())


def _two_convs() -> ModelProfile:
    # input 32x32x16 -> 1x1 conv 16->16 -> 1x1 conv 16->16 -> global pool -> Dense(10)
    layers = (
        LayerStats(name="c1", layer_type="Conv2D", input_ids=(0,), output_ids=(1,), output_shapes=((32, 32, 16),),
                   trainable_weight_elements=(256, 16), detail="kernel_size=(1, 1) strides=(1, 1)"),
        LayerStats(name="c2", layer_type="Conv2D", input_ids=(1,), output_ids=(2,), output_shapes=((32, 32, 16),),
                   trainable_weight_elements=(256, 16), detail="kernel_size=(1, 1) strides=(1, 1)"),
        LayerStats(name="pool", layer_type="GlobalAveragePooling2D", input_ids=(2,), output_ids=(3,),
                   output_shapes=((16,),)),
        LayerStats(name="head", layer_type="Dense", input_ids=(3,), output_ids=(4,), output_shapes=((10,),),
                   trainable_weight_elements=(160, 10), activation="softmax"),
    )
    return ModelProfile(name="two_convs", input_shape=(32, 32, 16), layers=layers,
                        tensor_elements=(16384, 16384, 16384, 16, 10), input_ids=(0,), output_ids=(4,))


def test_only_mixed_float16_steps_hold_the_buffer():
    profile = _two_convs()
    unit = 1024 * 16 + 1024 * 16 + 16 * 16
    buffer = -(-(15 * MIB) // unit) * 1024 * 16 * 2  # about 30 MiB, far above the step's tensors
    f16 = estimate_memory(profile, TrainingConfig(batch_size=2, optimizer="sgd", precision="mixed_float16"))
    bf16 = estimate_memory(profile, TrainingConfig(batch_size=2, optimizer="sgd", precision="mixed_bfloat16"))
    assert f16.peak_phase.startswith("backward c")
    assert f16.backward_transient_bytes >= counted_bytes(buffer)
    assert f16.peak_bytes - bf16.peak_bytes >= counted_bytes(buffer) - 2 * MIB
    assert bf16.peak_bytes < 4 * MIB
