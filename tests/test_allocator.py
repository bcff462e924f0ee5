"""The BFC allocator model (calc.engine.allocator) and how the estimate uses it, on hand cases."""

import pytest

from calc.engine.allocator import BFC, bin_for, rounded
from calc.engine.resident import resident_pool
from calc.estimate import (
    allocator_peak,
    counted_bytes,
    estimate_memory,
    max_batch_size,
    memory_curve,
    step_timeline,
)
from calc.types import LayerStats, ModelProfile, TrainingConfig
from tests.profiles import chain_profile

MIB = 1 << 20
# 112 x 112 x 64 float32 per sample: 3.0625 MiB, so 24.5 MiB at batch 8.
MAP = 112 * 112 * 64


def test_requests_are_rounded_to_256_bytes_and_binned_by_powers_of_two():
    assert rounded(1) == 256 and rounded(256) == 256 and rounded(257) == 512
    assert bin_for(256) == 0 and bin_for(511) == 0 and bin_for(512) == 1
    assert bin_for(256 << 20) == 20 and bin_for(1 << 40) == 20


def test_first_request_splits_the_first_region_and_free_coalesces():
    a = BFC()
    x = a.alloc(1000)
    assert x.size == 1024 and a.regions == [2 * MIB]
    a.free(x)
    assert a.in_use == 0
    assert [len(b) for b in a.bins].count(1) == 1  # one free chunk: the whole region again


def test_region_doubles_until_the_request_fits_and_is_handed_out_whole():
    a = BFC()
    a.alloc(1000)  # region 1: 2 MiB
    y = a.alloc(75 * MIB)  # 2 -> 4 -> ... -> 128 MiB; 53 MiB left < 75 MiB and < 128 MiB: unsplit
    assert a.regions == [2 * MIB, 128 * MIB] and y.size == 128 * MIB
    a.free(y)
    z = a.alloc(60 * MIB)  # 128 >= 2 x 60: split
    w = a.alloc(60 * MIB)  # the 68 MiB rest < 2 x 60: handed out whole
    assert z.size == 60 * MIB and w.size == 68 * MIB and len(a.regions) == 2


def test_a_remainder_of_128_mib_is_split_off_even_below_twice_the_request():
    a = BFC()
    big = a.alloc(600 * MIB)
    assert a.regions == [1024 * MIB] and big.size == 600 * MIB  # 424 MiB left >= 128 MiB
    a.free(big)
    assert a.alloc(900 * MIB).size == 1024 * MIB  # 124 MiB left: kept in the chunk


def test_best_fit_takes_the_smallest_hole():
    a = BFC(initial_region=64 * MIB)
    p = [a.alloc(8 * MIB) for _ in range(6)]
    for i in (1, 3, 4):
        a.free(p[i])  # holes of 8 MiB (p1) and 16 MiB (p3 + p4)
    q = a.alloc(7 * MIB)
    assert q.ptr == p[1].ptr and q.size == 8 * MIB


def test_region_sizes_double_after_each_growth():
    a = BFC()
    for _ in range(4):
        a.alloc(2 * MIB)
    assert a.regions == [2 * MIB, 4 * MIB, 8 * MIB]


def frozen_stem(map_elements: int = MAP) -> ModelProfile:
    """Image -> Conv2D -> BatchNormalization -> ReLU (the frozen backbone) -> Dense head.

    Every variable is under 256 KiB, which the allocator's statistics do not count, so
    only the image and the feature maps reach the simulated allocator.
    """
    return chain_profile(
        sizes=(map_elements,) * 3, weights=((1728, 64), (), ()), head_weights=(640, 10), backbone_layers=3,
    )


def test_frozen_step_counts_whole_regions():
    # batch 8: the 24.5 MiB image gets a fresh region, doubled 2 -> 32 MiB, handed out
    # whole (32 < 2 x 24.5, 7.5 MiB < 128 MiB); the 24.5 MiB conv output the next 32 MiB
    # region. BatchNormalization and ReLU run in place in inference. Peak: 64 MiB.
    config = TrainingConfig(batch_size=8, optimizer="sgd", train_mode="frozen_backbone")
    assert allocator_peak(frozen_stem(), config) == 64 * MIB
    b = estimate_memory(frozen_stem(), config)
    walk = 2 * counted_bytes(4 * MAP * 8)  # the walk alone: two maps, 8 % fragmentation each
    assert b.peak_bytes == 64 * MIB and b.allocator_bytes == 64 * MIB - walk > 0
    # batch 4: 12.25 MiB each, regions of 16 MiB.
    assert allocator_peak(frozen_stem(), TrainingConfig(batch_size=4, train_mode="frozen_backbone")) == 32 * MIB


def test_a_restored_snapshot_places_requests_like_the_original():
    pool = BFC()
    kept = [pool.alloc(n * MIB) for n in (3, 5, 40, 7, 90)]
    pool.free(kept[1])
    pool.free(kept[3])
    copy = BFC.restored(pool.snapshot())
    assert (copy.in_use, copy.peak, copy.regions) == (pool.in_use, pool.peak, pool.regions)
    for n in (6, 2, 130, 33, 1):
        a, b = pool.alloc(n * MIB), copy.alloc(n * MIB)
        assert (a.ptr, a.size) == (b.ptr, b.size)
    assert (copy.in_use, copy.peak, copy.regions) == (pool.in_use, pool.peak, pool.regions)


def test_a_random_kernel_is_drawn_and_scaled_before_the_variable_copies_it():
    # archive/probes/probe_init.py: a 64 MiB glorot_uniform kernel peaks the pool at 192 MiB
    # while it is made, a zeros-initialized one (normalization, slots) at 64.
    kernel = 4096 * 4096
    config = TrainingConfig(batch_size=8, optimizer="sgd", train_mode="frozen_backbone")
    dense = chain_profile(sizes=(4096,), types=("Dense",), weights=((kernel,),), head_weights=(40960,), backbone_layers=1)
    pool = resident_pool(dense, config)
    assert (pool.peak, pool.in_use) == (192 * MIB, 64 * MIB)
    ones = chain_profile(sizes=(4096,), types=("LayerNormalization",), weights=((kernel,),), head_weights=(40960,),
                         backbone_layers=1)
    pool = resident_pool(ones, config)
    assert (pool.peak, pool.in_use) == (64 * MIB, 64 * MIB)
    # The trained head: its kernel drawn and scaled (freed), then Adam's two zero slots, no copies.
    head = chain_profile(sizes=(4096,), types=("LayerNormalization",), weights=((64,),), head_weights=(kernel,),
                         backbone_layers=1)
    pool = resident_pool(head, TrainingConfig(batch_size=8, optimizer="adam", train_mode="frozen_backbone"))
    assert (pool.peak, pool.in_use) == (3 * 64 * MIB, 3 * 64 * MIB)  # draw + scaled + kernel, then kernel + 2 slots


def test_full_training_counts_whole_chunks_where_the_simulation_says_more():
    # The same stem trained whole at batch 8: every map is 24.5 MiB, the variables are
    # untracked. The image takes a fresh 32 MiB region whole, the conv output the next
    # 32 MiB region whole, BatchNormalization's 12.25 MiB temporary splits a 64 MiB
    # region and merges back on its free, its output splits that region again (24.5 +
    # 39.5), the gradient at the head's input gets the 39.5 MiB remainder whole (39.5 <
    # 2 x 24.5), BatchNormalization's backward frees its output (24.5 back) and makes three
    # maps: the freed 24.5, then a 128 MiB region split twice. Alive at the peak: 32 + 32
    # + 39.5 + 3 x 24.5 = 177 MiB; the walk counts six maps with 8 % each.
    config = TrainingConfig(batch_size=8, optimizer="adam")
    b = estimate_memory(frozen_stem(), config)
    walk = 6 * counted_bytes(4 * MAP * 8)
    assert b.peak_phase == "backward l1" and b.peak_bytes - b.allocator_bytes == walk
    assert b.peak_bytes == 177 * MIB


def test_full_training_takes_what_every_history_agrees_on_and_frozen_steps_the_larger():
    from calc.engine.floors import allocator_peaks, fresh_peak
    from calc.engine.training import without_batch
    from calc.estimate import plan_step

    # A 20 MiB kernel: drawn and scaled before the variable copies it in one history,
    # made from one value in the other, so the two pools differ.
    profile = chain_profile(sizes=(MAP,) * 3, weights=((5 << 20,), (), ()), head_weights=(640, 10), backbone_layers=3)
    decided = 0
    for mode in ({}, {"train_mode": "frozen_backbone"}):
        for batch in (1, 3, 8, 20):
            config = TrainingConfig(batch_size=batch, optimizer="adam", **mode)
            walk = max(m.total(batch) for m in plan_step(profile, config).moments)
            base = without_batch(config)
            peaks = allocator_peaks(profile, base, batch)
            floor = max(peaks) if mode else min(*peaks, fresh_peak(profile, base, batch))
            assert estimate_memory(profile, config).peak_bytes == max(walk, floor)
            decided += min(peaks) != max(peaks) and floor > walk
    assert decided >= 4  # the pick matters in both modes


def test_the_fresh_history_is_the_step_in_new_regions_past_the_counted_variables():
    from calc.engine.floors import fresh_peak
    from calc.engine.training import without_batch

    # The stem's variables are untracked: its step starts from the allocator's first
    # 2 MiB region, as in the test above (177 MiB at batch 8).
    config = without_batch(TrainingConfig(batch_size=8, optimizer="adam"))
    assert fresh_peak(frozen_stem(), config, 8) == 177 * MIB


@pytest.mark.parametrize("mode", [{}, {"train_mode": "frozen_backbone"}, {"train_mode": "last_n", "last_n_layers": 1}])
def test_curve_and_max_batch_agree_with_the_estimate(mode):
    profile = frozen_stem()
    config = TrainingConfig(batch_size=1, optimizer="adam", **mode)
    batches = list(range(1, 41))
    curve = memory_curve(profile, config, batches)
    singles = [estimate_memory(profile, TrainingConfig(batch_size=b, optimizer="adam", **mode)).peak_bytes
               for b in batches]
    assert curve == singles
    budget = 200 * MIB
    best = max_batch_size(profile, config, budget)
    assert 0 < best < 40
    assert singles[best - 1] <= budget and singles[best] > budget


def two_branch_add() -> ModelProfile:
    """Image -> two Conv2D branches -> Add -> Dense head, all but the head frozen."""
    shape = ((112, 112, 64),)
    layers = (
        LayerStats("a", "Conv2D", (0,), (1,), shape, (1728,), in_backbone=True),
        LayerStats("b", "Conv2D", (0,), (2,), shape, (1728,), in_backbone=True),
        LayerStats("add", "Add", (1, 2), (3,), shape, in_backbone=True),
        LayerStats("head", "Dense", (3,), (4,), ((10,),), (640, 10), activation="softmax"),
    )
    return ModelProfile("branches", (112, 112, 64), layers, (MAP, MAP, MAP, MAP, 10), (0,), (4,))


def test_inference_add_writes_into_its_first_input():
    # At the Add: the image and the two branch outputs; the sum reuses branch a's buffer.
    config = TrainingConfig(batch_size=8, optimizer="sgd", train_mode="frozen_backbone")
    timeline = dict(step_timeline(two_branch_add(), config))
    assert timeline["forward add"] == 3 * counted_bytes(4 * MAP * 8)
    # In full training the Add makes a new tensor (its inputs are still read).
    full = dict(step_timeline(two_branch_add(), TrainingConfig(batch_size=8, optimizer="sgd")))
    assert full["forward add"] >= 4 * counted_bytes(4 * MAP * 8)


def test_inference_separable_conv_frees_its_input_before_the_pointwise_output():
    shape = ((112, 112, 64),)
    layers = (
        LayerStats("stem", "Conv2D", (0,), (1,), shape, (1728,), in_backbone=True),
        LayerStats("sep", "SeparableConv2D", (1,), (2,), shape, (576, 4096), in_backbone=True,
                   detail="kernel_size=(3, 3) strides=(1, 1)"),
        LayerStats("head", "Dense", (2,), (3,), ((10,),), (640, 10), activation="softmax"),
    )
    profile = ModelProfile("sep", (112, 112, 64), layers, (MAP, MAP, MAP, 10), (0,), (3,))
    timeline = dict(step_timeline(profile, TrainingConfig(batch_size=8, train_mode="frozen_backbone")))
    one = counted_bytes(4 * MAP * 8)
    # depthwise: image + stem output + depthwise output; pointwise: image + depthwise + output.
    assert timeline["forward sep (depthwise)"] == 3 * one
    assert timeline["forward sep"] == 3 * one


def test_two_identical_paddings_of_one_input_are_one_tensor():
    # TensorFlow's common-subexpression elimination runs one Pad for both layers.
    padded = 114 * 114 * 64
    shape, pad_shape = ((112, 112, 64),), ((114, 114, 64),)
    layers = (
        LayerStats("stem", "Conv2D", (0,), (1,), shape, (1728,), in_backbone=True),
        LayerStats("pad_a", "ZeroPadding2D", (1,), (2,), pad_shape, in_backbone=True),
        LayerStats("pad_b", "ZeroPadding2D", (1,), (3,), pad_shape, in_backbone=True),
        LayerStats("a", "Conv2D", (2,), (4,), shape, (1728,), in_backbone=True, detail="kernel_size=(3, 3)"),
        LayerStats("b", "Conv2D", (3,), (5,), shape, (1728,), in_backbone=True, detail="kernel_size=(5, 5)"),
        LayerStats("add", "Add", (4, 5), (6,), shape, in_backbone=True),
        LayerStats("head", "Dense", (6,), (7,), ((10,),), (640, 10), activation="softmax"),
    )
    profile = ModelProfile("pads", (112, 112, 64), layers, (MAP, MAP, padded, padded, MAP, MAP, MAP, 10), (0,), (7,))
    timeline = dict(step_timeline(profile, TrainingConfig(batch_size=8, train_mode="frozen_backbone")))
    image, pad = counted_bytes(4 * MAP * 8), counted_bytes(4 * padded * 8)
    # pad_b is pad_a's tensor and hands its reader b to pad_a, after pad_a's own a: the
    # executor runs the last of those first (executor_order), b, then a, then the Add.
    # After pad_a the stem's output is dead.
    assert [name for name, _ in timeline.items()][1:5] == [f"forward {n}" for n in ("pad_a", "b", "a", "add")]
    assert timeline["forward pad_a"] == 2 * image + pad
    # Both convolutions read the one padded tensor: image + padded + their outputs.
    assert timeline["forward b"] == 2 * image + pad
    assert timeline["forward a"] == 3 * image + pad
    # The merged pad_b runs nothing (queued behind the stem's first reader, it comes last).
    assert timeline["forward pad_b"] == timeline["forward head"]


def test_a_fork_runs_one_branch_to_its_join_before_the_next():
    # Keras' order is by depth (both expansions, then both reductions); TensorFlow's
    # executor runs one branch to the Add, then the other: one expanded map at a time.
    big = 4 * MAP
    shape, wide = ((112, 112, 64),), ((112, 112, 256),)
    layers = (
        LayerStats("stem", "Conv2D", (0,), (1,), shape, (1728,), in_backbone=True),
        LayerStats("a_big", "Conv2D", (1,), (2,), wide, (16384,), in_backbone=True),
        LayerStats("b_big", "Conv2D", (1,), (3,), wide, (16384,), in_backbone=True),
        LayerStats("a", "Conv2D", (2,), (4,), shape, (16384,), in_backbone=True),
        LayerStats("b", "Conv2D", (3,), (5,), shape, (16384,), in_backbone=True),
        LayerStats("add", "Add", (4, 5), (6,), shape, in_backbone=True),
        LayerStats("head", "Dense", (6,), (7,), ((10,),), (640, 10), activation="softmax"),
    )
    profile = ModelProfile("fork", (112, 112, 64), layers, (MAP, MAP, big, big, MAP, MAP, MAP, 10), (0,), (7,))
    timeline = dict(step_timeline(profile, TrainingConfig(batch_size=8, train_mode="frozen_backbone")))
    assert [name for name, _ in timeline.items()][:6] == [f"forward {n}" for n in ("stem", "a_big", "a", "b_big", "b", "add")]
    image, wide_map = counted_bytes(4 * MAP * 8), counted_bytes(4 * big * 8)
    # The peak: image + stem output + one expanded map + one branch's result.
    assert max(timeline.values()) == 3 * image + wide_map


def test_mixed_inference_batchnorm_normalizes_a_float32_copy():
    # Keras 3 casts BatchNormalization's 16-bit input to float32, normalizes that copy
    # in place and casts back: the copy lives with the input, then with the output.
    profile = frozen_stem()
    config = TrainingConfig(batch_size=8, precision="mixed_bfloat16", train_mode="frozen_backbone")
    timeline = dict(step_timeline(profile, config))
    image, half = counted_bytes(4 * MAP * 8), counted_bytes(2 * MAP * 8)
    assert timeline["forward l1 (float32 copy)"] == 2 * image + half  # image + conv output + the copy
    assert timeline["forward l1"] == 2 * image + half  # the conv output died: image + copy + BN output
    assert "forward l1 (float32 copy)" not in dict(step_timeline(profile, TrainingConfig(batch_size=8, train_mode="frozen_backbone")))


def test_mixed_inference_casts_each_kernel_at_the_start_and_frees_it_after_its_layer():
    profile = chain_profile(sizes=(MAP,) * 3, weights=((147456, 64), (), ()), head_weights=(640, 10),
                            backbone_layers=3)
    mixed = dict(step_timeline(profile, TrainingConfig(batch_size=8, precision="mixed_float16",
                                                        train_mode="frozen_backbone")))
    image, half = counted_bytes(4 * MAP * 8), counted_bytes(2 * MAP * 8)
    kernel = counted_bytes(2 * 147456)  # the 16-bit copy of the conv's float32 kernel
    # The variable itself, in the chunk the simulated pool gave it (a frozen step).
    weights = resident_pool(profile, TrainingConfig(batch_size=8, train_mode="frozen_backbone")).in_use
    # The conv: the float32 image, its 16-bit cast for the layer, the output, the kernel copy.
    assert mixed["forward l0"] == weights + image + half + half + kernel
    # After the conv the copy is gone: image + conv output + BN's float32 copy.
    assert mixed["forward l1 (float32 copy)"] == weights + 2 * image + half


def test_the_walk_follows_the_graph_even_when_the_ledger_lists_a_reader_first():
    from calc.engine.order import executor_order

    shape = ((112, 112, 64),)
    late = LayerStats("late", "ReLU", (2,), (1,), shape)  # reads the next row's output
    early = LayerStats("early", "Conv2D", (0,), (2,), shape, (1728,))
    assert executor_order((late, early), [-1, 0, 1]) == [1, 0]
    # Rows that read each other (no graph Keras builds) keep the ledger's order.
    loop = LayerStats("loop", "Conv2D", (1,), (2,), shape, (1728,))
    assert executor_order((late, loop), [-1, 0, 1]) == [0, 1]


def _pad_then_conv(kernel_elements: int) -> ModelProfile:
    """Image -> stem Conv2D -> ZeroPadding2D -> 3x3 Conv2D (valid), frozen -> Dense head."""
    padded = 114 * 114 * 64
    shape = ((112, 112, 64),)
    layers = (
        LayerStats("stem", "Conv2D", (0,), (1,), shape, (1728,), in_backbone=True),
        LayerStats("pad", "ZeroPadding2D", (1,), (2,), ((114, 114, 64),), in_backbone=True),
        LayerStats("conv", "Conv2D", (2,), (3,), shape, (kernel_elements,), in_backbone=True,
                   detail="kernel_size=(3, 3) strides=(1, 1)"),
        LayerStats("head", "Dense", (3,), (4,), ((10,),), (640, 10), activation="softmax"),
    )
    return ModelProfile("pad_conv", (112, 112, 64), layers, (MAP, MAP, padded, MAP, 10), (0,), (4,))


def test_inference_pad_read_only_by_a_conv_is_fused_into_it_on_the_cpu():
    # oneDNN's _MklPadWithConv2D: the padded tensor is never made; the conv reads the stem's output.
    image, pad = counted_bytes(4 * MAP * 8), counted_bytes(4 * 114 * 114 * 64 * 8)
    profile = _pad_then_conv(3 * 3 * 64 * 64)
    cpu = dict(step_timeline(profile, TrainingConfig(batch_size=8, train_mode="frozen_backbone")))
    assert cpu["forward pad"] == 2 * image
    assert cpu["forward conv"] == 3 * image  # image, stem output (read by the conv), its output
    # On a GPU, and under mixed_float16 (no oneDNN float16 fusion), the pad is a tensor.
    for config in (TrainingConfig(batch_size=8, train_mode="frozen_backbone", device="gpu"),
                   TrainingConfig(batch_size=8, train_mode="frozen_backbone", precision="mixed_float16")):
        timeline = dict(step_timeline(profile, config))
        half = counted_bytes(config.precision.compute_bytes * MAP * 8)
        padded = counted_bytes(config.precision.compute_bytes * 114 * 114 * 64 * 8)
        assert timeline["forward pad"] >= image + half + padded
    # A grouped conv (Keras compiles it with XLA) keeps its pad.
    grouped = dict(step_timeline(_pad_then_conv(3 * 3 * 64), TrainingConfig(batch_size=8, train_mode="frozen_backbone")))
    assert grouped["forward pad"] == 2 * image + pad


def _residual_block(shortcut_conv: bool) -> ModelProfile:
    """ResNetV2's block, frozen: main = conv1 -> conv3 (biased) on pre = ReLU(stem);
    shortcut = a biased 1x1 conv of pre (a stage's first block) or the stem's output
    itself; Add([shortcut, main])."""
    shape = ((112, 112, 64),)
    layers = [
        LayerStats("stem", "Conv2D", (0,), (1,), shape, (1728,), in_backbone=True),
        LayerStats("pre", "ReLU", (1,), (2,), shape, in_backbone=True),
    ]
    if shortcut_conv:
        layers.append(LayerStats("conv0", "Conv2D", (2,), (3,), shape, (4096, 64), in_backbone=True,
                                 detail="kernel_size=(1, 1)"))
    layers += [
        LayerStats("conv1", "Conv2D", (2,), (4,), shape, (4096,), in_backbone=True, detail="kernel_size=(1, 1)"),
        LayerStats("conv3", "Conv2D", (4,), (5,), shape, (4096, 64), in_backbone=True, detail="kernel_size=(1, 1)"),
        LayerStats("add", "Add", (3 if shortcut_conv else 1, 5), (6,), shape, in_backbone=True),
        LayerStats("head", "Dense", (6,), (7,), ((10,),), (640, 10), activation="softmax"),
    ]
    return ModelProfile("block", (112, 112, 64), tuple(layers), (MAP,) * 7 + (10,), (0,), (7,))


def test_inference_biased_conv_read_only_by_an_add_is_fused_into_it_on_the_cpu():
    one = counted_bytes(4 * MAP * 8)
    frozen = TrainingConfig(batch_size=8, train_mode="frozen_backbone")
    on_gpu = TrainingConfig(batch_size=8, train_mode="frozen_backbone", device="gpu")
    # A stage's first block: the shortcut conv (the Add's port 0) is fused; it runs at the
    # Add and writes into conv3's output, so it never has a tensor of its own, and pre
    # lives until the Add.
    cpu = dict(step_timeline(_residual_block(True), frozen))
    assert "forward conv0" not in cpu
    assert cpu["forward conv3"] == 4 * one  # image, pre (for the shortcut), conv1, conv3
    assert cpu["forward add"] == 3 * one  # image, pre, conv3's buffer holding the sum
    # On a GPU (which also counts the small weights) the shortcut runs first and its
    # output waits for the main branch: one map more at conv1.
    gpu = dict(step_timeline(_residual_block(True), on_gpu))
    assert gpu["forward conv1"] - gpu["forward conv0"] == one
    # Later blocks: the shortcut is the block's input (no conv), so conv3 (port 1) is fused
    # and writes into the input's buffer: conv3's output never exists.
    cpu = dict(step_timeline(_residual_block(False), frozen))
    assert "forward conv3" not in cpu
    assert cpu["forward add"] == 3 * one  # image, the input holding the sum, conv1's output (read by conv3)
    gpu = dict(step_timeline(_residual_block(False), on_gpu))
    assert gpu["forward conv3"] - gpu["forward add"] == one  # conv3's own output, then conv1's freed
    # In training nothing is fused away (the walk keeps every layer).
    full = dict(step_timeline(_residual_block(True), TrainingConfig(batch_size=8)))
    assert "forward conv0" in full and "forward conv3" in full


def test_on_the_cpu_an_op_onednn_rewrites_runs_before_one_it_does_not():
    from calc.engine.order import executor_order

    # ResNetV2's last block of a stage: the block input feeds the next BatchNormalization
    # (first in Keras' order) and the shortcut's MaxPooling2D.
    shape = ((56, 56, 256),)
    layers = (
        LayerStats("x", "Conv2D", (0,), (1,), shape, (1728,)),
        LayerStats("bn", "BatchNormalization", (1,), (2,), shape, (256, 256), (256, 256)),
        LayerStats("conv", "Conv2D", (2,), (3,), shape, (65536,)),
        LayerStats("pool", "MaxPooling2D", (1,), (4,), shape),
        LayerStats("add", "Add", (4, 3), (5,), shape),
    )
    producer = [-1, 0, 1, 2, 3, 4]
    assert executor_order(layers, producer, onednn=True) == [0, 3, 1, 2, 4]
    assert executor_order(layers, producer) == [0, 1, 2, 3, 4]
    # Between two rewritten ops the first in Keras' order runs first (Xception).
    convs = (layers[0], LayerStats("c1", "Conv2D", (1,), (2,), shape, (65536,)),
             LayerStats("c2", "Conv2D", (1,), (3,), shape, (65536,)), LayerStats("add", "Add", (2, 3), (4,), shape))
    assert executor_order(convs, [-1, 0, 1, 2, 3], onednn=True) == [0, 1, 2, 3]


def test_on_the_cpu_a_relu_merged_by_cse_hands_its_consumers_to_its_twin():
    from calc.engine.order import executor_order

    # NASNet's stem: one map x, read by two identical relus (one node after CSE). The kept
    # relu feeds a 1x1 conv; the merged one an average pool (rewritten) and a pad (not).
    shape = ((111, 111, 32),)
    layers = (
        LayerStats("x", "Conv2D", (0,), (1,), shape, (864,)),
        LayerStats("relu", "Activation", (1,), (2,), shape, activation="relu"),
        LayerStats("conv", "Conv2D", (2,), (3,), shape, (1024,)),
        LayerStats("relu_twin", "Activation", (1,), (4,), shape, activation="relu"),
        LayerStats("pad", "ZeroPadding2D", (4,), (5,), ((112, 112, 32),)),
        LayerStats("pool", "AveragePooling2D", (4,), (6,), ((56, 56, 32),)),
    )
    producer = [-1, 0, 1, 2, 3, 4, 5]
    # The relu's out-edges: its own conv, then the handed pad and pool; the rewritten
    # (conv, pool) moved to the end; the last runs first, then last-in first-out:
    # pool, conv, pad. The merged relu itself does nothing, after its producer.
    order = executor_order(layers, producer, onednn=True, twin_of={3: 1})
    assert [layers[i].name for i in order if i != 3] == ["x", "relu", "pool", "conv", "pad"]
    # Without the merge (or on a GPU) each relu feeds its own consumers, in Keras' order.
    plain = executor_order(layers, producer, onednn=True)
    assert [layers[i].name for i in plain] == ["x", "relu", "conv", "relu_twin", "pool", "pad"]
    assert executor_order(layers, producer, twin_of={3: 1}) == executor_order(layers, producer)


def test_a_step_with_a_frozen_part_counts_the_variables_in_their_simulated_chunks():
    # Full training counts each variable at its size + 8 % (the walk's fit); with part of
    # the model in inference the walk counts them as the simulated pool holds them.
    profile = chain_profile(sizes=(MAP,) * 3, weights=((8 << 20, 512), (), ()), head_weights=(640, 10),
                            backbone_layers=3)
    frozen = TrainingConfig(batch_size=8, optimizer="sgd", train_mode="frozen_backbone")
    pool = resident_pool(profile, frozen)
    assert estimate_memory(profile, frozen).weights_bytes == pool.in_use >= 4 * (8 << 20)
    full = TrainingConfig(batch_size=8, optimizer="sgd")
    assert estimate_memory(profile, full).weights_bytes == counted_bytes(4 * (8 << 20)) + counted_bytes(4 * 512)
    assert pool.in_use < counted_bytes(4 * (8 << 20))


def test_inference_swish_leaves_its_result_in_a_new_buffer_and_frees_the_input():
    # Traced (EfficientNetB0 frozen): the activation allocates its result and the conv
    # output it read is freed after; the walk's bytes are those of writing in place
    # beside one temporary, the surviving allocation is the new one.
    from calc.engine.events import Alloc, Free, Mark, Phase, Step
    from calc.engine.training import without_batch
    from calc.engine.walk import simulate

    shape = ((112, 112, 64),)
    layers = (
        LayerStats("conv", "Conv2D", (0,), (1,), shape, (1728,), in_backbone=True),
        LayerStats("act", "Activation", (1,), (2,), shape, activation="swish", in_backbone=True),
        LayerStats("conv2", "Conv2D", (2,), (3,), shape, (36864,), in_backbone=True, detail="kernel_size=(3, 3)"),
        LayerStats("head", "Dense", (3,), (4,), ((10,),), (640, 10), activation="softmax"),
    )
    profile = ModelProfile("swish", (112, 112, 64), layers, (MAP, MAP, MAP, MAP, 10), (0,), (4,))
    one = counted_bytes(4 * MAP * 8)
    for device, survives in (("cpu", "new"), ("gpu", "input")):
        config = TrainingConfig(batch_size=8, train_mode="frozen_backbone", device=device)
        events = simulate(profile, without_batch(config), record=True).events
        at = events.index(Mark(Phase(Step.FORWARD, "act")))
        conv_out = [e.id for e in events[:events.index(Mark(Phase(Step.FORWARD, "conv")))]
                    if isinstance(e, Alloc) and e.per_sample == 4 * MAP][-1]  # after the image's
        after = events[at + 1:events.index(Mark(Phase(Step.FORWARD, "conv2")))]
        freed = {e.id for e in after if isinstance(e, Free)}
        assert (conv_out in freed) == (survives == "new")
    cpu = dict(step_timeline(profile, TrainingConfig(batch_size=8, train_mode="frozen_backbone")))
    assert cpu["forward act"] == 3 * one  # image, the conv output, the result


def test_the_walk_frees_the_tensor_that_dies_not_the_oldest_of_its_size():
    # conv0 -> conv1 -> conv2, Add(conv0, conv2), frozen, every map one size: after conv2
    # it is conv1's output that dies, while conv0's lives on for the Add. The allocator
    # simulation sees allocations by identity, so the freed event must be conv1's.
    from calc.engine.events import Alloc, Free, Mark, Phase, Step
    from calc.engine.training import without_batch
    from calc.engine.walk import simulate

    shape = ((112, 112, 64),)
    layers = (
        LayerStats("conv0", "Conv2D", (0,), (1,), shape, (4096,), in_backbone=True, detail="kernel_size=(1, 1)"),
        LayerStats("conv1", "Conv2D", (1,), (2,), shape, (4096,), in_backbone=True, detail="kernel_size=(1, 1)"),
        LayerStats("conv2", "Conv2D", (2,), (3,), shape, (4096,), in_backbone=True, detail="kernel_size=(1, 1)"),
        LayerStats("add", "Add", (1, 3), (4,), shape, in_backbone=True),
        LayerStats("head", "Dense", (4,), (5,), ((10,),), (640, 10), activation="softmax"),
    )
    profile = ModelProfile("ids", (112, 112, 64), layers, (MAP,) * 5 + (10,), (0,), (5,))
    events = simulate(profile, without_batch(TrainingConfig(batch_size=8, train_mode="frozen_backbone")),
                       record=True).events

    def moment(name):
        return events.index(Mark(Phase(Step.FORWARD, name)))

    def made_by(name):  # the id of the last per-sample allocation before the layer's moment
        return [e.id for e in events[:moment(name)] if isinstance(e, Alloc) and e.per_sample == 4 * MAP][-1]

    after_conv2 = events[moment("conv2") + 1:moment("add")]
    assert [e.id for e in after_conv2 if isinstance(e, Free)] == [made_by("conv1")]
    assert made_by("conv0") not in {e.id for e in after_conv2 if isinstance(e, (Alloc, Free))}
