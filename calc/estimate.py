"""The estimate: a walk over one training step, layer by layer.

The step is simulated as TensorFlow runs it: the forward pass allocates each layer's
output and frees a tensor after its last forward reader unless a gradient will read
it (``calc.rules``); the backward pass runs the layers in reverse, allocating input
gradients and weight gradients and freeing what each layer kept, while the optimizer
applies each gradient a few layers after it appears. Every moment of the walk holds
its live bytes per component as fixed bytes plus the per-sample sizes of the live
tensors, so one walk serves every batch size; the moments that can be the peak for
some batch are kept (``_prune``) and evaluated per batch.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from functools import lru_cache

from calc.allocator import BFC
from calc.facts.kernels import im2col_buffer_bytes, matmul_upcasts
from calc.facts.optimizers import (
    EARLY_TEMPORARIES_ALIVE,
    branch_temporaries,
    early_temporaries,
    slots_per_variable,
    update_scratch,
)
from calc.facts.layers import NOTHING, is_known_layer_type, rule_for
from calc.types import (
    Device,
    LayerStats,
    MemoryBreakdown,
    ModelProfile,
    Optimizer,
    Precision,
    TrainingConfig,
    TrainMode,
)

COMPONENTS = (
    "weights",
    "gradients",
    "optimizer_state",
    "activations",
    "backward_transient",
    "input_batch",
    "other",
)
W, G, OPT, ACT, TRANS, INPUT, OTHER = range(len(COMPONENTS))
# "other" holds the optimizer's update temporaries beyond the running update's: those made
# before their gradient (calc.optimizers.EARLY_TEMPORARIES) and, under mixed_float16, those
# of every variable updated together (BRANCH_TEMPORARIES); "optimizer_state" is the slots alone.

FLOAT32 = 4
LABEL_BYTES = 8  # numpy integer labels arrive as int64
# The allocator hands out multiples of 256 bytes (MEMORY_FACTS.md).
ALLOCATION_GRANULE = 256
# With oneDNN on (the default x86-64 build), TensorFlow's CPU allocator serves
# requests below 256 KiB from a separate small-size allocator whose bytes the
# reported peak does not include (measured: tensors of 65,536 and 200,000 bytes
# leave ``current`` unchanged, 262,144 bytes add 262,144; mkl_cpu_allocator.h
# kSmallAllocationsThreshold).
UNTRACKED_BELOW = 262_144


def untracked_below(device: Device) -> int:
    """Requests smaller than this leave the reported peak unchanged on ``device``.

    On a GPU TensorFlow's BFC allocator serves every request, however small, from its
    pool and counts it (rounded to 256 bytes); only the CPU build has the separate
    small-size allocator. Counting them on the H100 slice (50 cases): under-predicted
    19 -> 15, 90th percentile 19.6 -> 16.5 %, median 4.9 -> 5.1 % (docs/MEASUREMENTS.md,
    stop 18).
    """
    return 0 if device is Device.GPU else UNTRACKED_BELOW
# Keras applies each gradient as soon as it exists (no control dependency between
# the per-variable updates), but the executor runs the update ops behind backward
# ops already queued, so some gradients wait. How many is the executor's scheduling,
# which this walk does not simulate: six weighted layers' worth fitted the ResNet50 /
# MobileNetV2 measurements at batch 1-32 best (benchmarks/probe_layers.py and the
# validation set; 3 to 10 change the median error by under half a point).
GRADIENT_LAG = 6


# The BFC allocator hands out a free chunk unsplit unless it is at least twice the
# request or the remainder is at least 128 MiB, so a tensor often occupies more than
# its size. Measured on stacks of one layer type (benchmarks/probe_layers.py): each
# added feature map raised the peak by 1.08x its size.
FRAGMENTATION = 0.08
SPLIT_ALWAYS_ABOVE = 128 << 20
# The last moment of the walk: the optimizer applies the gradients still pending.
UPDATE_PHASE = "optimizer update"


def counted_bytes(nbytes: int, below: int = UNTRACKED_BELOW) -> int:
    """Bytes one allocation adds to the allocator peak TensorFlow reports (``below``: ``untracked_below``)."""
    if nbytes < below:
        return 0
    rounded = -(-nbytes // ALLOCATION_GRANULE) * ALLOCATION_GRANULE
    if rounded >= SPLIT_ALWAYS_ABOVE:
        return rounded
    return rounded + int(rounded * FRAGMENTATION) // ALLOCATION_GRANULE * ALLOCATION_GRANULE


@dataclass(frozen=True)
class Moment:
    """Live allocations at one moment of the step, per component.

    ``fixed`` holds bytes that do not depend on the batch (already counted as the
    allocator counts them); ``per_sample`` holds, per component, pairs of
    (bytes per sample of one tensor, how many such tensors are live).
    """

    phase: str
    fixed: tuple[int, ...]
    per_sample: tuple[tuple[tuple[int, int], ...], ...]
    below: int = UNTRACKED_BELOW  # the device's ``untracked_below``

    def components(self, batch: int) -> list[int]:
        return [
            f + sum(n * counted_bytes(size * batch, self.below) for size, n in hist)
            for f, hist in zip(self.fixed, self.per_sample)
        ]

    def total(self, batch: int) -> int:
        return sum(self.components(batch))


@dataclass(frozen=True)
class StepPlan:
    """The moments of one step that can be its peak for some batch size.

    ``kept_per_sample`` holds, per ledger row, the bytes per sample it holds for the
    backward pass (its outputs that a gradient reads, plus what it keeps privately).
    """

    moments: tuple[Moment, ...]
    unknown_layer_types: tuple[str, ...]
    kept_per_sample: tuple[int, ...] = ()

    def peak_moment(self, batch: int) -> Moment:
        return max(self.moments, key=lambda m: m.total(batch))


class _Ledger:
    """Running live allocations of the walk, per component.

    With ``record`` it also writes the walk as allocator events, batch-independent:
    ``("a", id, bytes_per_sample, fixed_bytes)``, ``("f", id)`` and ``("m", phase)``
    after each moment. Changes of the fixed components (gradients, early optimizer
    temporaries, ...) become blocks of their own; weights and optimizer slots set
    before the first tensor are resident and left out (``allocator_peak`` places them).
    A feature map is recorded under its tensor's key, so its death frees its own
    allocation (stop 19: freeing the oldest of that size instead had moved other maps'
    chunks; on the 387 CPU cases 25 frozen steps moved, |error| summed 98.8 -> 72.2 %, the
    60 frozen sweep points' median 4.0 -> 2.5 %). For the rest, when one of several
    same-size tensors dies, the forward pass frees the oldest and the backward pass the
    newest.
    """

    def __init__(self, record: bool = False, below: int = UNTRACKED_BELOW) -> None:
        self.below = below
        self.fixed = [0] * len(COMPONENTS)
        self.live: list[dict[int, int]] = [{} for _ in COMPONENTS]
        self.moments: list[Moment] = []
        self.events: list[tuple] | None = [] if record else None
        self._seen = [0] * len(COMPONENTS)
        self._blocks: list[list[tuple[int, int]]] = [[] for _ in COMPONENTS]
        self._ids: dict[tuple[int, int], list[int]] = {}
        self._keyed: dict[object, int] = {}  # a tensor's key -> its allocation's id
        self._serial = 0
        self._started = False
        self.forward = True

    def _new_id(self) -> int:
        self._serial += 1
        return self._serial

    def _sync_fixed(self) -> None:
        events = self.events
        if events is None:
            return
        for comp, value in enumerate(self.fixed):
            delta = value - self._seen[comp]
            self._seen[comp] = value
            if not self._started and comp in (W, OPT):
                continue  # resident before the step
            blocks = self._blocks[comp]
            if delta > 0:
                sid = self._new_id()
                blocks.append((sid, delta))
                events.append(("a", sid, 0, delta))
            elif delta < 0:
                need = -delta
                exact = next((b for b in blocks if b[1] == need), None)
                if exact is not None:
                    blocks.remove(exact)
                    events.append(("f", exact[0]))
                    continue
                while need > 0 and blocks:  # free the oldest, keep the remainder
                    sid, size = blocks.pop(0)
                    events.append(("f", sid))
                    if size > need:
                        rest = self._new_id()
                        blocks.insert(0, (rest, size - need))
                        events.append(("a", rest, 0, size - need))
                    need -= size
        self._started = True

    def add(self, component: int, per_sample_bytes: int, count: int = 1, key: object = None) -> None:
        """Adds ``count`` tensors of this size (or removes ``-count``); ``key`` names one tensor.

        A keyed tensor's removal frees its own allocation event; unkeyed, the forward pass
        frees the oldest of that size and the backward pass the newest.
        """
        if per_sample_bytes <= 0 or count == 0:
            return
        hist = self.live[component]
        n = hist.get(per_sample_bytes, 0) + count
        if n:
            hist[per_sample_bytes] = n
        else:
            del hist[per_sample_bytes]
        if self.events is not None:
            self._sync_fixed()
            ids = self._ids.setdefault((component, per_sample_bytes), [])
            for _ in range(count):
                sid = self._new_id()
                ids.append(sid)
                if key is not None:
                    self._keyed[key] = sid
                self.events.append(("a", sid, per_sample_bytes, 0))
            for _ in range(-count):
                sid = self._keyed.pop(key, None) if key is not None else None
                if sid is not None and sid in ids:
                    ids.remove(sid)
                else:
                    sid = ids.pop(0) if self.forward else ids.pop()
                self.events.append(("f", sid))

    def rekey(self, old: object, new: object) -> None:
        """A tensor written into another's buffer takes over its allocation."""
        if old in self._keyed:
            self._keyed[new] = self._keyed.pop(old)

    def add_fixed(self, component: int, nbytes: int) -> None:
        """Adds (or with a negative size frees) one batch-independent block of its own."""
        self.fixed[component] += nbytes
        self._sync_fixed()

    def remove(self, component: int, per_sample_bytes: int, key: object = None) -> None:
        self.add(component, per_sample_bytes, -1, key)

    def snapshot(self, phase: str, extra_fixed: int = 0, extra_per_sample: tuple[int, ...] = ()) -> None:
        fixed = list(self.fixed)
        fixed[TRANS] += extra_fixed
        hists = [dict(h) for h in self.live]
        for size in extra_per_sample:
            if size > 0:
                hists[TRANS][size] = hists[TRANS].get(size, 0) + 1
        self.moments.append(
            Moment(phase, tuple(fixed), tuple(tuple(sorted(h.items())) for h in hists), self.below)
        )
        if self.events is not None:
            self._sync_fixed()
            temporaries = [("a", self._new_id(), 0, extra_fixed)] if extra_fixed > 0 else []
            temporaries += [("a", self._new_id(), size, 0) for size in extra_per_sample if size > 0]
            self.events.extend(temporaries)
            self.events.extend(("f", t[1]) for t in temporaries)
            self.events.append(("m", phase))


def _tensors(multiple: float, size: int) -> list[int]:
    """``multiple`` tensors of ``size`` bytes: whole ones, then one fractional."""
    whole = int(multiple)
    rest = int((multiple - whole) * size)
    return [size] * whole + ([rest] if rest else [])


# Layers whose forward is elementwise on one input: TensorFlow can run them in place.
_ELEMENTWISE = {"Activation", "ReLU", "LeakyReLU", "ELU", "Rescaling", "Normalization", "Dropout"}
_GRADIENT_IN_PLACE = {"Activation", "ReLU", "LeakyReLU", "ELU"}
_GRADIENT_IN_PLACE_ACTIVATIONS = {"relu", "relu6", "elu", "selu", "sigmoid", "tanh", "leaky_relu"}
# Gradient buffers that the executor keeps until the step ends (stop 21). Seen in
# traces (benchmarks/probe_pool1d.py, trace_step.py on conv1d_audio and unet1d): the
# gradient flowing into the backward of a layer that reduces a bias over the batch and
# the steps of a sequence stays allocated, through every earlier layer's backward and
# the updates, to the step's last events, with what writes into it in place (ReluGrad);
# the executor running those reductions last is the likely cause (its expensive-op
# queue, stop 10). What is modelled is what was traced:
# - 1-D pools (tf.nn.max_pool1d/avg_pool1d: a 2-D pool between expand_dims and squeeze)
#   above a Conv1D or Dense with a bias or a normalization with a beta, through
#   element-wise layers: Conv1D(relu) -> [BatchNormalization ->] MaxPooling1D or
#   AveragePooling1D and Dense -> MaxPooling1D held their pools' input gradients;
#   without a bias, or above another pool, they were freed as the layer below finished,
#   as MaxPooling2D's are. conv1d_audio b64 adam holds four (58.6 MiB) at its peak.
# - Any other layer's input gradient (not a normalization's three-path sum) flowing into
#   a Conv1D or Dense with a bias on a sequence (a 3-D tensor): Dense stacks on (batch,
#   1024, 32) with a bias held every input gradient, without one none; unet1d held its
#   convolutions' and its upsampling's input gradients flowing into biased Conv1Ds.
#   conv1d_audio's normalizations' input gradients, flowing into biased Conv1Ds, were not.
# On 4-D maps (Conv2D, oneDNN) none of this was seen, and nothing changes there.
_GRADIENT_HELD_TO_END = {"MaxPooling1D", "AveragePooling1D"}
_BIAS_REDUCING = {"Conv1D", "Dense", "BatchNormalization", "LayerNormalization"}
_SEQUENCE_BIAS = {"Conv1D", "Dense"}
_NORMALIZATIONS = {"BatchNormalization", "LayerNormalization", "GroupNormalization"}


def _padded_conv1d(layer: LayerStats) -> tuple[bool, bool]:
    """(causal or dilated, dilated) for a Conv1D; (False, False) for anything else.

    TensorFlow runs a causal Conv1D on a padded copy of its input (Pad) and a dilated one
    on a space-to-batch copy (SpaceToBatchND -> convolution -> BatchToSpaceND), and the
    weight gradient reads that copy: what the layer keeps is the copy, not the shared
    input. Traced (stop 21, trace_step.py "tcn.keras b16 adam", dilations 1, 2, 4, 8 with
    causal padding): each layer's padded copy lived until its backward; each dilated
    layer's space-to-batch copy, and the space-to-batch copy its backward makes of the
    incoming gradient, lived to the step's last events (freed at events 99-116 of 118).
    """
    if layer.layer_type != "Conv1D":
        return False, False
    dilated = any(d > 1 for d in layer.detail_ints("dilation_rate"))
    return dilated or "padding=causal" in layer.detail, dilated


# TensorFlow merges identical stateless ops that read the same tensors before it runs a
# function (common-subexpression elimination: tensorflow/core/graph/optimizer_cse.cc,
# on by default, and Grappler's arithmetic optimizer dedup), so two parameter-free
# layers of one type and configuration on one input compute one output (NASNet's cells
# apply Activation("relu") to the same tensor up to five times). Measured
# (benchmarks/probe_layers.py tworelu / onerelu --batch 64): two relu layers on one
# input cost no more than one shared layer (36 vs 40 MiB at 6 blocks). Only types
# whose whole configuration the ledger shows (activation, pool size and strides,
# output shape) are merged; each merged layer's gradient still runs. ZeroPadding2D's
# padding is not in the ledger: two pads of one (merged) input to the same shape are
# taken as one (NASNet pads relu(p) once per 7x7 separable branch; Keras' correct_pad
# gives one padding per kernel size). NASNetMobile 224 px b16 adam: +6.0 % -> +1.7 %.
_MERGEABLE = {"Activation", "MaxPooling2D", "AveragePooling2D", "GlobalAveragePooling2D", "Add", "Concatenate",
              "ZeroPadding2D"}


def _writes_in_place(layer, inference, precision, alias, producer, last_forward_use, keepers, nbytes,
                     outputs, i, frozen_op=False) -> bool:
    if len(layer.output_ids) != 1 or not layer.input_ids:
        return False
    source, target = alias[layer.input_ids[0]], layer.output_ids[0]
    if frozen_op and layer.layer_type == "Add" and len(layer.input_ids) == 2:
        # A binary op forwards an input buffer no one else reads (measured: two
        # Conv2D branches + Add, frozen, peak = input + the two conv outputs; BFC_SIM.md).
        return (alias[target] == target and producer[source] != -1 and last_forward_use[source] == i
                and keepers[source] == 0 and source not in outputs and nbytes[source] == nbytes[target])
    if len(layer.input_ids) != 1:
        return False
    normalization = layer.layer_type in ("BatchNormalization", "LayerNormalization")
    elementwise = layer.layer_type in _ELEMENTWISE or (normalization and inference)
    if not elementwise or alias[target] != target or producer[source] == -1:
        return False
    # Training-mode Dropout too: Keras 3's stateless dropout is select(mask, x * scale, 0),
    # both ops forward x's buffer (traced: dcgan_discriminator b64, no allocation for the
    # [64, 8192] output; the random uniform is made at the step's start and dies there).
    if normalization and precision.is_mixed:
        return False  # it works on a float32 copy, then casts back
    return (last_forward_use[source] == i and keepers[source] == 0 and source not in outputs
            and nbytes[source] == nbytes[target])


# Keras 3 runs a grouped Conv2D (groups > 1) on TensorFlow through
# ``tf.function(jit_compile=True)`` ("grouped convolutions are broken on CPU without
# XLA", keras/src/backend/tensorflow/nn.py conv). When every group has one input
# channel (a depthwise conv written as Conv2D(C, k, groups=C), as in ConvNeXt), XLA's
# filter gradient on the CPU expands to a dense k x k x C_in x C_out filter:
# measured (benchmarks/probe_grouped_conv.py), a 7x7 Conv2D with groups = channels
# added 2.0-2.6 dense float32 filters to the step (C = 128-512), independent of the
# batch and spatial size; 2 channels per group added nothing, nor does
# DepthwiseConv2D (not compiled). ConvNeXtTiny at 224 px, SGD, batch 4 and 12:
# measured 1090 / 2592 MiB, i.e. 339 MiB batch-independent of which 107 resident,
# leaving ~2.1 of its largest dense filter (110 MiB). Modelled as two dense filters
# (the low end) while that layer's gradient runs.
XLA_DEPTHWISE_FILTER_GRAD = 2.0


def _grouped_depthwise_scratch(layer, profile: ModelProfile, device: Device) -> int:
    """Bytes of XLA's dense filter gradient for a Conv2D with one input channel per group.

    Keras compiles grouped convolutions with XLA on every device; XLA's GPU backend hands
    them to cuDNN's grouped convolution, so only the CPU has this filter: on an H100,
    ConvNeXtBase 128 px b1 sgd peaked at 489 MiB against 955 on the CPU
    (``calc/data/gpu_tf_h100.json``), about its two dense 7x7x1024x1024 filters.

    The dense filter is float32 under every precision: ``benchmarks/probe_grouped_conv.py
    dw C=512 n=2`` added 120 MiB to the step under float32 and mixed_bfloat16 alike (and
    134 under mixed_float16), 2.4-2.7 dense float32 filters of 49 MiB; sized in the
    16-bit compute dtype, ConvNeXtTiny 160 px b8 adam was -11.3 % (bf16) and -7.3 % (f16).
    """
    if (device is Device.GPU or layer.layer_type != "Conv2D" or not layer.trainable_weight_elements
            or len(layer.input_ids) != 1):
        return 0
    kernel_size = layer.detail_ints("kernel_size")
    strides = layer.detail_ints("strides") or (1,)
    if not kernel_size or not layer.output_shapes or len(layer.output_shapes[0]) < 2:
        return 0
    k = math.prod(kernel_size)
    c_out = layer.output_shapes[0][-1]
    per_group_in = layer.trainable_weight_elements[0] // max(1, k * c_out)
    spatial_out = math.prod(layer.output_shapes[0][:-1])
    c_in = profile.tensor_elements[layer.input_ids[0]] // max(1, spatial_out * math.prod(strides))
    if per_group_in != 1 or c_in <= 1 or k * c_out != layer.trainable_weight_elements[0]:
        return 0
    return int(XLA_DEPTHWISE_FILTER_GRAD * FLOAT32 * k * c_in * c_out)


def largest_fixed_request_bytes(profile: ModelProfile, config: TrainingConfig) -> int:
    """The largest single request of the step that does not grow with the batch, in full training.

    XLA's dense filter gradient of a depthwise Conv2D with groups (``_grouped_depthwise_scratch``;
    ConvNeXt's 7x7 convs: 220 MiB for ConvNeXtTiny, 880 MiB for ConvNeXtXLarge). The walk
    counts it at its size, but the allocator may hand it a free chunk up to 128 MiB larger
    (``SPLIT_ALWAYS_ABOVE``), depending on the pool: traced on ConvNeXtTiny 128 px b8 adamax
    mixed_float16, its 220.9 MiB request got a 310.4 MiB chunk and set the peak. Runs of one
    such step are bimodal (docs/MEASUREMENTS.md, stop 10). 0 unless every layer trains.
    """
    if partly_frozen(profile, config):
        return 0
    return max((_grouped_depthwise_scratch(layer, profile, config.device) for layer in profile.layers), default=0)


def largest_variable_bytes(profile: ModelProfile) -> int:
    """Bytes of the model's largest variable (float32 under every precision)."""
    return FLOAT32 * max((e for layer in profile.layers
                          for e in (*layer.trainable_weight_elements, *layer.non_trainable_weight_elements)), default=0)


def spread_caveats(profile: ModelProfile, config: TrainingConfig) -> dict[str, int]:
    """Why repeated runs of this step can differ widely, measured: kind -> bytes behind it.

    - ``large_variable``: a variable of 128 MiB or more (VGG's fc1 with its Flatten top):
      when the executor runs its weight gradient decides the peak (VGG16 224 px b8 SGD:
      1100-1195 or 1851 MiB).
    - ``large_fixed_request``: ``largest_fixed_request_bytes`` of 128 MiB or more (ConvNeXt),
      whose chunk depends on the pool (ConvNeXtSmall 128 px b1 Adam: 875 / 878 / 1022 MiB).
    - ``inference_layout``: part of the model runs in inference (frozen backbone, last N
      layers): the peak is a few tensors in whole chunks, simulated (runs differ by up to 15 %).
    - ``updates_together``: under mixed_float16 the peak is the update, where every variable's
      update starts at once and how many temporaries are alive together varies (the bytes:
      the update's temporaries counted; ResNet152 128 px b6 Adadelta EMA: 1543 / 1587 / 1912 MiB).
    - ``float16_buffer``: under mixed_float16 the peak is a layer whose float16 CPU kernel holds a
      buffer (calc.kernels) of a tenth of the peak or more, handed whatever chunk the pool has
      (MobileNetV3Small 128 px b2: a 17.6 MiB im2col request in a 32 MiB chunk; the bytes: the
      layer's buffers).
    """
    caveats = {}
    if (variable := largest_variable_bytes(profile)) >= SPLIT_ALWAYS_ABOVE:
        caveats["large_variable"] = variable
    if (request := largest_fixed_request_bytes(profile, config)) >= SPLIT_ALWAYS_ABOVE:
        caveats["large_fixed_request"] = request
    inference = partly_frozen(profile, config)
    half = config.precision is Precision.MIXED_FLOAT16
    if inference or half:
        b = estimate_memory(profile, config)
        if inference:
            caveats["inference_layout"] = b.allocator_bytes
        if waits_for_all_gradients(config) and b.peak_phase == UPDATE_PHASE:
            caveats["updates_together"] = b.other_bytes + b.backward_transient_bytes
        if half and (buffers := kernel_bytes_at(profile, config, b.peak_phase)) >= FLOAT16_BUFFER_SHARE * b.peak_bytes:
            caveats["float16_buffer"] = buffers
    return caveats


# A float16 kernel buffer of this share of the peak or more makes it a spread caveat: of the
# 261 validation cases at stop 13, the 15 such steps were off by -15.9 % to +4.9 % (an
# 18.8 % margin covered their runs), the 119 without any caveat -6.4 % to +8.6 % (12.0 %).
FLOAT16_BUFFER_SHARE = 0.1


def kernel_bytes_at(profile: ModelProfile, config: TrainingConfig, phase: str) -> int:
    """The float16 kernels' buffers (calc.kernels) of the layer whose forward or gradient is ``phase``."""
    direction, _, name = phase.partition(" ")
    if direction not in ("forward", "backward"):
        return 0
    layer = name.split(" (")[0]
    ops = next((ops for n, *ops in _half_kernel_plan(profile, _without_batch(config)) if n == layer), None)
    return _half_kernel_bytes(ops[direction == "backward"], config.per_replica_batch) if ops else 0


def _gradient_flow(profile: ModelProfile, trained: list[bool]) -> tuple[list[bool], list[bool], list[bool]]:
    """Per layer, whether it has trained weights; per tensor, whether it carries a gradient
    (downstream of a trained weight); per layer, whether it runs backward."""
    has_weights = [t and layer.trainable_params > 0 for t, layer in zip(trained, profile.layers)]
    requires_grad = [False] * len(profile.tensor_elements)
    backward = [False] * len(profile.layers)
    for i, layer in enumerate(profile.layers):
        flows = has_weights[i] or any(requires_grad[t] for t in layer.input_ids)
        backward[i] = flows
        for t in layer.output_ids:
            requires_grad[t] = flows
    return has_weights, requires_grad, backward


def _half_kernel_scratch(profile: ModelProfile, config: TrainingConfig, has_weights: list[bool],
                         requires_grad: list[bool], backward: list[bool]) -> tuple[list, list]:
    """TensorFlow's float16 CPU kernels' own temporaries (calc.kernels), per layer: (fixed bytes,
    per-sample bytes) while its forward runs, and while its gradient runs. Nothing outside
    mixed_float16, and nothing on a GPU, where cuDNN and cuBLAS compute in float16 themselves, nor on a
    CPU with AVX512-FP16, where oneDNN does (``Device.CPU_FP16``)."""
    none: tuple[int, tuple[int, ...]] = (0, ())
    forward, backward_ops = [none] * len(profile.layers), [none] * len(profile.layers)
    if config.precision is not Precision.MIXED_FLOAT16 or config.device is not Device.CPU:
        return forward, backward_ops
    channels = _input_channels(profile)
    for i, layer in enumerate(profile.layers):
        if layer.float32_compute or len(layer.input_ids) != 1:
            continue
        t_in = layer.input_ids[0]
        fixed, per_sample = matmul_upcasts(layer, profile.tensor_elements[t_in],
                                           sum(profile.tensor_elements[t] for t in layer.output_ids))
        forward[i] = (counted_bytes(fixed), per_sample)
        if backward[i]:
            col = im2col_buffer_bytes(layer, channels[t_in], has_weights[i], requires_grad[t_in])
            backward_ops[i] = (counted_bytes(fixed) + counted_bytes(col), per_sample)
    return forward, backward_ops


def float16_kernel_bytes(profile: ModelProfile, config: TrainingConfig) -> dict[str, tuple[int, int]]:
    """Per layer name, under mixed_float16: the bytes TensorFlow's float16 CPU kernels hold
    beyond their outputs while the layer's forward runs and while its gradient runs, at the
    config's per-device batch (calc.kernels). Layers without any are left out."""
    batch = config.per_replica_batch
    found = {}
    for name, f, b in _half_kernel_plan(profile, _without_batch(config)):
        forward_bytes, backward_bytes = _half_kernel_bytes(f, batch), _half_kernel_bytes(b, batch)
        if forward_bytes or backward_bytes:
            found[name] = (forward_bytes, backward_bytes)
    return found


def _half_kernel_bytes(scratch: tuple[int, tuple[int, ...]], batch: int) -> int:
    """One ``_half_kernel_scratch`` entry (fixed bytes, per-sample bytes) at ``batch``."""
    fixed, per_sample = scratch
    return fixed + sum(counted_bytes(size * batch) for size in per_sample)


@lru_cache(maxsize=64)
def _half_kernel_plan(profile: ModelProfile, config: TrainingConfig) -> tuple[tuple, ...]:
    """``_half_kernel_scratch`` per layer name, once per configuration (every batch shares it)."""
    has_weights, requires_grad, backward = _gradient_flow(profile, _trainable_flags(profile, config)[0])
    forward_ops, backward_ops = _half_kernel_scratch(profile, config, has_weights, requires_grad, backward)
    return tuple(zip((layer.name for layer in profile.layers), forward_ops, backward_ops))


def _input_channels(profile: ModelProfile) -> list[int]:
    """Channels (last dimension) of every tensor, from its producer's output shape."""
    channels = [0] * len(profile.tensor_elements)
    for t in profile.input_ids:
        channels[t] = profile.input_shape[-1] if profile.input_shape else 0
    for layer in profile.layers:
        for t, shape in zip(layer.output_ids, layer.output_shapes):
            channels[t] = shape[-1] if shape else 0
    return channels


# Layers whose first op oneDNN's layout pass replaces on the CPU (_MklNative* kernels).
_ONEDNN_REWRITTEN = frozenset({"Conv2D", "DepthwiseConv2D", "SeparableConv2D", "MaxPooling2D", "AveragePooling2D",
                               "Dense"})


def _executor_order(layers, producer, onednn: bool = False, twin_of: dict[int, int] | None = None) -> list[int]:
    """The order of the forward pass as TensorFlow's executor runs it (one inter-op thread).

    Keras traces the layers breadth first (by depth from the output), but the executor
    runs one op and then one of the ops it made ready, queueing the others: a fork
    runs one branch to its end (its join waits) before the next. Which branch first
    is measured, not derived: the first in Keras' order (a fork of two 1x1-conv
    branches, ``benchmarks/probe_inference.py --size 56 --channels 32 conv:32:1:1:v:0,fork:4``,
    measured 54 / 92 MiB at b16 / b32: one expanded tensor at a time; Xception's
    residual conv runs after the main branch, as measured; the other way round
    Xception 224 px b16 frozen was -22 %). NASNetMobile frozen b8 / b16 / b32 went from
    +30 / +33 / +17 % to +16 / +9 / +11 %; no other validation case moved.

    ``onednn`` (the CPU): an op that oneDNN's layout pass rewrote runs before one it did
    not. The executor runs the last op in its node's out-edge list inline and queues the
    others (tensorflow/core/common_runtime/executor.cc ``ScheduleReady``), and a rewritten
    op's edge is added after the others when the pass replaces the node. Traced
    (``benchmarks/trace_step.py "ResNet101V2-224x224x3-head1000 b24 sgd float32 frozen"``):
    at the end of each stage the shortcut's MaxPooling2D runs before the next block's
    BatchNormalization, which then normalizes the block input in place instead of into a
    new tensor. Between two rewritten ops (Xception's residual conv and separable conv)
    the first in Keras' order still runs first. On the 345 CPU cases, with the fusions of
    ``_cpu_fusions``, it moved 10 frozen steps (ResNetV2, NASNet): their |error| summed
    62.8 -> 27.5 %.

    ``twin_of`` (the CPU): a layer that common-subexpression elimination merged into an
    earlier twin (``_MERGEABLE``) hands its consumers to the twin, as TensorFlow's CSE
    adds the duplicate's out-edges to the node it keeps, after that node's own. For such
    a node the out-edge list is modelled whole: its own consumers (in reverse of Keras'
    order, which gives the order above), then the merged ones, the rewritten ops moved to
    the end; the executor runs the last and then the others last-in first-out (each is
    expensive on the CPU: one runs inline, the rest are queued to the one inter-op
    thread, whose queue pops the newest first). Traced (``benchmarks/trace_step.py
    "NASNetMobile-224x224x3-head1000 b12 sgd float32 frozen"``): the stem's relu (one
    node for the five relus of its two cells) runs the second cell's 1x1 average pool
    first, then the first cell's 1x1 conv and its branches, then the second cell's pad
    and crop, while the relu still waits for the first cell's 7x7 and 5x5 branches; this
    order reproduces the traced one for its first 16 layers, where the order without it
    diverged at the second. The peak is the stem's map, its pad and its crop alive
    together. A holdout of 12 NASNet frozen steps predicted both ways before it was
    measured: median 4.3 -> 2.2 %, max 22.8 -> 12.2 %; on all 519 CPU cases it moves the 25
    NASNet steps only, |error| summed 184.2 -> 108.1 % (NASNetMobile 224 px b32 SGD frozen
    -13.5 -> +7.2 %). Not on a GPU, whose executor runs inexpensive kernels inline in
    first-in first-out order (with it the two H100 NASNet steps' |error| summed 14.8 ->
    22.9 %).
    """
    n = len(layers)
    succ: list[list[int]] = [[] for _ in range(n)]
    pending = [0] * n
    twin_of = twin_of if onednn and twin_of else {}
    merged_in: dict[int, list[int]] = {}  # a kept twin -> the consumers its duplicates handed it
    for i, layer in enumerate(layers):
        for p in dict.fromkeys(producer[t] for t in layer.input_ids):
            if p != -1:
                if p in twin_of:
                    merged_in.setdefault(twin_of[p], []).append(i)
                else:
                    succ[p].append(i)
                pending[i] += 1
    for j, extra in merged_in.items():
        out = succ[j][::-1] + extra
        out = ([x for x in out if layers[x].layer_type not in _ONEDNN_REWRITTEN]
               + [x for x in out if layers[x].layer_type in _ONEDNN_REWRITTEN])
        succ[j] = out[::-1]  # the order they run in: the last out-edge first, then LIFO
    pool = deque(i for i in range(n) if not pending[i])
    order: list[int] = []
    while pool:
        node = pool.popleft()
        while node is not None:
            order.append(node)
            ready = []
            for s in succ[node]:
                pending[s] -= 1
                if not pending[s]:
                    ready.append(s)
            ready.reverse()
            rewritten = ([k for k, r in enumerate(ready) if layers[r].layer_type in _ONEDNN_REWRITTEN]
                         if onednn and node not in merged_in else [])
            if rewritten:
                ready.append(ready.pop(rewritten[-1]))  # the first rewritten one runs next
            node = ready.pop() if ready else None  # the first made ready runs next
            pool.extendleft(ready)  # the others wait at the front, the second first
    # Rows that read each other (no graph Keras builds) are walked in the ledger's order.
    return order if len(order) == n else list(range(n))


def _first_stage(layer, precision: Precision, input_bytes: int, input_elements: int) -> tuple[int, str]:
    """Per-sample bytes of the intermediate a layer in inference makes first, and its name.

    A SeparableConv2D runs its depthwise conv, then the pointwise one. Under mixed
    precision the normalizations (_NORMALIZATIONS) cast their 16-bit input to
    float32 first (Keras 3.15 ``call``), normalize that copy in place and cast the
    result back: measured, frozen backbones under mixed precision peaked 29-43 % above
    a walk without the copy (docs/MEASUREMENTS.md).
    """
    if layer.layer_type == "SeparableConv2D":
        return input_bytes // max(1, math.prod(layer.detail_ints("strides") or (1,))), "depthwise"
    if precision.is_mixed and layer.layer_type in _NORMALIZATIONS:
        return FLOAT32 * input_elements, "float32 copy"
    return 0, ""


def _inference_scratch(layer, staged: int) -> float:
    """Output-sized temporaries of a layer running in inference, while it runs.

    A chain of elementwise ops (GELU's 0.5 * x * (1 + erf(x / sqrt 2)), hard_swish,
    x * sigmoid(x), LayerNormalization's squared difference) needs one new tensor
    while its input lives; the next ops write in place. What training keeps of those
    intermediate results (``extra_outputs``) is gone in inference. The convolutions'
    measured forward "scratch" was the allocator's chunk waste (docs/BFC_SIM.md,
    probe 1), which the allocator simulation counts itself; a separable conv's
    depthwise output is its own step of the walk (``staged``); pooling's extra is
    oneDNN's training workspace.
    """
    rule, act, _ = rule_for(layer.layer_type, layer.activation)
    fused = min(1.0, act.forward_scratch + act.extra_outputs)
    if staged or rule.input_for_weights_only:
        return fused
    if layer.layer_type.startswith("MaxPooling"):
        return 0.0
    return min(1.0, rule.forward_scratch + rule.extra_outputs) + fused


def waits_for_all_gradients(config: TrainingConfig) -> bool:
    """Whether every update waits for every gradient (mixed_float16's loss scale)."""
    # mixed_float16: Keras' LossScaleOptimizer checks every gradient is finite and applies
    # them inside one ops.cond whose predicate needs them all. Gradient accumulation's
    # ops.cond does not wait: its predicate is the step counter, ready at the start, and
    # TensorFlow lowers the cond to per-tensor switches, so each variable's update (and
    # its early temporaries) runs as without accumulation: ``benchmarks/probe_gradients.py
    # --accum 2`` measured the same growth per layer for SGD momentum (5 / 9 kernels at
    # N = 4 / 8) as without it, and none for SGD or Adam.
    return config.precision is Precision.MIXED_FLOAT16


def accumulator_reset_parameters(profile: ModelProfile, config: TrainingConfig) -> int:
    """Elements of the zeros constants that gradient accumulation holds (0 without it)."""
    if config.gradient_accumulation_steps <= 1:
        return 0
    return sum(_accumulator_reset_elements(profile, _trainable_flags(profile, config)[0]))


def _output_channels(layer) -> int:
    """The last dimension of the layer's first output (0 when unknown): a bias is this long."""
    return layer.output_shapes[0][-1] if layer.output_shapes and layer.output_shapes[0] else 0


def _accumulator_reset_elements(profile: ModelProfile, trained: list[bool]) -> list[int]:
    """Elements of the zeros constants that reset gradient accumulators, one per shape.

    Keras resets each accumulator with ``assign(zeros(shape))``; TensorFlow folds the
    zeros into a constant the graph holds for good (and merges equal constants), so the
    resident part grows by one tensor per distinct variable shape. Measured
    (``benchmarks/probe_gradients.py --opts sgd --accum 2 [--distinct]``): a Dense chain
    whose kernels share one shape holds one kernel more than its kernels and
    accumulators (N = 4 and 8: 9 and 17 kernels), one with distinct shapes 2.5x what it
    holds without accumulation (N = 4: 60.4 against 24.2 MiB); ResNet50 160 px b16
    adam, accumulate 4: resident 497 MiB, 390 of weights, slots and accumulators.
    """
    seen: set[tuple] = set()
    out = []
    for t, layer in zip(trained, profile.layers):
        if not t or layer.shares_weights:
            continue
        last = _output_channels(layer)
        for j, e in enumerate(layer.trainable_weight_elements):
            # A kernel's shape is told apart by its layer kind and output channels;
            # vectors (biases, scales) of one length share a shape.
            key = (e, layer.layer_type, last) if j == 0 and e != last else (e,)
            if key not in seen:
                seen.add(key)
                out.append(e)
    return out


def early_temporaries_per_variable(config: TrainingConfig) -> int:
    """Variable-sized optimizer temporaries computed before the gradient, per variable.

    They are products of slots alone, run at the start of the step and live until their
    variable's update (calc.optimizers.EARLY_TEMPORARIES). Inside the ops.cond of an
    update that waits for all gradients they depend on the branch: none early.
    """
    if waits_for_all_gradients(config):
        return 0
    return early_temporaries(config.optimizer, config.optimizer_options, config.precision.is_mixed)


def update_scratch_per_variable(config: TrainingConfig) -> int:
    """Variable-sized buffers alive during one variable's update, its gradient and its early
    temporaries included (calc.optimizers.UPDATE_SCRATCH).

    EMA's momentum * average is an early temporary too, but unlike the optimizer's own it is
    not consumed by the update: the average's assign reads the updated variable, so it is
    alive beside the update's buffers, one more. Traced: MobileNetV2 96 px b2 Lion with EMA,
    frozen backbone, peaked at the head's update holding its gradient and four kernel-sized
    products (m * beta_1, g * (1 - beta_1), m * beta_2, momentum * average): -15.2 -> -4.2 %;
    the 41 EMA cases' median 4.05 -> 3.32 %. Inside the ops.cond of an update that waits for
    all gradients nothing is early (``early_temporaries_per_variable``): none more.
    """
    ema = config.optimizer_options.use_ema and not waits_for_all_gradients(config)
    return update_scratch(config.optimizer, config.optimizer_options) + int(ema)


def _granules(nbytes: float) -> int:
    """``nbytes`` rounded down to whole allocation granules."""
    return int(nbytes) // ALLOCATION_GRANULE * ALLOCATION_GRANULE


def _alive_share(nbytes: int) -> int:
    """The part of early optimizer temporaries the peak holds (``EARLY_TEMPORARIES_ALIVE``), whole granules."""
    return _granules(nbytes * EARLY_TEMPORARIES_ALIVE)


def _trainable_flags(profile: ModelProfile, config: TrainingConfig) -> tuple[list[bool], list[bool]]:
    """Per layer: (its weights are trained, it runs in inference mode)."""
    n = len(profile.layers)
    if config.train_mode is TrainMode.ALL:
        return [True] * n, [False] * n
    if config.train_mode is TrainMode.FROZEN_BACKBONE:
        if not profile.has_backbone:
            raise ValueError(
                "train_mode='frozen_backbone' needs a model with a backbone and a new head "
                "(catalogue models with include_top=False)."
            )
        frozen = [layer.in_backbone for layer in profile.layers]
        return [not f for f in frozen], frozen
    first = max(0, n - config.last_n_layers)
    return [i >= first for i in range(n)], [i < first for i in range(n)]


def partly_frozen(profile: ModelProfile, config: TrainingConfig) -> bool:
    """Some layer is not trained: a frozen backbone, or the last N layers of more than N.

    The last N layers of a model with N layers or fewer is full training, and is estimated
    as such (the nineteenth holdout's VGG19 224 px b1 Adamax, last 30 of 23 layers).
    """
    if config.train_mode is TrainMode.ALL:
        return False
    if config.train_mode is TrainMode.LAST_N:  # _trainable_flags trains them all when N covers the model
        return config.last_n_layers < len(profile.layers)
    return not all(_trainable_flags(profile, config)[0])


def _raw_bytes(nbytes: int, below: int = UNTRACKED_BELOW) -> int:
    """What one allocation asks the allocator for (the simulation adds the chunk effects)."""
    return 0 if nbytes < below else -(-nbytes // ALLOCATION_GRANULE) * ALLOCATION_GRANULE


def _cpu_fusions(profile: ModelProfile, config: TrainingConfig, frozen: list[bool],
                 input_channels: list[int]) -> tuple[set[int], dict[int, tuple[int, int]]]:
    """Ops that TensorFlow's CPU graph passes fuse in a frozen (inference) step.

    Returns the ZeroPadding2D layers whose pad is fused into the Conv2D that reads it,
    and, per Add layer, ``(conv layer, addend input)`` of the biased Conv2D fused into it.

    - oneDNN's layout pass rewrites ``Pad`` + ``Conv2D`` into one op
      (``_MklPadWithConv2D`` / ``_MklPadWithFusedConv2D``, tensorflow/core/common_runtime/
      mkl_layout_pass.cc) when the pad's only reader is the convolution: the padded
      tensor is never made. In training the filter gradient reads it too, so no fusion.
    - Grappler's remapper (``FindContractionWithBiasAddAndAdd``,
      tensorflow/core/grappler/optimizers/remapper.cc) turns a ``Conv2D`` + ``BiasAdd``
      whose only reader is a two-input ``Add`` of one shape (float32 or bfloat16, on the
      CPU) into ``_FusedConv2D(x, filter, bias, addend)``: the input at port 0 is tried
      first, then port 1. The fused op runs when the ``Add`` would, writes into the
      addend's buffer when nothing else reads it, and the convolution's own output is
      never made.

    Traced (``benchmarks/trace_step.py "ResNet50V2-224x224x3-head1000 b16 sgd float32
    frozen"``): no allocation for any ``*_0_conv`` shortcut, one ``BiasAdd`` per stage
    (its first block's main branch, into which the shortcut conv then writes), none for
    the ZeroPadding2D before each block's 3x3 conv nor for the stem's; ResNet50 and
    DenseNet121 frozen allocate no stem pad either; EfficientNetB0's and MobileNetV2's
    pads before a depthwise conv are allocated (not fused).
    """
    if config.device is Device.GPU or config.precision is Precision.MIXED_FLOAT16:
        return set(), {}
    layers = profile.layers
    readers: dict[int, list[int]] = {}
    for i, layer in enumerate(layers):
        for t in dict.fromkeys(layer.input_ids):
            readers.setdefault(t, []).append(i)
    outputs = set(profile.output_ids)
    producer = {t: i for i, layer in enumerate(layers) for t in layer.output_ids}

    def only_reader(t: int) -> int:
        r = readers.get(t, [])
        return r[0] if len(r) == 1 and t not in outputs else -1

    def plain_conv(i: int) -> bool:
        layer = layers[i]
        if layer.layer_type != "Conv2D" or not frozen[i] or len(layer.input_ids) != 1 or len(layer.output_ids) != 1:
            return False
        k = math.prod(layer.detail_ints("kernel_size") or (1,))
        c_out = _output_channels(layer)
        # A grouped Conv2D is compiled by XLA in Keras (no grappler fusion).
        return bool(layer.trainable_weight_elements) and (
            layer.trainable_weight_elements[0] == k * input_channels[layer.input_ids[0]] * c_out)

    pads: set[int] = set()
    adds: dict[int, tuple[int, int]] = {}
    for i, layer in enumerate(layers):
        if not frozen[i] or len(layer.output_ids) != 1:
            continue
        if layer.layer_type == "ZeroPadding2D" and len(layer.input_ids) == 1:
            reader = only_reader(layer.output_ids[0])
            if reader != -1 and plain_conv(reader):
                pads.add(i)
        elif layer.layer_type == "Add" and len(layer.input_ids) == 2:
            a, b = layer.input_ids
            if a == b or profile.tensor_elements[a] != profile.tensor_elements[b]:
                continue
            for port in (0, 1):
                t = layer.input_ids[port]
                conv = producer.get(t, -1)
                if (conv != -1 and only_reader(t) == i and plain_conv(conv) and layers[conv].activation == "linear"
                        and len(layers[conv].trainable_weight_elements) == 2
                        and layers[conv].trainable_weight_elements[1] == _output_channels(layers[conv])):
                    adds[i] = (conv, layer.input_ids[1 - port])
                    break
    return pads, adds


def _simulate(profile: ModelProfile, config: TrainingConfig,
              record: bool = False) -> tuple[list[Moment], StepPlan, list[tuple]]:
    below = untracked_below(config.device)
    count = _raw_bytes if record else globals()["counted_bytes"]

    def counted_bytes(nbytes: int) -> int:
        return count(nbytes, below)

    layers = profile.layers
    precision = config.precision
    cb = precision.compute_bytes
    trained, inference = _trainable_flags(profile, config)
    has_weights, requires_grad, backward = _gradient_flow(profile, trained)

    n_tensors = len(profile.tensor_elements)
    producer = [-1] * n_tensors
    alias = list(range(n_tensors))
    nbytes = [0] * n_tensors
    for t in profile.input_ids:
        nbytes[t] = FLOAT32 * profile.tensor_elements[t]
    twins: dict[int, int] = {}  # a merged layer -> the twin it was merged into
    first_of: dict[tuple, int] = {}
    frozen = [inference[i] and not backward[i] for i in range(len(layers))]
    fused_pads, fused_adds = _cpu_fusions(profile, config, frozen, _input_channels(profile))
    fused_convs = {conv: add for add, (conv, _) in fused_adds.items()}
    for i, layer in enumerate(layers):
        rule, _, _ = rule_for(layer.layer_type, layer.activation)
        out_bytes = FLOAT32 if layer.float32_compute else cb
        if i in fused_pads:
            rule = replace(rule, aliases_input=True)  # the convolution reads the unpadded input
        twin = -1
        if layer.layer_type in _MERGEABLE and not layer.params and layer.output_ids:
            key = (layer.layer_type, layer.activation, tuple(alias[t] for t in layer.input_ids),
                   layer.detail, layer.output_shapes, layer.float32_compute)
            twin = first_of.setdefault(key, i)
        for t in layer.output_ids:
            producer[t] = i
            if (rule.aliases_input or rule.casts_to_compute and not precision.is_mixed) and layer.input_ids:
                alias[t] = alias[layer.input_ids[0]]
            else:
                nbytes[t] = out_bytes * profile.tensor_elements[t]
        if twin not in (-1, i):
            twins[i] = twin
            for t, u in zip(layer.output_ids, layers[twin].output_ids):
                alias[t] = alias[u]

    # What each backward layer keeps: shared tensors by id, private ones by size.
    keepers = [0] * n_tensors
    kept_ids: list[list[int]] = [[] for _ in layers]
    private: list[list[int]] = [[] for _ in layers]
    private_to_end: list[list[int]] = [[] for _ in layers]  # kept copies that outlive the layer's backward
    padded_copies: set[tuple] = set()  # (input, kernel size, dilation) of each padded Conv1D input copy
    private_fixed = [0] * len(layers)
    # A cached profile lists the types unknown when it was built; some may have a rule now.
    unknown: set[str] = {t for t in profile.unknown_layer_types if not is_known_layer_type(t)}
    for i, layer in enumerate(layers):
        if not backward[i]:
            continue
        rule, act, known = rule_for(layer.layer_type, layer.activation)
        if not known:
            unknown.add(layer.layer_type if layer.activation == "linear" else f"{layer.layer_type}({layer.activation})")
        if inference[i] and layer.layer_type in ("BatchNormalization", "Dropout", "SpatialDropout2D"):
            # Inference mode: BN is x * inv + c with constant inv; Dropout is identity.
            rule = NOTHING
        need_input = any(requires_grad[t] for t in layer.input_ids)
        padded, dilated = _padded_conv1d(layer)
        out_elems = [profile.tensor_elements[t] for t in layer.output_ids]
        keep: list[int] = []
        if rule.keeps_input and (has_weights[i] or (need_input and not rule.input_for_weights_only)):
            for t in layer.input_ids:
                elems = profile.tensor_elements[t]
                if precision.is_mixed and rule.upcasts:
                    private[i].append(FLOAT32 * elems)  # the float32 copy is what is kept
                elif precision.is_mixed and producer[alias[t]] == -1 and not layer.float32_compute:
                    # Keras casts a float32 model input to the compute dtype: the copy is kept.
                    private[i].append(cb * elems)
                elif padded:
                    # The padded or space-to-batch copy is kept (_padded_conv1d); convolutions
                    # that pad one input alike share one (common-subexpression elimination:
                    # WaveNet's gate pairs made 4 SpaceToBatchND for 8 dilated layers).
                    key = (alias[t], layer.detail_ints("kernel_size"), layer.detail_ints("dilation_rate"))
                    if key not in padded_copies:
                        padded_copies.add(key)
                        (private_to_end if dilated else private)[i].append(nbytes[alias[t]])
                else:
                    keep.append(alias[t])
        if rule.keeps_output:
            keep.extend(alias[t] for t in layer.output_ids)
        for e in out_elems:
            private[i].extend(_tensors(rule.extra_outputs, (FLOAT32 if precision.is_mixed and rule.upcasts else cb) * e))
            if rule.mask_bytes_per_element:
                private[i].append(rule.mask_bytes_per_element * e)
            if act.keeps_input:
                private[i].append(cb * e)  # the pre-activation tensor
            private[i].extend(_tensors(act.extra_outputs, cb * e))
        if act.keeps_output:
            keep.extend(alias[t] for t in layer.output_ids)
        if precision.is_mixed and rule.input_for_weights_only and need_input:
            # dX = dY * W^T reads the 16-bit copy of the kernel made for the forward pass.
            private_fixed[i] += sum(counted_bytes(cb * e) for e in layer.trainable_weight_elements)
        if i in twins:
            private[i], private_fixed[i] = [], 0  # its twin's forward made them
        for t in set(keep):
            if producer[t] != -1:  # model inputs are live all step anyway
                keepers[t] += 1
                kept_ids[i].append(t)

    half_forward, half_backward = _half_kernel_scratch(profile, config, has_weights, requires_grad, backward)

    keepers_at_start = list(keepers)
    run_order = _executor_order(layers, producer, onednn=config.device is not Device.GPU, twin_of=twins)
    pos = [0] * len(layers)
    for k, i in enumerate(run_order):
        pos[i] = k
    last_forward_use = [-1] * n_tensors
    for i in run_order:
        if i in twins:
            continue  # merged into its twin: it does not run
        at = pos[fused_convs[i]] if i in fused_convs else pos[i]  # a fused conv runs at its Add
        for t in layers[i].input_ids:
            last_forward_use[alias[t]] = max(last_forward_use[alias[t]], at)
    outputs = {alias[t] for t in profile.output_ids}

    ledger = _Ledger(record, below)
    all_weights, trainable_elements = _variable_elements(profile, trained)
    if not partly_frozen(profile, config):
        # Full training: each at its size plus the fitted FRAGMENTATION (a fit of the
        # whole walk; counting the simulated chunks here instead was worse on the 223 CPU
        # full-training cases: median 2.38 -> 2.56 %, more than 5 % low 14 -> 21).
        ledger.fixed[W] = sum(counted_bytes(FLOAT32 * e) for e in all_weights)
        slots = slots_per_variable(config.optimizer, config.optimizer_options, config.gradient_accumulation_steps)
        ledger.fixed[OPT] = slots * sum(counted_bytes(FLOAT32 * e) for e in trainable_elements)
        if config.gradient_accumulation_steps > 1:
            ledger.fixed[OPT] += sum(counted_bytes(FLOAT32 * e) for e in _accumulator_reset_elements(profile, trained))
    else:
        # Part of the model in inference: the peak is a few feature maps beside the
        # variables, and the variables and slots count as the simulated pool places them
        # (_resident_chunks) rather than at +8 % each, which had made the walk, not the
        # allocator simulation, the estimate of weight-heavy frozen steps (EfficientNetV2L
        # 160 px b24 frozen: weights at +8 % 476 MiB, measured resident 457, exact 451).
        ledger.fixed[W], ledger.fixed[OPT] = _resident_chunks(profile, _without_batch(config))
    waits_for_all = waits_for_all_gradients(config)
    early = early_temporaries_per_variable(config)
    early_bytes = [
        _alive_share(early * sum(counted_bytes(FLOAT32 * e) for e in l.trainable_weight_elements)) if has_weights[i] else 0
        for i, l in enumerate(layers)
    ]
    ledger.fixed[OTHER] += sum(early_bytes)
    # Under mixed precision each layer casts its float32 kernel to the compute dtype.
    # The cast reads only the variable, so the executor runs it at the start of the
    # step; in inference the copy lives until its layer has run (in training the
    # backward keeps it: private_fixed). Measured: ResNet50 224 px b16 frozen, adam,
    # mixed_float16 / mixed_bfloat16 303.0 / 309.4 MiB, 50-56 MiB above the walk
    # without the copies (its 16-bit kernels: 45 MiB); MobileNetV2 and EfficientNetB0
    # (4-8 MiB of kernels) were within 3 % without them (docs/MEASUREMENTS.md).
    kernel_casts = [
        sum(counted_bytes(cb * e) for e in layer.trainable_weight_elements)
        if inference[i] and not backward[i] and precision.is_mixed and not layer.float32_compute
        and rule_for(layer.layer_type, layer.activation)[0].input_for_weights_only else 0
        for i, layer in enumerate(layers)
    ]
    for size in kernel_casts:
        if size:
            ledger.add_fixed(ACT, size)
    for t in profile.input_ids:
        ledger.add(INPUT, nbytes[t])
    ledger.add(INPUT, LABEL_BYTES * profile.label_elements)

    live = [False] * n_tensors

    def release(t):
        """Frees an activation if it is still allocated."""
        if live[t]:
            ledger.remove(ACT, nbytes[t], key=("act", t))
            live[t] = False

    def free_dead(i, tensors):
        for t in tensors:
            if last_forward_use[t] <= i and keepers[t] == 0 and t not in outputs:
                release(t)

    for i in run_order:
        layer = layers[i]
        if i in fused_convs:
            continue  # runs inside the Add it is fused into (_cpu_fusions)
        rule, _, _ = rule_for(layer.layer_type, layer.activation)
        frozen_op = frozen[i]
        staged = 0
        if frozen_op and len(layer.input_ids) == 1:
            staged, stage = _first_stage(layer, precision, nbytes[alias[layer.input_ids[0]]],
                                         profile.tensor_elements[layer.input_ids[0]])
        if staged:
            # The layer's first step makes an intermediate tensor from the input, which
            # then dies (if this was its last reader) before the output is allocated.
            ledger.add(ACT, staged)
            ledger.snapshot(f"forward {layer.name} ({stage})")
            free_dead(pos[i], {alias[layer.input_ids[0]]})
        if frozen_op and precision.is_mixed and not layer.float32_compute:
            # Keras casts a float32 model input to the compute dtype for the layer.
            cast_inputs = [cb * profile.tensor_elements[t] for t in layer.input_ids if producer[alias[t]] == -1]
        else:
            cast_inputs = []
        conv, addend = fused_adds.get(i, (-1, -1))
        # An elementwise chain in inference (swish, hard_swish, GELU) makes its one temporary
        # first and leaves the result there; the input dies after it (traced: EfficientNetB0
        # and MobileNetV3Large frozen, `stem_activation/mul_1`, `activation/add` allocate, the
        # conv output is freed). Same bytes as writing in place beside a temporary, but the
        # surviving buffer is the new one, which decides where later tensors land. On the
        # 387 CPU cases it moved 18 frozen or last-N steps, |error| summed 96.6 -> 78.1 %
        # (ConvNeXtTiny 224 px b64 +11.5 -> +2.5 %, EfficientNetB5 224 px b4 -1.7 -> +7.9 %).
        # The CPU only: no GPU trace shows which buffer survives there.
        scratch_share = _inference_scratch(layer, staged) if frozen_op else rule.forward_scratch
        new_buffer = (frozen_op and not staged and scratch_share >= 1.0 and layer.layer_type in _ELEMENTWISE
                      and config.device is not Device.GPU)
        if conv != -1:
            # The biased conv fused into this Add writes into the addend's buffer when
            # nothing else reads it, else into a new one; its own output is never made.
            source, target = alias[addend], layer.output_ids[0]
            if (alias[target] == target and producer[source] != -1 and last_forward_use[source] == pos[i]
                    and keepers[source] == 0 and source not in outputs and nbytes[source] == nbytes[target]):
                live[source], live[target] = False, True
                ledger.rekey(("act", source), ("act", target))
            else:
                ledger.add(ACT, nbytes[target], key=("act", target))
                live[target] = True
        elif (not new_buffer) and _writes_in_place(layer, inference[i], precision, alias, producer,
                                                   last_forward_use, keepers, nbytes, outputs, pos[i], frozen_op):
            # An elementwise op whose input dies here writes into the input's buffer
            # (TensorFlow forwards an input buffer with no other reader to the output).
            source, target = alias[layer.input_ids[0]], layer.output_ids[0]
            live[source], live[target] = False, True
            ledger.rekey(("act", source), ("act", target))
        else:
            for t in layer.output_ids:
                if alias[t] == t:
                    ledger.add(ACT, nbytes[t], key=("act", t))
                    live[t] = True
        for size in (*private[i], *private_to_end[i]):
            ledger.add(ACT, size)
        ledger.fixed[ACT] += private_fixed[i]
        if new_buffer:
            scratch_share -= 1.0  # the temporary is the output
        scratch = tuple(int(scratch_share * nbytes[t]) for t in layer.output_ids) + tuple(cast_inputs)
        ledger.snapshot(f"forward {layer.name}", extra_fixed=half_forward[i][0],
                        extra_per_sample=scratch + half_forward[i][1])
        if staged:
            ledger.remove(ACT, staged)
        if kernel_casts[i]:
            ledger.add_fixed(ACT, -kernel_casts[i])
        fused_inputs = layers[conv].input_ids if conv != -1 else ()
        if conv != -1 and kernel_casts[conv]:
            ledger.add_fixed(ACT, -kernel_casts[conv])
        free_dead(pos[i], {alias[x] for x in (*layer.input_ids, *fused_inputs, *layer.output_ids)})

    # The loss reads the predictions: Keras computes it in float32 (the loss's dtype), so a
    # 16-bit prediction is cast first, then clipped (two ops) and its log taken, each a
    # float32 tensor of the predictions' size. Traced under mixed_float16 on a per-pixel
    # softmax (tests/test_keras_adapter.py's own file, [16, 64, 64, 3]): Cast, Minimum,
    # clip_by_value and Log, 0.75 MiB each, at the step's peak. Per label, the sparse
    # cross-entropy makes a float32 loss and a temporary and casts the labels to int64
    # (0.25 + 0.25 + 0.5 MiB there, one label per pixel).
    loss_temporaries = []
    for t in outputs:
        as_float32 = FLOAT32 * profile.tensor_elements[t]
        casts = 0 if nbytes[t] == as_float32 else 1
        loss_temporaries += [as_float32] * (3 + casts)
    loss_temporaries.append((2 * FLOAT32 + LABEL_BYTES) * profile.label_elements)
    ledger.snapshot("loss", extra_per_sample=tuple(loss_temporaries))
    ledger.forward = False
    grad_live = [False] * n_tensors
    held = [False] * n_tensors  # gradient buffers kept until the step ends (_GRADIENT_HELD_TO_END)

    def held_to_the_end(layer: LayerStats, t: int) -> bool:
        """Whether the input gradient ``t`` that ``layer``'s backward makes stays until the step ends."""
        i = producer[t]
        while i != -1 and layers[i].layer_type in _ELEMENTWISE and len(layers[i].input_ids) == 1:
            i = producer[alias[layers[i].input_ids[0]]]
        if i == -1 or not backward[i] or len(layers[i].trainable_weight_elements) < 2:
            return False  # a model input, a frozen layer, or no bias below
        below = layers[i]
        if layer.layer_type in _GRADIENT_HELD_TO_END:
            return below.layer_type in _BIAS_REDUCING
        return (layer.layer_type not in _NORMALIZATIONS and below.layer_type in _SEQUENCE_BIAS
                and len(below.output_shapes[0]) == 2)

    for t in outputs:
        grad_live[t] = True
        ledger.add(TRANS, nbytes[t])
        if keepers[t] == 0:
            release(t)

    # (gradient bytes, largest variable, early temporaries, layer); recorded events mark each
    # layer's update with ("u", layer index), which ``replay`` passes over and
    # benchmarks/warmup_sim.py uses to make the first step's slot buffers there.
    # An Embedding's gradient is tf.IndexedSlices: its values are the output's gradient, one
    # row per looked-up token (float32, the table's dtype), not a table-sized tensor. Keras'
    # optimizers densify it where an op mixes it with a slot (UnsortedSegmentSum, table-sized,
    # in the update's scratch) and run element-wise ops on the values (Adam's square, SGD's
    # lr * g: one values-sized temporary more). Traced: text_cnn b64 adam peaks at the
    # table's update with adam/Square (15.6 MiB, the values) and UnsortedSegmentSum_1.
    sparse_values = [FLOAT32 * sum(profile.tensor_elements[t] for t in layer.output_ids)
                     if layer.layer_type == "Embedding" else 0 for layer in layers]
    pending_updates: list[tuple[int, int, int, int]] = []
    per_update = update_scratch_per_variable(config)
    # Plain SGD scatters lr * values into the table and never densifies.
    densifies = config.optimizer is not Optimizer.SGD or config.optimizer_options.momentum
    lag = len(layers) if waits_for_all else GRADIENT_LAG

    def largest_of(layer):
        return max((counted_bytes(FLOAT32 * e) for e in layer.trainable_weight_elements), default=0)

    # A Concatenate of sequences: TensorFlow slices each input's gradient out of the
    # output's when that input's producer needs it (traced: unet1d's skip connections'
    # slices were made at the step's end), so the output's gradient lives until the
    # earliest producer's backward starts. Here each slice is counted from the
    # Concatenate's backward on, as before, and the output's gradient until then.
    lazy_release: dict[int, list[int]] = {}
    for i in range(len(layers) - 1, -1, -1):
        for t in lazy_release.pop(i, ()):
            ledger.remove(TRANS, nbytes[t])
        if not backward[i]:
            continue
        layer = layers[i]
        rule, act, _ = rule_for(layer.layer_type, layer.activation)
        if precision.is_mixed and rule.upcasts:
            in_bytes = [FLOAT32 * profile.tensor_elements[t] for t in layer.input_ids]
        else:
            in_bytes = [nbytes[alias[t]] for t in layer.input_ids]
        out_bytes = [nbytes[t] for t in layer.output_ids]
        extra = [x for b in in_bytes for x in _tensors(rule.backward_scratch, b)]
        extra += [x for b in out_bytes for x in _tensors(act.backward_scratch, b)]
        if has_weights[i] and rule.input_for_weights_only:
            # The weight gradient runs first (the one inter-op thread runs the last-made
            # ready op inline: Conv2DBackpropFilter before Conv2DBackpropInput); an input
            # kept for it alone is freed before the input's gradient is made.
            inputs = {alias[x] for x in layer.input_ids}
            for t in kept_ids[i]:
                if t in inputs and keepers[t] == 1 and requires_grad[t]:
                    release(t)
        in_place = (layer.layer_type in _GRADIENT_IN_PLACE and not has_weights[i] and len(layer.input_ids) == 1
                    and len(layer.output_ids) == 1 and (layer.layer_type != "Activation"
                                                         or layer.activation in _GRADIENT_IN_PLACE_ACTIVATIONS))
        if in_place:
            source, target = alias[layer.input_ids[0]], alias[layer.output_ids[0]]
            in_place = (requires_grad[source] and not grad_live[source] and grad_live[target]
                        and source != target and nbytes[source] == nbytes[target])
        if in_place:
            # An element-wise gradient (ReluGrad, LeakyReluGrad, ...) writes into the
            # buffer of the output's gradient, which nothing else reads (TensorFlow's
            # BinaryElementWiseOp forwards an input buffer). Traced: dcgan_discriminator
            # b64 adam, no allocation for LeakyReluGrad.
            grad_live[target], grad_live[source] = False, True
            held[source], held[target] = held[target], False
        for t in {alias[x] for x in layer.input_ids}:
            if not requires_grad[t] or in_place:
                continue
            if grad_live[t]:
                extra.append(nbytes[t])  # a second contribution, added into the first
            else:
                grad_live[t] = True
                held[t] = held_to_the_end(layer, t)
                ledger.add(TRANS, nbytes[t])
        if _padded_conv1d(layer)[1]:
            # A dilated Conv1D's backward makes a space-to-batch copy of the incoming
            # gradient, which stays until the step ends (_padded_conv1d).
            ledger.add(TRANS, sum(nbytes[alias[t]] for t in layer.output_ids))
        if has_weights[i]:
            if sparse_values[i]:
                grad_bytes = 0
                ledger.add(G, sparse_values[i])
            else:
                grad_bytes = sum(counted_bytes(FLOAT32 * e) for e in layer.trainable_weight_elements)
                ledger.fixed[G] += grad_bytes
            pending_updates.append((grad_bytes, largest_of(layer), early_bytes[i], i))
        scratch_now = 0
        while len(pending_updates) > lag:
            grad_bytes, biggest, early_now, updated = pending_updates.pop(0)
            if ledger.events is not None:
                ledger.events.append(("u", updated))
            ledger.fixed[G] -= grad_bytes
            ledger.fixed[OTHER] -= early_now  # consumed by the update (its scratch counts them)
            scratch_now = max(scratch_now, (per_update if densifies or not sparse_values[updated] else 0) * biggest)
            if sparse_values[updated]:
                ledger.remove(G, sparse_values[updated])
                extra.append(sparse_values[updated])
        if has_weights[i]:
            scratch_now += _grouped_depthwise_scratch(layer, profile, config.device)
        scratch_now += half_backward[i][0]
        extra += half_backward[i][1]
        ledger.snapshot(f"backward {layer.name}", extra_fixed=scratch_now, extra_per_sample=tuple(extra))
        for t in {alias[x] for x in layer.output_ids}:
            if grad_live[t]:
                grad_live[t] = False
                if held[t]:
                    continue
                if layer.layer_type == "Concatenate" and len(layer.output_shapes[0]) == 2:
                    earliest = min((producer[alias[x]] for x in layer.input_ids if producer[alias[x]] != -1),
                                   default=-1)
                    if 0 <= earliest < i - 1:
                        lazy_release.setdefault(earliest, []).append(t)
                        continue
                ledger.remove(TRANS, nbytes[t])
        for t in kept_ids[i]:
            keepers[t] -= 1
            if keepers[t] == 0:
                release(t)
        for size in private[i]:
            ledger.remove(ACT, size)
        ledger.fixed[ACT] -= private_fixed[i]

    largest = max((b for _, b, _, i in pending_updates if not sparse_values[i]), default=0)
    largest_sparse = max((b for _, b, _, i in pending_updates if sparse_values[i]), default=0)
    sparse_now = tuple(sparse_values[i] for *_, i in pending_updates if sparse_values[i])[:1]
    # The early temporaries of the variables still pending are in the ledger already, and
    # so is each pending gradient (under gradients): the update's scratch, which counts its
    # gradient, adds only the rest. Under mixed_float16 the update reads the unscaled copy
    # of every gradient that the loss scale's cond makes, a buffer beyond the pending one.
    # (Counted twice, an MLP whose first kernel dominates was +45 %: mlp.keras b64 sgd.)
    scratch_fixed = max(0, per_update - early - (0 if waits_for_all else 1)) * largest
    # A sparse gradient's dense form is made by the update itself: not counted yet.
    scratch_fixed = max(scratch_fixed, max(0, per_update - early) * largest_sparse if densifies else 0)
    if waits_for_all:
        # mixed_float16: every update starts together inside the loss scale's cond, and
        # the peak holds temporaries of many variables at once (calc.optimizers.
        # BRANCH_TEMPORARIES); the larger of that and one update's scratch is counted.
        together = _granules(branch_temporaries(config.optimizer, config.optimizer_options)
                             * sum(b for b, _, _, _ in pending_updates))
        ledger.add_fixed(OTHER, together)
        scratch_fixed = max(0, scratch_fixed - together)
    if ledger.events is not None:
        ledger.events.extend(("u", i) for *_, i in pending_updates)
    ledger.snapshot(UPDATE_PHASE, extra_fixed=scratch_fixed, extra_per_sample=sparse_now)
    kept = [sum(private[i]) + sum(private_to_end[i]) for i in range(len(layers))]
    for t in range(n_tensors):
        if keepers_at_start[t] and producer[t] != -1:
            kept[producer[t]] += nbytes[t]
    plan = StepPlan(_prune(ledger.moments), tuple(sorted(unknown)), tuple(kept))
    return ledger.moments, plan, ledger.events or []


# Batch sizes at which moments are compared to find the ones that can be the peak.
_PROBE_BATCHES = tuple(sorted({*range(1, 129), *(int(1.08 ** k) for k in range(60, 300))}))


def _counted_array(nbytes, below: int = UNTRACKED_BELOW):
    """``counted_bytes`` over a numpy array of request sizes."""
    import numpy as np

    rounded = -(-nbytes // ALLOCATION_GRANULE) * ALLOCATION_GRANULE
    frag = (rounded * FRAGMENTATION).astype(np.int64) // ALLOCATION_GRANULE * ALLOCATION_GRANULE
    out = np.where(rounded >= SPLIT_ALWAYS_ABOVE, rounded, rounded + frag)
    return np.where(nbytes < below, 0, out)


def _totals(moments, batches):
    """Peak candidates' totals, one row per moment, one column per batch size."""
    import numpy as np

    sizes = sorted({size for m in moments for hist in m.per_sample for size, _ in hist})
    index = {size: i for i, size in enumerate(sizes)}
    counts = np.zeros((len(moments), max(1, len(sizes))), dtype=np.int64)
    for row, m in enumerate(moments):
        for hist in m.per_sample:
            for size, n in hist:
                counts[row, index[size]] += n
    fixed = np.array([sum(m.fixed) for m in moments], dtype=np.int64)
    b = np.asarray(list(batches), dtype=np.int64)
    if not sizes:
        return np.repeat(fixed[:, None], len(b), axis=1)
    per_size = _counted_array(np.asarray(sizes, dtype=np.int64)[:, None] * b[None, :], moments[0].below)
    return fixed[:, None] + counts @ per_size


def _prune(moments: list[Moment]) -> tuple[Moment, ...]:
    """Keeps the moments within 1 % of the largest at some probed batch size."""
    totals = _totals(moments, _PROBE_BATCHES)
    keep = (totals >= 0.99 * totals.max(axis=0)).any(axis=1)
    return tuple(m for m, k in zip(moments, keep) if k)


def plan_step(profile: ModelProfile, config: TrainingConfig) -> StepPlan:
    """Walks one training step for a profile and a config (the batch size is ignored).

    Cached: moving the batch size reuses the plan.
    """
    return _plan(profile, _without_batch(config))


@lru_cache(maxsize=256)
def _plan(profile: ModelProfile, config: TrainingConfig) -> StepPlan:
    return _simulate(profile, config)[1]  # keyed without the batch, so every batch size hits


def step_timeline(profile: ModelProfile, config: TrainingConfig) -> list[tuple[str, int]]:
    """Live bytes at every moment of the step (forward, loss, backward, update)."""
    batch = config.per_replica_batch
    return [(m.phase, m.total(batch)) for m in _simulate(profile, _without_batch(config))[0]]


def _without_batch(config: TrainingConfig) -> TrainingConfig:
    """The config with its batch set aside, so that every batch size shares one plan."""
    return replace(config, batch_size=config.num_gpus)


def estimate_memory(profile: ModelProfile, config: TrainingConfig) -> MemoryBreakdown:
    """Predicts the allocator peak of one training step on one device.

    Args:
        profile: the model's ledger (``calc.keras_adapter.profile_model``).
        config: batch size (global; split over ``num_gpus``), optimizer, precision...

    Returns:
        A ``MemoryBreakdown`` whose components sum to ``peak_bytes``.
    """
    plan = plan_step(profile, config)
    batch = config.per_replica_batch
    m = plan.peak_moment(batch)
    parts = m.components(batch)
    walk = sum(parts)
    floored = _floored(profile, _without_batch(config), batch, walk)
    return MemoryBreakdown(*parts, peak_phase=m.phase, allocator_bytes=floored - walk)


def _floored(profile: ModelProfile, config: TrainingConfig, batch: int, walk: int) -> int:
    """The walk's peak at this batch, raised to the simulated allocator's where that is more.

    The walk counts each tensor at its size plus the fitted ``FRAGMENTATION``; the
    simulation (``calc.allocator.BFC`` over the walk's own requests) hands out whole
    chunks, and how many depends on the pool's layout before the step, which the engine
    knows only as modelled histories (``_history_peak``: the variables with their kernels
    drawn, or made from one value each; ``_fresh_peak``: the step in new regions past
    them).

    - With part of the model in inference (frozen backbone, last N layers), the larger of
      the two histories: a frozen forward pass frees each feature map soon after making
      it, so the peak is a few large tensors in whole chunks (docs/BFC_SIM.md: the walk
      alone missed frozen MobileNetV2 / DenseNet121 by up to -32 %).
    - In full training, only what every history agrees on: the smallest of the three.
      The smaller of the two histories alone (stop 15's floor) cut the in-sample
      under-predictions but raised steps whose peak sits in the resident pool's holes
      (MobileNet 128 px b1 Adadelta +8.6 -> +19.4 %) and made the thirteenth holdout worse
      (max 5.5 -> 11.2 %). The smallest of three, on the 181 CPU full-training cases:
      median |error| 2.38 % (the walk's), more than 5 % low 13 -> 9, beyond 10 % 6 -> 5;
      full training in holdouts 13-15: median 1.7 %, max 6.3 %, none more than 5 % low
      (the walk: one); own models' full training: median 8.0 -> 7.4 %, more than 5 % low
      19 -> 15 (docs/MEASUREMENTS.md, stop 17; ``python benchmarks/full_training_floors.py``).
      Each further history is replayed only when the ones before are above the walk.
    """
    if partly_frozen(profile, config):
        return max(walk, _allocator_peak(profile, config, batch))
    first = _history_peak(profile, config, batch, True)
    if first <= walk:
        return walk
    fresh = _fresh_peak(profile, config, batch)
    if fresh <= walk:
        return walk
    return max(walk, min(first, fresh, _history_peak(profile, config, batch, False)))


@lru_cache(maxsize=64)
def _allocator_events(profile: ModelProfile, config: TrainingConfig) -> tuple[tuple, ...]:
    return tuple(_simulate(profile, config, record=True)[2])


def _variable_elements(profile: ModelProfile, trained: list[bool]) -> tuple[list[int], list[int]]:
    """Elements of every variable, and of the trained ones (which get optimizer slots)."""
    every = [e for l in profile.layers for e in (*l.trainable_weight_elements, *l.non_trainable_weight_elements)]
    trainable = [e for t, l in zip(trained, profile.layers) if t and l.trainable_params > 0
                 for e in l.trainable_weight_elements]
    return every, trainable


def _randomly_initialized(profile: ModelProfile) -> tuple[bool, ...]:
    """Per variable, in ``_variable_elements`` order: made by a random initializer.

    The kernels of layers that multiply by a weight (Conv, Dense, depthwise and
    separable kernels); not a trailing bias (as long as the output channels), nor
    normalization scales and statistics, which start as ones and zeros.
    """
    flags: list[bool] = []
    for layer in profile.layers:
        kernels = rule_for(layer.layer_type, layer.activation)[0].input_for_weights_only
        weights = layer.trainable_weight_elements
        last = _output_channels(layer)
        for j, e in enumerate(weights):
            bias = j == len(weights) - 1 and len(weights) > 1 and e == last
            flags.append(kernels and not bias)
        flags.extend(False for _ in layer.non_trainable_weight_elements)
    return tuple(flags)


def _resident_requests(profile: ModelProfile, config: TrainingConfig) -> list[int]:
    """Bytes of each variable, then of each optimizer slot, in the order Keras makes them."""
    trained = _trainable_flags(profile, config)[0]
    every, trainable = _variable_elements(profile, trained)
    slots = slots_per_variable(config.optimizer, config.optimizer_options, config.gradient_accumulation_steps)
    resets = _accumulator_reset_elements(profile, trained) if config.gradient_accumulation_steps > 1 else []
    return [FLOAT32 * e for e in (*every, *(e for e in trainable for _ in range(slots)), *resets)]


def allocator_peak(profile: ModelProfile, config: TrainingConfig) -> int:
    """The peak a simulated BFC allocator reports for one measured step at this batch.

    Replays the measurement protocol (calc.measure): the variables and optimizer slots,
    a reset of the peak, then the step, every request placed by
    ``calc.allocator.BFC``. The events come from the walk itself (one walk per config,
    cached); only their sizes scale with the batch. 0.3-2 ms per batch for catalogue
    models (benchmarks/bench_engine.py), cached per batch.
    """
    return _allocator_peak(profile, _without_batch(config), config.per_replica_batch)


def _resident_pool(profile: ModelProfile, config: TrainingConfig, drawn_kernels: bool = True,
                   kept: list | None = None, requests: list[int] | None = None) -> BFC:
    """The simulated pool once the variables and optimizer slots exist.

    ``drawn_kernels``: as measured for one layer (``benchmarks/probe_init.py``, a 64 MiB
    Dense kernel peaks the pool at 192 MiB with glorot_uniform or he_normal, 64 with
    zeros), a kernel's random initializer makes two tensors of its size (the draw and its
    scaled copy), the variable copies the result, then both are freed; zeros and ones
    (biases, normalization, optimizer slots) become the variable without a copy.
    Otherwise every variable and slot is made from one value of its size, freed once the
    variable holds its copy (the engine's history until stop 8). ``kept`` collects
    ``(index in _resident_requests, chunk)`` of what stays (benchmarks/bfc_sim.py moves slots).
    ``requests``: other sizes than ``_resident_requests``, the variables first in its order
    (the studies in benchmarks/ replay the slots their own way).
    """
    bfc = BFC()
    random = _randomly_initialized(profile) if drawn_kernels else ()
    below = untracked_below(config.device)
    for k, nbytes in enumerate(_resident_requests(profile, config) if requests is None else requests):
        if nbytes < below:
            continue
        if not drawn_kernels:
            value = bfc.alloc(nbytes)
            chunk = bfc.alloc(nbytes)
            bfc.free(value)
        elif k < len(random) and random[k]:
            draw, scaled = bfc.alloc(nbytes), bfc.alloc(nbytes)
            chunk = bfc.alloc(nbytes)
            bfc.free(draw)
            bfc.free(scaled)
        else:
            chunk = bfc.alloc(nbytes)
        if kept is not None:
            kept.append((k, chunk))
    return bfc


@lru_cache(maxsize=256)
def _resident_built(profile: ModelProfile, config: TrainingConfig, drawn_kernels: bool) -> tuple[tuple, int, int]:
    """``_resident_pool`` once per configuration and history: its snapshot, and the bytes
    the variables, then the optimizer's slots, hold in its chunks."""
    kept: list = []
    snapshot = _resident_pool(profile, config, drawn_kernels, kept=kept).snapshot()
    n_variables = len(_variable_elements(profile, _trainable_flags(profile, config)[0])[0])
    weights = sum(chunk.size for k, chunk in kept if k < n_variables)
    return snapshot, weights, sum(chunk.size for _, chunk in kept) - weights


def _resident_state(profile: ModelProfile, config: TrainingConfig, drawn_kernels: bool) -> tuple:
    """``_resident_pool`` as a snapshot, made once per configuration (every batch shares it)."""
    return _resident_built(profile, config, drawn_kernels)[0]


def _allocator_peak(profile: ModelProfile, config: TrainingConfig, batch: int) -> int:
    """The larger of the two histories' simulated peaks (``_allocator_peaks``)."""
    return max(_allocator_peaks(profile, config, batch))


def _allocator_peaks(profile: ModelProfile, config: TrainingConfig, batch: int) -> tuple[int, int]:
    """The simulated peaks after the two histories: drawn kernels, then one value per variable."""
    return _history_peak(profile, config, batch, True), _history_peak(profile, config, batch, False)


@lru_cache(maxsize=16384)
def _history_peak(profile: ModelProfile, config: TrainingConfig, batch: int, drawn: bool) -> int:
    # The real pool's layout before the step also depends on what the build, the compile
    # and the first step allocate beside the variables, which the walk does not know, and
    # the step's peak is sensitive to it (docs/MEASUREMENTS.md, stop 8: Xception 299 px
    # frozen moves by 140 MiB with the head's optimizer). So the step is replayed after
    # two histories, the measured per-variable pattern and the one-value-per-variable
    # one (``_floored`` takes the larger for frozen steps, the smaller in full training).
    # On the 99 frozen points, the larger: median |error| 4.2 %, 8 points more than 5 %
    # low and 2 more than 10 % low (each history alone: 4.0 / 3.2 % median, 12 / 11 more
    # than 5 % low, 5 / 6 more than 10 % low).
    events = _allocator_events(profile, config)
    bfc = BFC.restored(_resident_state(profile, config, drawn))
    # The protocol's warm-up step leaves regions the measured step reuses. Replaying
    # the walk's own step first gave the same peaks on the 41 measured frozen points,
    # at twice the cost, so the step is replayed once; the real warm-up differs from
    # later steps by copying the optimizer's slots among its tensors, which sets the
    # real layout (docs/BFC_SIM.md, stop 9) and is not modelled yet.
    bfc.reset_peak()
    replay(bfc, events, batch, below=untracked_below(config.device))
    return bfc.peak


@lru_cache(maxsize=8192)
def _fresh_peak(profile: ModelProfile, config: TrainingConfig, batch: int) -> int:
    """The step replayed alone in new regions, plus the variables and slots as the walk counts them.

    The regions start at the size the drawn history's pool would grow by next; the
    holes the variables' making leaves in the pool are ignored (where a step's small
    tensors land in them is what the two histories disagree on).
    """
    bfc = BFC(initial_region=_resident_state(profile, config, True)[0])
    replay(bfc, _allocator_events(profile, config), batch, below=untracked_below(config.device))
    return _resident_counted(profile, config) + bfc.peak


@lru_cache(maxsize=128)
def _resident_counted(profile: ModelProfile, config: TrainingConfig) -> int:
    below = untracked_below(config.device)
    return sum(counted_bytes(n, below) for n in _resident_requests(profile, config))


def _resident_chunks(profile: ModelProfile, config: TrainingConfig) -> tuple[int, int]:
    """Bytes the variables, then the optimizer's slots, hold in the simulated pool's chunks.

    ``_resident_pool`` with the kernels drawn (the measured pattern), the pool the drawn
    history replays the step in: each variable and slot in the chunk the simulated
    allocator hands it, which is its size rounded to 256 bytes unless a hole left by an
    earlier draw is handed out whole.
    """
    return _resident_built(profile, config, True)[1:]


def replay(pool, events, batch: int, live: dict | None = None, below: int = UNTRACKED_BELOW) -> dict:
    """Places one step's allocation events, at this batch, in ``pool`` (its ``alloc`` / ``free``).

    Requests the allocator's statistics do not count (under ``below``: 256 KiB on the
    CPU, ``untracked_below``) are left out. On a GPU, where they count, those under 256
    KiB are added to the pool's bytes in use at their rounded size without being placed:
    they fill the small bins, not the regions the large tensors compete for; placing
    each one gave the same validation figures and a dashboard curve up to a quarter
    slower (EfficientNetB0 224 px: 0.51 s against 0.41).
    Returns the handles still allocated, by event id (a small request's: its size); pass
    them as ``live`` to go on with the rest of a step replayed in parts.
    """
    live = {} if live is None else live
    for ev in events:
        kind = ev[0]
        if kind == "a":
            nbytes = ev[2] * batch + ev[3]
            if nbytes >= UNTRACKED_BELOW:
                live[ev[1]] = pool.alloc(nbytes)
            elif nbytes >= below and nbytes > 0:
                live[ev[1]] = size = _raw_bytes(nbytes, below)
                pool.count(size)
        elif kind == "f":
            handle = live.pop(ev[1], None)
            if isinstance(handle, int):
                pool.count(-handle)
            elif handle is not None:
                pool.free(handle)
    return live


def memory_curve(profile: ModelProfile, config: TrainingConfig, batch_sizes: range | list[int]) -> list[int]:
    """Predicted peak bytes for each global batch size (one plan, evaluated per batch)."""
    plan = plan_step(profile, config)
    gpus = config.num_gpus
    per_device = [max(1, b // gpus) for b in batch_sizes]
    if not per_device:
        return []
    linear = [int(v) for v in _totals(plan.moments, per_device).max(axis=0)]
    base = _without_batch(config)
    return [_floored(profile, base, b, v) for v, b in zip(linear, per_device)]


def max_batch_size(
    profile: ModelProfile,
    config: TrainingConfig,
    budget_bytes: int,
    *,
    overhead_bytes: int = 0,
    safety_margin: float = 0.0,
    limit: int = 1 << 20,
) -> int:
    """The largest global batch whose peak plus overhead fits ``budget * (1 - margin)``.

    Returns 0 when not even one sample per device fits; at most ``limit`` per
    device. Batches are multiples of ``num_gpus``. Peaks grow with the batch, so a
    doubling search then a bisection finds the edge. The simulated allocator
    (``_floored``) can make the peak dip between neighbouring batches; the search
    returns a batch that fits, and may miss a larger one past a jump.
    """
    if not 0.0 <= safety_margin < 1.0:
        raise ValueError(f"safety_margin must be in [0, 1). Received: safety_margin={safety_margin}")
    usable = int(budget_bytes * (1.0 - safety_margin)) - overhead_bytes
    plan = plan_step(profile, config)

    base = _without_batch(config)

    def fits(per_device: int) -> bool:
        walk = max(m.total(per_device) for m in plan.moments)
        return walk <= usable and _floored(profile, base, per_device, walk) <= usable

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo * config.num_gpus


@dataclass(frozen=True)
class GpuFit:
    """One configuration against one card: the verdict and the largest batch."""

    breakdown: MemoryBreakdown
    needed_bytes: int  # predicted peak + framework overhead
    usable_bytes: int  # card memory x (1 - safety margin)
    max_batch: int

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.usable_bytes


def fit_on_gpu(
    profile: ModelProfile,
    config: TrainingConfig,
    memory_bytes: int,
    *,
    overhead_bytes: int = 0,
    safety_margin: float = 0.0,
    limit: int = 1 << 20,
) -> GpuFit:
    """Whether ``config`` fits a card of ``memory_bytes``, and the largest batch that does."""
    breakdown = estimate_memory(profile, config)
    best = max_batch_size(profile, config, memory_bytes, overhead_bytes=overhead_bytes,
                          safety_margin=safety_margin, limit=limit)
    return GpuFit(breakdown, breakdown.peak_bytes + overhead_bytes, int(memory_bytes * (1.0 - safety_margin)), best)
