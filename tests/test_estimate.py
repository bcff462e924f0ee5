"""Pure tests of the estimate on hand-built profiles: invariants and formulas."""

from dataclasses import replace

import pytest

from calc.estimate import (
    counted_bytes,
    estimate_memory,
    float16_kernel_bytes,
    largest_fixed_request_bytes,
    max_batch_size,
    memory_curve,
    step_timeline,
    untracked_below,
)
from calc.facts.allocator import ALLOCATION_GRANULE, FRAGMENTATION, UNTRACKED_BELOW
from calc.facts.optimizers import slots_per_variable
from calc.types import Device, Optimizer, OptimizerOptions, Precision, TrainingConfig, TrainMode
from tests.profiles import chain_profile

PROFILE = chain_profile()
BACKBONE = chain_profile(backbone_layers=3)


def expected_counted(nbytes, below=262144):
    """Counted on the CPU; ``below=0``: on a GPU, whose BFC allocator counts every request."""
    if nbytes < below:
        return 0
    rounded = -(-nbytes // 256) * 256
    if rounded >= 128 * 2**20:
        return rounded
    return rounded + int(rounded * 0.08) // 256 * 256


@pytest.mark.parametrize("nbytes", [0, 1, 262143, 262144, 262145, 10**6, 128 * 2**20, 10**9])
def test_counted_bytes_follows_the_allocator_rules(nbytes):
    assert UNTRACKED_BELOW == 262144 and ALLOCATION_GRANULE == 256 and FRAGMENTATION == 0.08
    assert counted_bytes(nbytes) == expected_counted(nbytes)


@pytest.mark.parametrize("optimizer", list(Optimizer))
@pytest.mark.parametrize("precision", list(Precision))
@pytest.mark.parametrize("batch", [1, 7, 64, 1000])
def test_components_sum_to_peak(optimizer, precision, batch):
    b = estimate_memory(PROFILE, TrainingConfig(batch_size=batch, optimizer=optimizer, precision=precision))
    assert sum(b.components().values()) == b.peak_bytes
    assert all(v >= 0 for v in b.components().values())


def test_small_requests_count_on_a_gpu_only():
    assert untracked_below(Device.CPU) == untracked_below(Device.CPU_FP16) == 262144
    assert untracked_below(Device.GPU) == 0
    for nbytes in (256, 1000, 65536, 262143):
        assert counted_bytes(nbytes, untracked_below(Device.CPU)) == 0
        assert counted_bytes(nbytes, untracked_below(Device.GPU)) == expected_counted(nbytes, below=0) > 0
    weights = [147456, 64, 256, 256, 256, 256, 655360, 10]
    trainable = [147456, 64, 256, 256, 655360, 10]
    gpu = estimate_memory(PROFILE, TrainingConfig(batch_size=1, optimizer="adam", device="gpu"))
    cpu = estimate_memory(PROFILE, TrainingConfig(batch_size=1, optimizer="adam", device="cpu"))
    # The biases and normalization vectors (256 B to 2.5 KiB) count on the GPU.
    assert gpu.weights_bytes == sum(expected_counted(4 * e, below=0) for e in weights) > cpu.weights_bytes
    assert gpu.optimizer_state_bytes == 2 * sum(expected_counted(4 * e, below=0) for e in trainable)
    assert gpu.peak_bytes > cpu.peak_bytes


def test_replay_counts_small_requests_without_placing_them():
    from calc.engine.allocator import BFC
    from calc.engine.events import Alloc, Free
    from calc.estimate import replay

    events = [Alloc(1, 0, 1000), Alloc(2, 0, 4 << 20), Free(1), Alloc(3, 0, 300), Free(2), Free(3)]
    gpu, cpu = BFC(), BFC()
    replay(gpu, events, 1, below=untracked_below(Device.GPU))
    replay(cpu, events, 1)
    # 1000 B rounds to 1024 and is counted beside the 4 MiB chunk; on the CPU it is not.
    assert gpu.peak == (4 << 20) + 1024 and cpu.peak == 4 << 20
    assert gpu.in_use == cpu.in_use == 0
    assert gpu.regions == cpu.regions  # the small ones took no room in the regions


def test_weights_and_optimizer_state_by_formula():
    weights = [147456, 64, 256, 256, 256, 256, 655360, 10]
    trainable = [147456, 64, 256, 256, 655360, 10]
    for opt, slots in [("sgd", 0), ("adam", 2), ("rmsprop", 1), ("adadelta", 2)]:
        b = estimate_memory(PROFILE, TrainingConfig(batch_size=4, optimizer=opt))
        assert b.weights_bytes == sum(expected_counted(4 * e) for e in weights)
        assert b.optimizer_state_bytes == slots * sum(expected_counted(4 * e) for e in trainable)


def test_slot_counts_follow_keras_options():
    none = OptimizerOptions()
    assert slots_per_variable(Optimizer.SGD, none, 1) == 0
    assert slots_per_variable(Optimizer.SGD, OptimizerOptions(momentum=True), 1) == 1
    assert slots_per_variable(Optimizer.ADAM, OptimizerOptions(amsgrad=True), 1) == 3
    assert slots_per_variable(Optimizer.RMSPROP, OptimizerOptions(momentum=True, centered=True), 1) == 3
    assert slots_per_variable(Optimizer.ADAMW, OptimizerOptions(use_ema=True), 4) == 4



def test_every_optimizer_has_one_facts_entry_whose_options_are_real_switches():
    # Adding an optimizer: a member of calc.types.Optimizer and its entry in calc.facts.optimizers.
    import dataclasses

    from calc.facts.optimizers import OPTIMIZERS, applicable_options

    assert set(OPTIMIZERS) == set(Optimizer)
    switches = {f.name for f in dataclasses.fields(OptimizerOptions)} - {"use_ema"}
    for optimizer in Optimizer:
        assert set(applicable_options(optimizer)) <= switches
    assert applicable_options("rmsprop") == ["momentum", "centered"] and applicable_options("adam") == ["amsgrad"]

def test_input_batch_is_float32_images_and_int64_labels():
    b = estimate_memory(PROFILE, TrainingConfig(batch_size=64, optimizer="sgd"))
    assert b.input_batch_bytes == expected_counted(4 * 65536 * 64) + expected_counted(8 * 64)


def test_memory_grows_with_batch():
    config = TrainingConfig(batch_size=1, optimizer="adam")
    curve = memory_curve(PROFILE, config, range(1, 300))
    assert all(a <= b for a, b in zip(curve, curve[1:]))
    assert curve[-1] > curve[0]


def test_curve_matches_single_estimates():
    for b in (1, 3, 17, 128):
        config = TrainingConfig(batch_size=b, optimizer="adam", precision="mixed_bfloat16")
        assert memory_curve(PROFILE, config, [b]) == [estimate_memory(PROFILE, config).peak_bytes]


CONV_RELU = chain_profile(
    sizes=(65536,) * 6,
    types=("Conv2D", "ReLU") * 3,
    weights=((147456, 64), ()) * 3,
)


def test_mixed_precision_shrinks_activations_not_weights_or_state():
    f32 = estimate_memory(CONV_RELU, TrainingConfig(batch_size=256, optimizer="adam"))
    for p in ("mixed_float16", "mixed_bfloat16"):
        mixed = estimate_memory(CONV_RELU, TrainingConfig(batch_size=256, optimizer="adam", precision=p))
        assert mixed.weights_bytes == f32.weights_bytes
        assert mixed.optimizer_state_bytes == f32.optimizer_state_bytes
        # The batch's tensors (kept and transient; the peak's phase may differ) shrink.
        assert (mixed.activations_bytes + mixed.backward_transient_bytes
                < f32.activations_bytes + f32.backward_transient_bytes)
        assert mixed.input_batch_bytes == f32.input_batch_bytes
        assert mixed.peak_bytes < f32.peak_bytes


def test_batchnorm_under_mixed_precision_keeps_a_float32_copy():
    # keras/src/backend/tensorflow/nn.py moments(): x is cast to float32 first.
    bn = chain_profile(types=("Conv2D", "BatchNormalization"), sizes=(65536, 65536), weights=((147456, 64), ()))
    f32 = estimate_memory(bn, TrainingConfig(batch_size=64, optimizer="sgd"))
    f16 = estimate_memory(bn, TrainingConfig(batch_size=64, optimizer="sgd", precision="mixed_float16"))
    # float32: the conv output (kept by BN); mixed: its 16-bit self plus a float32 copy.
    assert f16.activations_bytes > f32.activations_bytes


def test_frozen_backbone_drops_its_gradients_state_and_kept_activations():
    full = estimate_memory(BACKBONE, TrainingConfig(batch_size=128, optimizer="adam"))
    frozen = estimate_memory(BACKBONE, TrainingConfig(batch_size=128, optimizer="adam", train_mode=TrainMode.FROZEN_BACKBONE))
    # Adam's two slots of the head's kernel only (its bias is under 256 KiB), each in the
    # chunk the simulated pool gives it: its size rounded, or a hole of up to a quarter more.
    head_slot = 4 * 655360
    assert 2 * head_slot <= frozen.optimizer_state_bytes <= 2 * head_slot * 5 // 4
    assert frozen.peak_bytes < full.peak_bytes
    # Every variable stays; full training counts them at +8 %, a frozen step in their chunks.
    exact = sum(4 * e for layer in BACKBONE.layers for e in (*layer.trainable_weight_elements,
                                                              *layer.non_trainable_weight_elements) if 4 * e >= 262144)
    assert exact <= frozen.weights_bytes <= exact * 5 // 4
    assert full.weights_bytes == sum(expected_counted(4 * e) for layer in BACKBONE.layers
                                     for e in (*layer.trainable_weight_elements, *layer.non_trainable_weight_elements))


def test_frozen_backbone_needs_a_backbone():
    with pytest.raises(ValueError, match="backbone"):
        estimate_memory(PROFILE, TrainingConfig(train_mode="frozen_backbone"))


def test_last_n_layers_trains_less():
    all_ = estimate_memory(PROFILE, TrainingConfig(batch_size=32, optimizer="adam"))
    last1 = estimate_memory(PROFILE, TrainingConfig(batch_size=32, optimizer="adam", train_mode="last_n", last_n_layers=1))
    head_slot = 4 * 655360  # Adam's two slots of the last layer's kernel, in their simulated chunks
    assert 2 * head_slot <= last1.optimizer_state_bytes <= 2 * head_slot * 5 // 4 < all_.optimizer_state_bytes
    assert last1.peak_bytes <= all_.peak_bytes


def test_data_parallel_splits_the_batch():
    one = estimate_memory(PROFILE, TrainingConfig(batch_size=32, optimizer="sgd"))
    four = estimate_memory(PROFILE, TrainingConfig(batch_size=128, optimizer="sgd", num_gpus=4))
    assert four.peak_bytes == one.peak_bytes


def test_gradient_accumulation_adds_an_accumulator_and_one_zeros_constant_per_shape():
    # Three 4 MiB kernels of one shape and one of another: 4 accumulators, and the
    # zeros constants that reset them (TensorFlow folds them; equal ones are merged): 2.
    kernel, other = 1 << 20, 1 << 19
    profile = chain_profile(sizes=(4096,) * 4, types=("Dense",) * 4, weights=((kernel,),) * 3 + ((other,),),
                            head_weights=(40960,))
    plain = estimate_memory(profile, TrainingConfig(batch_size=8, optimizer="adam"))
    acc = estimate_memory(profile, TrainingConfig(batch_size=8, optimizer="adam", gradient_accumulation_steps=4))
    per_variable = 3 * expected_counted(4 * kernel) + expected_counted(4 * other) + expected_counted(4 * 40960)
    constants = expected_counted(4 * kernel) + expected_counted(4 * other) + expected_counted(4 * 40960)
    assert plain.optimizer_state_bytes == 2 * per_variable
    assert acc.optimizer_state_bytes == 3 * per_variable + constants


def test_gradient_accumulation_does_not_hold_back_the_updates():
    # Its cond's predicate is the step counter, so each update runs when its gradient
    # exists (and SGD momentum's early products are made at the start), unlike
    # mixed_float16's cond, which needs every gradient finite first.
    big = chain_profile(sizes=(4096,) * 3, types=("Dense",) * 3, weights=((1 << 20,),) * 3, head_weights=(40960,))
    momentum = OptimizerOptions(momentum=True)
    acc = estimate_memory(big, TrainingConfig(batch_size=1, optimizer="sgd", optimizer_options=momentum,
                                              gradient_accumulation_steps=2))
    f16 = estimate_memory(big, TrainingConfig(batch_size=1, optimizer="sgd", optimizer_options=momentum,
                                              precision="mixed_float16"))
    kernel = expected_counted(4 << 20)
    assert acc.other_bytes == 3 * (kernel * 3 // 4 // 256 * 256)  # made at the start, 3/4 counted
    assert f16.other_bytes == int(0.7 * 3 * kernel) // 256 * 256  # made in the update branch instead


@pytest.mark.parametrize("budget_mib", [8, 20, 64, 500, 4096])
@pytest.mark.parametrize("gpus", [1, 2])
def test_max_batch_fits_and_the_next_does_not(budget_mib, gpus):
    config = TrainingConfig(batch_size=gpus, optimizer="adam", num_gpus=gpus)
    budget = budget_mib * 2**20
    overhead, margin = 2**20, 0.1
    best = max_batch_size(PROFILE, config, budget, overhead_bytes=overhead, safety_margin=margin)
    usable = int(budget * 0.9) - overhead
    if best:
        assert memory_curve(PROFILE, config, [best])[0] <= usable
    assert memory_curve(PROFILE, config, [best + gpus])[0] > usable
    assert best % gpus == 0


def test_max_batch_zero_when_weights_alone_do_not_fit():
    config = TrainingConfig(batch_size=1, optimizer="adam")
    assert max_batch_size(PROFILE, config, 2**20) == 0


@pytest.mark.parametrize("margin", [-0.1, 1.0, 2])
def test_bad_margin(margin):
    with pytest.raises(ValueError, match="safety_margin"):
        max_batch_size(PROFILE, TrainingConfig(), 2**30, safety_margin=margin)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 0}, "batch_size must be a positive integer. Received: batch_size=0"),
        ({"batch_size": -3}, "batch_size=-3"),
        ({"batch_size": 2.5}, "batch_size=2.5"),
        ({"batch_size": "8"}, "batch_size='8'"),
        ({"batch_size": True}, "batch_size=True"),
        ({"num_gpus": 0}, "num_gpus"),
        ({"batch_size": 10, "num_gpus": 4}, "divisible"),
        ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps"),
        ({"train_mode": "last_n"}, "last_n_layers"),
        ({"optimizer": "adamx"}, "adamx"),
        ({"precision": "float16"}, "float16"),
    ],
)
def test_bad_config(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainingConfig(**kwargs)


def test_unknown_layer_types_are_reported_and_counted():
    from calc.types import LayerStats, ModelProfile

    base = chain_profile(types=("Conv2D", "MyFancyLayer", "ReLU"))
    b = estimate_memory(base, TrainingConfig(batch_size=8, optimizer="sgd"))
    known = estimate_memory(chain_profile(types=("Conv2D", "Add", "ReLU")), TrainingConfig(batch_size=8, optimizer="sgd"))
    assert b.peak_bytes > known.peak_bytes  # an unknown layer keeps its input and output
    from calc.estimate import plan_step

    assert "MyFancyLayer" in plan_step(base, TrainingConfig(batch_size=8, optimizer="sgd")).unknown_layer_types
    assert isinstance(base, ModelProfile) and isinstance(base.layers[0], LayerStats)


def test_vector_and_scalar_allocator_rules_agree():
    import numpy as np

    from calc.engine.counting import counted_array

    sizes = [0, 1, 262143, 262144, 262145, 10**6, 128 * 2**20 - 1, 128 * 2**20, 10**9]
    assert counted_array(np.array(sizes, dtype=np.int64)).tolist() == [expected_counted(n) for n in sizes]


def test_fit_on_gpu_agrees_with_its_parts():
    from calc.estimate import fit_on_gpu

    config = TrainingConfig(batch_size=16, optimizer="adam")
    fit = fit_on_gpu(PROFILE, config, 64 * 2**20, overhead_bytes=2**20, safety_margin=0.1)
    peak = estimate_memory(PROFILE, config).peak_bytes
    assert fit.needed_bytes == peak + 2**20 and fit.usable_bytes == int(64 * 2**20 * 0.9)
    assert fit.fits == (peak + 2**20 <= int(64 * 2**20 * 0.9))
    assert fit.max_batch == max_batch_size(PROFILE, config, 64 * 2**20, overhead_bytes=2**20, safety_margin=0.1)


# --- update temporaries made before the gradient, grouped-conv XLA scratch, merged twins ---

from calc.facts.optimizers import early_temporaries  # noqa: E402
from calc.types import LayerStats, ModelProfile  # noqa: E402


def test_early_temporaries_follow_each_update_step():
    none = OptimizerOptions()
    assert early_temporaries(Optimizer.SGD, none) == 0
    assert early_temporaries(Optimizer.SGD, OptimizerOptions(momentum=True)) == 1
    assert early_temporaries(Optimizer.ADAM, none) == 0
    assert early_temporaries(Optimizer.ADAM, OptimizerOptions(use_ema=True)) == 1
    assert early_temporaries(Optimizer.RMSPROP, OptimizerOptions(momentum=True, centered=True)) == 3
    assert early_temporaries(Optimizer.ADADELTA, none) == 3
    assert early_temporaries(Optimizer.FTRL, none) == 2
    assert early_temporaries(Optimizer.LION, none) == 2
    assert early_temporaries(Optimizer.ADAMW, none) == 1
    assert early_temporaries(Optimizer.ADAMW, none, mixed_precision=True) == 0


def test_early_temporaries_are_alive_through_the_forward_pass():
    # SGD with momentum computes m * momentum for every variable at the step's start.
    big = chain_profile(sizes=(4096,) * 3, types=("Dense",) * 3, weights=((1 << 20,),) * 3, head_weights=(40960,))
    plain = estimate_memory(big, TrainingConfig(batch_size=1, optimizer="sgd"))
    momentum = estimate_memory(big, TrainingConfig(batch_size=1, optimizer="sgd", optimizer_options=OptimizerOptions(momentum=True)))
    per_kernel = expected_counted(4 << 20)
    assert momentum.optimizer_state_bytes == 3 * per_kernel + expected_counted(4 * 40960)
    # The temporaries of the three kernels not yet updated, three quarters of each counted
    # (calc.facts.optimizers.EARLY_TEMPORARIES_ALIVE), in whole 256-byte granules.
    assert momentum.other_bytes == 3 * (per_kernel * 3 // 4 // 256 * 256)
    assert momentum.peak_bytes > plain.peak_bytes + momentum.optimizer_state_bytes
    # Inside LossScaleOptimizer's cond (mixed_float16) they run only at the update, where the
    # branch's temporaries of every variable are counted instead (next test). Layers without
    # spatial shapes, so that no float16 kernel buffer (calc.facts.kernels) outgrows the update.
    big = chain_profile(sizes=(4096,) * 3, types=("Conv2D",) * 3, weights=((1 << 20,),) * 3, head_weights=(40960,))
    f16 = estimate_memory(big, TrainingConfig(batch_size=1, optimizer="sgd", precision="mixed_float16",
                                              optimizer_options=OptimizerOptions(momentum=True)))
    assert f16.peak_phase == "optimizer update"
    assert f16.other_bytes == int(0.7 * 3 * per_kernel) // 256 * 256


@pytest.mark.parametrize("optimizer, options, per_variable, scratch", [
    ("rmsprop", {}, 1.0, 3),  # three buffers per update (update_scratch), one more per variable together
    ("sgd", {}, 0.0, 1),
    ("sgd", {"momentum": True}, 0.7, 2),
    ("adadelta", {"use_ema": True}, 1.7 + 0.2, 5),
])
def test_mixed_float16_updates_start_together(optimizer, options, per_variable, scratch):
    # The loss scale's cond needs every gradient; then every update is ready at once and the
    # peak holds update temporaries of all variables (branch_temporaries in calc.facts.optimizers):
    # counted per variable beyond its gradient, or one update's scratch if that is larger.
    # (Layers without spatial shapes: no float16 kernel buffer, calc.facts.kernels, outgrows it.)
    big = chain_profile(sizes=(4096,) * 3, types=("Conv2D",) * 3, weights=((1 << 20,),) * 3, head_weights=(40960,))
    b = estimate_memory(big, TrainingConfig(batch_size=1, optimizer=optimizer, precision="mixed_float16",
                                            optimizer_options=OptimizerOptions(**options)))
    kernel = expected_counted(4 << 20)  # the head's 160 KiB are below the tracked size
    together = int(per_variable * 3 * kernel) // 256 * 256
    assert b.peak_phase == "optimizer update"
    assert b.gradients_bytes == 3 * kernel
    assert b.other_bytes == together
    assert b.backward_transient_bytes == max(0, scratch * kernel - together)


@pytest.mark.parametrize("optimizer, scratch", [("sgd", 1), ("adam", 2), ("adadelta", 5)])
def test_the_last_update_counts_its_pending_gradient_once(optimizer, scratch):
    # float32: the updates follow the gradients (GRADIENT_LAG), so only the first layers'
    # updates are pending at the end. Their gradients are counted under gradients; the
    # update's scratch (update_scratch, the gradient included) adds only the buffers beyond
    # the gradient, less the early temporaries already counted. An MLP whose first kernel
    # dominates peaks there (mlp.keras b64 sgd was +45 % with the gradient counted twice).
    from calc.facts.optimizers import early_temporaries

    mlp = chain_profile(sizes=(4096, 64, 64), types=("Dense",) * 3,
                        weights=((4096 * 8192,), (64 * 64,), (64 * 64,)), head_weights=(640,))
    config = TrainingConfig(batch_size=1, optimizer=optimizer)
    kernel = expected_counted(4 * 4096 * 8192)
    early = early_temporaries(Optimizer(optimizer), OptimizerOptions())
    *_, (last_backward, gradient_held), (update, at_update) = step_timeline(mlp, config)
    assert (last_backward, update) == ("backward l0", "optimizer update")
    assert at_update - gradient_held == (scratch - early - 1) * kernel
    b = estimate_memory(mlp, config)
    assert b.gradients_bytes == kernel and b.peak_bytes - b.allocator_bytes == at_update  # the walk


def _grouped_conv_profile(groups_of_one: bool, c: int = 512) -> ModelProfile:
    hw, k = 36, 49
    kernel = k * c if groups_of_one else k * 2 * c
    conv = LayerStats(name="dw", layer_type="Conv2D", input_ids=(0,), output_ids=(1,), output_shapes=((6, 6, c),),
                      trainable_weight_elements=(kernel, c), detail="kernel_size=(7, 7) strides=(1, 1)")
    head = LayerStats(name="head", layer_type="Dense", input_ids=(1,), output_ids=(2,), output_shapes=((10,),),
                      trainable_weight_elements=(hw * c * 10, 10), activation="softmax")
    return ModelProfile(name="g", input_shape=(6, 6, c), layers=(conv, head), tensor_elements=(hw * c, hw * c, 10),
                        input_ids=(0,), output_ids=(2,))


def test_depthwise_as_grouped_conv_adds_xla_dense_filter_gradient():
    # Keras compiles grouped convs with XLA; with one channel per group the filter
    # gradient expands to a dense 7x7xCxC filter (archive/probes/probe_grouped_conv.py).
    config = TrainingConfig(batch_size=1, optimizer="sgd")
    depthwise = estimate_memory(_grouped_conv_profile(True), config)
    dense_filter = 4 * 49 * 512 * 512
    assert depthwise.backward_transient_bytes >= 2 * dense_filter
    # The dense filter is float32 under mixed precision too (probe: the same 120 MiB
    # under float32 and mixed_bfloat16 at C=512).
    bf16 = estimate_memory(_grouped_conv_profile(True), TrainingConfig(batch_size=1, optimizer="sgd", precision="mixed_bfloat16"))
    assert bf16.backward_transient_bytes >= 2 * dense_filter
    two_per_group = estimate_memory(_grouped_conv_profile(False), config)
    assert two_per_group.backward_transient_bytes < dense_filter


def test_the_largest_batch_independent_request_is_xlas_dense_filter_gradient():
    # Two dense float32 7x7xCxC filters in one request: 98 MiB at C=512, 220.5 MiB at
    # C=768 (ConvNeXtTiny's last stage), at every batch; nothing without groups of one
    # channel, and 0 unless every layer trains.
    full = TrainingConfig(batch_size=4, optimizer="adam")
    for c in (512, 768):
        assert largest_fixed_request_bytes(_grouped_conv_profile(True, c), full) == 2 * 4 * 49 * c * c
    assert largest_fixed_request_bytes(_grouped_conv_profile(False, 768), full) == 0
    last_one = TrainingConfig(batch_size=4, optimizer="adam", train_mode="last_n", last_n_layers=1)
    assert largest_fixed_request_bytes(_grouped_conv_profile(True, 768), last_one) == 0


def test_a_gpu_has_neither_xlas_cpu_filter_nor_the_float16_cpu_kernels_buffers():
    # XLA's GPU backend hands grouped convs to cuDNN, and cuDNN/cuBLAS compute float16
    # themselves (measured on an H100: calc/data/gpu_tf_h100.json).
    profile = _grouped_conv_profile(True, 512)
    cpu, gpu = (TrainingConfig(batch_size=1, optimizer="sgd", device=d) for d in ("cpu", "gpu"))
    dense_filter = 4 * 49 * 512 * 512
    assert estimate_memory(profile, cpu).backward_transient_bytes >= 2 * dense_filter
    assert estimate_memory(profile, gpu).backward_transient_bytes < dense_filter
    assert largest_fixed_request_bytes(profile, gpu) == 0
    half_cpu, half_gpu = (replace(c, precision="mixed_float16") for c in (cpu, gpu))
    head_kernel = 36 * 512 * 10
    forward, _ = float16_kernel_bytes(profile, half_cpu)["head"]  # MatMul's float32 copy of the kernel, at least
    assert forward >= 4 * head_kernel
    assert float16_kernel_bytes(profile, half_gpu) == {}
    assert estimate_memory(profile, half_gpu).peak_bytes < estimate_memory(profile, half_cpu).peak_bytes


def test_a_cpu_with_avx512_fp16_has_xlas_filter_but_not_the_float16_buffers():
    # archive/probes/probe_f16_kernels.py on such a CPU: no im2col buffer, no float32 copies.
    profile = _grouped_conv_profile(True, 512)
    cpu, fp16 = (TrainingConfig(batch_size=1, optimizer="sgd", device=d) for d in ("cpu", "cpu_fp16"))
    assert largest_fixed_request_bytes(profile, fp16) == largest_fixed_request_bytes(profile, cpu) > 0
    half_cpu, half_fp16 = (replace(c, precision="mixed_float16") for c in (cpu, fp16))
    assert float16_kernel_bytes(profile, half_cpu) and float16_kernel_bytes(profile, half_fp16) == {}
    assert estimate_memory(profile, fp16) == estimate_memory(profile, cpu)  # float32: the same kernels


def test_the_local_cpu_kernels_are_read_from_the_cpu_flags(tmp_path):
    from calc.types import Device
    from calc.workers.measure import local_cpu_device

    flags = "flags\t\t: fpu vme avx2 avx512f avx512bw {}amx_tile\n"
    older, newer = tmp_path / "older", tmp_path / "newer"
    older.write_text("processor\t: 0\n" + flags.format(""))
    newer.write_text("processor\t: 0\n" + flags.format("avx512_fp16 "))
    assert local_cpu_device(str(older)) is Device.CPU
    assert local_cpu_device(str(newer)) is Device.CPU_FP16
    assert local_cpu_device(str(tmp_path / "missing")) is Device.CPU


def test_a_case_recorded_with_its_kernels_is_validated_with_them():
    from calc.types import Device
    from calc.validation import measured_device

    cpu_file = {"environment": {"device": "CPU:0"}}
    assert measured_device(cpu_file) is Device.CPU
    assert measured_device(cpu_file, {"kernels": "cpu_fp16"}) is Device.CPU_FP16
    assert measured_device(cpu_file, {"kernels": "tpu"}) is Device.CPU  # unknown: the file's
    assert measured_device({"environment": {"device": "GPU:0 (NVIDIA H100)"}}, {}) is Device.GPU


def _twin_relu_profile(twins: bool) -> ModelProfile:
    """relu_b reads relu_a's input (twins) or relu_a's output (chained)."""
    n = 1 << 16
    layers = [
        LayerStats(name="conv", layer_type="Conv2D", input_ids=(0,), output_ids=(1,), output_shapes=((16, 16, 256),),
                   trainable_weight_elements=(9 * 256 * 256, 256), detail="kernel_size=(3, 3) strides=(1, 1)"),
        LayerStats(name="relu_a", layer_type="Activation", input_ids=(1,), output_ids=(2,),
                   output_shapes=((16, 16, 256),), activation="relu"),
        LayerStats(name="relu_b", layer_type="Activation", input_ids=(1,) if twins else (2,), output_ids=(3,),
                   output_shapes=((16, 16, 256),), activation="relu"),
        LayerStats(name="add", layer_type="Add", input_ids=(2, 3), output_ids=(4,), output_shapes=((16, 16, 256),)),
        LayerStats(name="head", layer_type="Dense", input_ids=(4,), output_ids=(5,), output_shapes=((10,),),
                   trainable_weight_elements=(n * 10, 10), activation="softmax"),
    ]
    return ModelProfile(name="twins", input_shape=(16, 16, 256), layers=tuple(layers),
                        tensor_elements=(n, n, n, n, n, 10), input_ids=(0,), output_ids=(5,))


def test_identical_parameter_free_layers_on_one_input_are_merged():
    # TensorFlow's common-subexpression elimination runs one Relu for both layers.
    from calc.estimate import plan_step

    config = TrainingConfig(batch_size=16, optimizer="sgd")
    twins = plan_step(_twin_relu_profile(True), config).kept_per_sample
    chained = plan_step(_twin_relu_profile(False), config).kept_per_sample
    assert sum(twins) < sum(chained)
    assert twins[1] == 4 * (1 << 16) and twins[2] == 0  # relu_b's output is relu_a's


def test_one_walk_of_the_step_serves_every_batch_size(monkeypatch):
    from calc import estimate
    from calc.engine import plan

    walks = []
    real = plan.simulate
    monkeypatch.setattr(plan, "simulate", lambda p, c: walks.append(c.batch_size) or real(p, c))
    plan.cached_plan.cache_clear()
    profile = chain_profile()
    for batch in (1, 7, 64, 1000):
        estimate.estimate_memory(profile, TrainingConfig(batch_size=batch, optimizer="sgd"))
        estimate.max_batch_size(profile, TrainingConfig(batch_size=batch, optimizer="sgd"), 2**33)
    assert len(walks) == 1


def test_a_profiles_hash_is_computed_once_and_follows_equality():
    import copy
    import dataclasses
    import pickle

    profile = chain_profile()
    twin = chain_profile()
    assert twin == profile and hash(twin) == hash(profile)
    assert "_hash" in vars(profile)  # cached for the engine's lru_caches
    renamed = dataclasses.replace(profile, name="other")
    assert renamed != profile and "_hash" not in vars(renamed)
    # A pickled copy leaves the cache behind (string hashes differ between processes).
    assert "_hash" not in pickle.loads(pickle.dumps(profile)).__dict__
    assert hash(pickle.loads(pickle.dumps(profile))) == hash(profile) == hash(copy.deepcopy(profile))
    assert dataclasses.asdict(profile).keys() == {f.name for f in dataclasses.fields(profile)}


def test_a_cast_to_the_compute_dtype_is_free_in_float32_and_a_tensor_under_mixed_precision():
    # ops.dot_product_attention casts its float32 softmax back to the compute dtype
    # (calc.keras.profile._attention_steps): tf.cast to the same dtype returns its input.
    def chain(kind):
        return chain_profile(sizes=(65536,) * 3, types=("Conv2D", kind, "Einsum"), weights=((147456, 64), (), ()))

    for precision, extra in (("float32", 0), ("mixed_bfloat16", expected_counted(2 * 65536 * 4))):
        config = TrainingConfig(batch_size=4, optimizer="sgd", precision=precision)
        cast, view = step_timeline(chain("Cast"), config), step_timeline(chain("Identity"), config)
        added = {phase: a - b for (phase, a), (_, b) in zip(cast, view)}
        # Under mixed precision the cast's output is a second tensor beside its input while
        # the cast runs; never more than that one tensor.
        assert added["forward l1"] == extra and max(added.values()) == extra and min(added.values()) == 0


@pytest.mark.parametrize("optimizer, momentum, densifies", [("sgd", False, False), ("sgd", True, True),
                                                            ("adam", False, True)])
def test_an_embeddings_gradient_is_its_looked_up_rows_not_its_table(optimizer, momentum, densifies):
    # tf.IndexedSlices: one float32 row per token looked up (the output's gradient), held
    # until the table's update; Keras' optimizers densify it (table-sized tensors, the
    # update's scratch beyond the early temporaries) where they mix it with a slot, and run
    # one element-wise op on the rows (Adam's square, SGD's lr * g). Plain SGD scatters
    # lr * rows into the table: nothing table-sized.
    from calc.facts.optimizers import update_scratch

    tokens, width, vocabulary, batch = 64, 256, 8192, 16
    profile = chain_profile(sizes=(tokens * width, width, 16), types=("Embedding", "GlobalAveragePooling1D", "Dense"),
                            weights=((vocabulary * width,), (), (width * 16, 16)), head_weights=(160, 10))
    options = OptimizerOptions(momentum=momentum)
    b = estimate_memory(profile, TrainingConfig(batch_size=batch, optimizer=optimizer, optimizer_options=options))
    rows, table = expected_counted(4 * tokens * width * batch), expected_counted(4 * vocabulary * width)
    copies = update_scratch(Optimizer(optimizer), options) - early_temporaries(Optimizer(optimizer), options)
    # The rows (under gradients; the small Dense kernels are below the tracked size), and
    # the update's own temporaries: the densified table and one more rows-sized tensor.
    at_update = rows + (copies * table if densifies else 0) + rows
    resident = b.weights_bytes + b.optimizer_state_bytes + b.other_bytes + b.input_batch_bytes
    assert b.peak_bytes == resident + at_update
    if densifies:
        assert b.peak_phase == "optimizer update" and b.gradients_bytes == rows


def _moment(profile, config, phase):
    from calc.engine.walk import simulate

    return next(m for m in simulate(profile, config).moments if str(m.phase) == phase)


def test_an_input_kept_for_the_weight_gradient_alone_is_freed_before_the_input_gradient():
    # The executor runs Conv2DBackpropFilter before Conv2DBackpropInput; an input no one
    # else keeps is freed between them (traced: dcgan_discriminator b64, the LeakyReLU
    # output freed after the filter gradient, its buffer reused by the input gradient).
    from calc.engine.ledger import ACT, TRANS

    size, batch = 1 << 18, 4
    convs = chain_profile(sizes=(size,) * 3, types=("Conv2D",) * 3, weights=((9, 1),) * 3, head_weights=(10, 1))
    config = TrainingConfig(batch_size=batch, optimizer="sgd")
    tensor = expected_counted(4 * size * batch)
    m = _moment(convs, config, "backward l2")
    # Kept: l0's output (for l1's weights); l1's output, which only l2 kept, is gone (and
    # l2's, which the head kept, went with the head's backward). Transient: the gradients
    # of l2's output and of l1's.
    assert m.components(batch)[ACT] == tensor
    assert m.components(batch)[TRANS] == 2 * tensor


def test_an_elementwise_gradient_writes_into_its_output_gradient():
    # ReluGrad / LeakyReluGrad forward the buffer of the incoming gradient (traced:
    # dcgan_discriminator b64, no allocation for LeakyReluGrad).
    from calc.engine.ledger import TRANS

    size, batch = 1 << 18, 4
    for kind in ("LeakyReLU", "ReLU"):
        chain = chain_profile(sizes=(size,) * 3, types=("Conv2D", kind, "Conv2D"), weights=((9, 1), (), (9, 1)),
                              head_weights=(10, 1))
        m = _moment(chain, TrainingConfig(batch_size=batch, optimizer="sgd"), "backward l1")
        assert m.components(batch)[TRANS] == expected_counted(4 * size * batch)  # one gradient, not two


@pytest.mark.parametrize("below, pool, held", [
    ("Conv1D", "MaxPooling1D", True), ("Conv1D", "AveragePooling1D", True), ("Dense", "MaxPooling1D", True),
    ("Conv1D", "MaxPooling2D", False),  # a 2-D pool's is freed as the layer below finishes
    ("Conv1D without bias", "MaxPooling1D", False), ("AveragePooling1D", "MaxPooling1D", False),
])
def test_a_1d_pools_input_gradient_stays_until_the_step_ends_above_a_bias(below, pool, held):
    # tf.nn.max_pool1d / avg_pool1d wrap a 2-D pool in expand_dims and squeeze; above a
    # layer whose backward reduces a bias gradient, the buffer their gradient makes for the
    # input stays allocated until the step ends (traced: archive/probes/probe_pool1d.py, freed
    # in the step's last events); above a layer without a bias, or another pool, and for a
    # 2-D pool, it is freed when the layer below has run its backward.
    from calc.engine.ledger import TRANS
    from calc.estimate import UPDATE_PHASE

    size, batch = 1 << 18, 4
    kind, weights = {"Conv1D": ("Conv1D", (9, 1)), "Dense": ("Dense", (9, 1)),
                     "Conv1D without bias": ("Conv1D", (9,)), "AveragePooling1D": ("AveragePooling1D", ())}[below]
    chain = chain_profile(sizes=(size, size, size // 4, size // 4), types=("Conv1D", kind, pool, "Conv1D"),
                          weights=((9,), weights, (), (9, 1)), head_weights=(10, 1))  # l0 has no bias
    config = TrainingConfig(batch_size=batch, optimizer="sgd")
    pool_input_gradient = expected_counted(4 * size * batch)
    after_the_first_conv = _moment(chain, config, UPDATE_PHASE).components(batch)[TRANS]
    assert after_the_first_conv == (pool_input_gradient if held else 0)
    # While the layer below runs its backward, the pool's input gradient is its input either way.
    assert _moment(chain, config, "backward l1").components(batch)[TRANS] >= pool_input_gradient


def _as_sequences(profile: ModelProfile, steps: int = 64) -> ModelProfile:
    """The same layers with each output a (steps, channels) sequence instead of a flat vector."""
    return replace(profile, layers=tuple(
        replace(layer, output_shapes=tuple((steps, shape[0] // steps) for shape in layer.output_shapes))
        if layer.name != "head" else layer for layer in profile.layers))


@pytest.mark.parametrize("weights, sequences, held", [
    ((9, 1), True, 3), ((9,), True, 0), ((9, 1), False, 0),
])
def test_a_gradient_into_a_biased_sequence_layer_stays_until_the_step_ends(weights, sequences, held):
    # Dense layers on (batch, 1024, 32) sequences with a bias held every input gradient to
    # the step's end (traced, stop 21; unet1d's Conv1D too); without a bias, or on flat
    # vectors and 4-D maps, each is freed when the layer below has run its backward.
    from calc.engine.ledger import TRANS
    from calc.estimate import UPDATE_PHASE

    size, batch = 1 << 16, 4
    chain = chain_profile(sizes=(size,) * 3, types=("Dense",) * 3, weights=(weights,) * 3, head_weights=(10, 1))
    if sequences:
        chain = _as_sequences(chain)
    config = TrainingConfig(batch_size=batch, optimizer="sgd")
    # The head's, l2's and l1's input gradients flow into l2's, l1's and l0's bias reductions.
    assert _moment(chain, config, UPDATE_PHASE).components(batch)[TRANS] == held * expected_counted(4 * size * batch)


def test_a_normalizations_input_gradient_is_not_held_by_the_bias_below():
    # conv1d_audio's BatchNormalization input gradients (a sum of three paths) flowed into
    # biased Conv1Ds and were freed as usual; only the normalization's own incoming one waits.
    from calc.engine.ledger import TRANS
    from calc.estimate import UPDATE_PHASE

    size, batch = 1 << 16, 4
    chain = _as_sequences(chain_profile(sizes=(size,) * 3, types=("Dense", "BatchNormalization", "Dense"),
                                        weights=((9, 1), (), (9, 1)), head_weights=(10, 1)))
    config = TrainingConfig(batch_size=batch, optimizer="sgd")
    # Held: l2's input gradient (flowing into the normalization's beta), not l1's (into l0's bias).
    assert _moment(chain, config, UPDATE_PHASE).components(batch)[TRANS] == expected_counted(4 * size * batch)


@pytest.mark.parametrize("sequences", [True, False])
def test_a_sequence_concatenates_gradient_lives_until_its_earliest_input_is_reached(sequences):
    # unet1d (stop 21): the skip connection's slice of a Concatenate's gradient is taken
    # when the skip's producer runs its backward, so the whole gradient lives until then.
    from calc.engine.ledger import TRANS
    from calc.types import LayerStats

    size, batch = 1 << 16, 4
    base = chain_profile(sizes=(size,) * 3, types=("Conv2D",) * 3, weights=((9,),) * 3, head_weights=(10, 1))
    # Tensors: 0 input, 1-3 the three layers' outputs, 4 the Concatenate's of 1 and 3, 5 the head's.
    concat = LayerStats(name="cat", layer_type="Concatenate", input_ids=(1, 3), output_ids=(4,),
                        output_shapes=((2 * size,),))
    head = replace(base.layers[-1], input_ids=(4,), output_ids=(5,))
    profile = replace(base, layers=(*base.layers[:3], concat, head),
                      tensor_elements=(*base.tensor_elements[:4], 2 * size, 10), output_ids=(5,))
    if sequences:
        profile = _as_sequences(profile)
    config = TrainingConfig(batch_size=batch, optimizer="sgd")
    m = _moment(profile, config, "backward l1")
    # At l1's backward: the skip's slice (l0's output gradient), l1's output gradient, l1's
    # contribution to l0's output gradient (added into the slice), and, for sequences, the
    # Concatenate's whole output gradient still.
    expected = 3 * expected_counted(4 * size * batch) + (expected_counted(8 * size * batch) if sequences else 0)
    assert m.components(batch)[TRANS] == expected


@pytest.mark.parametrize("detail, copies_to_the_end", [
    ("kernel_size=(3,) strides=(1,) dilation_rate=(2,) padding=causal", 3),
    ("kernel_size=(3,) strides=(1,) padding=causal", 0),
    ("kernel_size=(3,) strides=(1,)", 0),
])
def test_a_dilated_conv1d_keeps_its_space_to_batch_copies_to_the_step_end(detail, copies_to_the_end):
    # TensorFlow runs a dilated Conv1D through SpaceToBatchND: the copy of its input that the
    # weight gradient reads, and the copy its backward makes of the incoming gradient, were
    # freed in the step's last events (traced: tcn.keras b16 adam); a causal one's padded
    # copy is freed at its backward, like the shared input a plain Conv1D keeps.
    from calc.engine.ledger import ACT, TRANS
    from calc.estimate import UPDATE_PHASE

    size, batch = 1 << 16, 4
    chain = chain_profile(sizes=(size,) * 3, types=("Conv1D",) * 3, weights=((9, 1),) * 3, head_weights=(10, 1))
    chain = replace(chain, layers=tuple(replace(layer, detail=detail) if layer.name != "head" else layer
                                        for layer in chain.layers))
    config = TrainingConfig(batch_size=batch, optimizer="sgd")
    update = _moment(chain, config, UPDATE_PHASE).components(batch)
    tensor = expected_counted(4 * size * batch)
    assert update[ACT] == copies_to_the_end * tensor  # each layer's input copy
    assert update[TRANS] == copies_to_the_end * tensor  # each layer's incoming-gradient copy


@pytest.mark.parametrize("same_padding, copies", [(True, 1), (False, 2)])
def test_dilated_conv1ds_that_pad_one_input_alike_share_its_copy(same_padding, copies):
    # WaveNet's gate pairs (two dilated causal Conv1Ds on one input) made one SpaceToBatchND
    # per pair (traced: wavenet_lite b16, 4 for 8 layers): TensorFlow merges identical ops.
    from calc.engine.ledger import ACT
    from calc.estimate import UPDATE_PHASE
    from calc.types import LayerStats

    size, batch = 1 << 16, 4
    dilated = "kernel_size=(2,) strides=(1,) dilation_rate=(2,) padding=causal"
    base = chain_profile(sizes=(size,) * 3, types=("Conv1D",) * 3, weights=((9, 1),) * 3, head_weights=(10, 1))
    # Tensors: 0 input, 1 l0's output, 2 and 3 the two dilated layers' outputs of tensor 1, 4 their sum, 5 the head's.
    l1 = replace(base.layers[1], detail=dilated)
    l2 = replace(base.layers[2], input_ids=(1,), detail=dilated if same_padding else dilated.replace("(2,) padding", "(4,) padding"))
    add = LayerStats(name="sum", layer_type="Add", input_ids=(2, 3), output_ids=(4,), output_shapes=((size,),))
    head = replace(base.layers[-1], input_ids=(4,), output_ids=(5,))
    profile = replace(base, layers=(base.layers[0], l1, l2, add, head),
                      tensor_elements=(*base.tensor_elements[:4], size, 10), output_ids=(5,))
    update = _moment(profile, TrainingConfig(batch_size=batch, optimizer="sgd"), UPDATE_PHASE).components(batch)
    assert update[ACT] == copies * expected_counted(4 * size * batch)  # the input copies, to the step's end


@pytest.mark.parametrize("kind, outputs_kept", [
    ("ZeroPadding1D", 0), ("Cropping1D", 0), ("UpSampling1D", 0), ("SpatialDropout1D", 0),
    ("GaussianDropout", 1), ("AlphaDropout", 1), ("GaussianNoise", 1),
])
def test_layers_measured_at_stop_21_keep_what_their_probes_showed(kind, outputs_kept):
    # archive/probes/probe_layers.py: padding, cropping, nearest repeats and a per-channel
    # mask keep nothing of the map for the gradient (flat peaks from 2 to 6 layers); a
    # noise or mask of the output's size is kept by the dropouts and, as measured, by
    # GaussianNoise. None of them is reported as unknown any more.
    from calc.estimate import plan_step

    size = 1 << 16
    chain = chain_profile(sizes=(size, size, size), types=("Conv1D", kind, "Conv1D"),
                          weights=((9, 1), (), (9, 1)), head_weights=(10, 1))
    plan = plan_step(chain, TrainingConfig(batch_size=1, optimizer="sgd"))
    # The next Conv1D keeps this layer's output for its weight gradient; the rest is the layer's own.
    assert plan.kept_per_sample[1] == (1 + outputs_kept) * 4 * size
    assert kind not in plan.unknown_layer_types


def test_the_loss_works_in_float32_on_the_predictions_and_per_label():
    # Keras computes the loss in float32: a 16-bit prediction is cast (one more float32
    # temporary than a float32 prediction needs) before the clip (two ops) and the log; the
    # sparse cross-entropy makes a float32 loss and a temporary per label and casts the
    # labels to int64 (traced on a per-pixel softmax under mixed_float16).
    from calc.estimate import step_timeline

    pixels = 64 * 64 * 3

    def segmenter(float32_output: bool, labels: int) -> ModelProfile:
        p = chain_profile(sizes=(pixels, pixels), types=("Conv2D", "Activation"), weights=((81, 3), ()))
        softmax = replace(p.layers[1], activation="softmax", float32_compute=float32_output)
        return replace(p, layers=(p.layers[0], softmax), tensor_elements=p.tensor_elements[:3], output_ids=(2,),
                       label_elements=labels)

    def loss(profile, precision):
        return dict(step_timeline(profile, TrainingConfig(batch_size=16, precision=precision)))["loss"]

    for precision in ("float32", "mixed_float16"):
        per_pixel, one = loss(segmenter(False, 4096), precision), loss(segmenter(False, 1), precision)
        # (float32 loss + temporary + int64 labels) per label, and the int64 labels of the batch themselves
        assert per_pixel - one == expected_counted(16 * 4096 * 16) + expected_counted(8 * 4096 * 16)
    half, single = loss(segmenter(False, 1), "mixed_float16"), loss(segmenter(True, 1), "mixed_float16")
    # 16-bit output: 2 bytes live + 4 float32 temporaries; float32 output: 4 bytes live + 3.
    assert half - single == expected_counted(2 * pixels * 16)


def test_the_last_n_layers_of_a_model_with_n_or_fewer_is_full_training():
    n = len(PROFILE.layers)
    full = estimate_memory(PROFILE, TrainingConfig(batch_size=32, optimizer="adamax"))
    for last in (n, n + 7):
        every = estimate_memory(PROFILE, TrainingConfig(batch_size=32, optimizer="adamax", train_mode="last_n",
                                                        last_n_layers=last))
        assert every == full
    fewer = estimate_memory(PROFILE, TrainingConfig(batch_size=32, optimizer="adamax", train_mode="last_n",
                                                    last_n_layers=n - 1))
    assert fewer.optimizer_state_bytes < full.optimizer_state_bytes


def test_group_normalization_keeps_its_input_like_batchnorm():
    from calc.estimate import plan_step
    # Keras 3 GroupNormalization casts x to float32 and reads it in its gradient (moments'
    # Square, x * inv): what it keeps is BatchNormalization's, and it is no unknown type.
    def conv_norm(kind):
        return chain_profile(types=("Conv2D", kind), sizes=(65536, 65536), weights=((147456, 64), (256, 256)))
    for precision in ("float32", "mixed_bfloat16"):
        config = TrainingConfig(batch_size=64, optimizer="sgd", precision=precision)
        gn = estimate_memory(conv_norm("GroupNormalization"), config)
        bn = estimate_memory(conv_norm("BatchNormalization"), config)
        assert gn.activations_bytes == bn.activations_bytes
        assert plan_step(conv_norm("GroupNormalization"), config).unknown_layer_types == ()
    # Under mixed precision the kept copy is float32: more than the 16-bit conv output alone.
    config = TrainingConfig(batch_size=64, optimizer="sgd", precision="mixed_bfloat16")
    assert estimate_memory(conv_norm("GroupNormalization"), config).activations_bytes >= 64 * 65536 * (4 + 2)


@pytest.mark.parametrize("optimizer", ["lion", "adamax", "rmsprop"])
def test_the_ema_temporary_is_alive_beside_the_update_not_part_of_it(optimizer):
    # EMA's momentum * average runs at the step's start (an early temporary) and is read
    # by the average's assign, after the variable's update: it adds to the update's
    # scratch rather than being one of its buffers. Traced: MobileNetV2 96 px b2 Lion with
    # EMA, frozen backbone, peaked at the head's update with its gradient and four
    # kernel-sized products, m * beta_1, g * (1 - beta_1), m * beta_2, momentum * average.
    from calc.engine.training import alive_share
    from calc.estimate import UPDATE_PHASE

    kernel_elements = 1 << 22  # a 16 MiB head kernel: the update is the step's peak
    profile = chain_profile(types=("Conv2D", "ReLU", "ReLU"), weights=((64,), (), ()), head_weights=(kernel_elements, 10))
    kernel = expected_counted(4 * kernel_elements)
    batch = 2
    plain = TrainingConfig(batch_size=batch, optimizer=optimizer)
    ema = replace(plain, optimizer_options=OptimizerOptions(use_ema=True))
    assert estimate_memory(profile, ema).peak_phase == UPDATE_PHASE
    at_update = [_moment(profile, c, UPDATE_PHASE).total(batch) for c in (plain, ema)]
    # The average (one slot more) and its temporary, at the share of early temporaries
    # the peak holds; the update's own scratch is what it is without EMA.
    assert abs(at_update[1] - at_update[0] - (kernel + alive_share(kernel))) <= 256  # whole granules
