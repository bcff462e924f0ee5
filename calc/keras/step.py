"""The training step as measured: the model compiled as ``config`` trains it, one step run
on TensorFlow with its allocator's peak read, and the allocator's timeline of that step.

``compiled_training_model`` and ``batch_shapes`` serve the XLA plan too (``calc.keras.plan``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from calc.catalogue import ModelFile, ModelSpec
from calc.keras.build import build_model
from calc.keras.profile import walk_model
from calc.types import Device, Optimizer, TrainingConfig, TrainMode

_OPTIMIZER_CLASSES = {
    Optimizer.SGD: "SGD", Optimizer.ADAM: "Adam", Optimizer.ADAMW: "AdamW", Optimizer.NADAM: "Nadam",
    Optimizer.ADAMAX: "Adamax", Optimizer.RMSPROP: "RMSprop", Optimizer.ADAGRAD: "Adagrad",
    Optimizer.ADADELTA: "Adadelta", Optimizer.FTRL: "Ftrl", Optimizer.LION: "Lion", Optimizer.LAMB: "Lamb",
    Optimizer.ADAFACTOR: "Adafactor",
}


def keras_optimizer(config: TrainingConfig) -> Any:
    """The Keras optimizer ``config`` names, with its options."""
    import keras

    opts = config.optimizer_options
    kwargs: dict[str, Any] = {}
    name = config.optimizer.value
    if opts.momentum and name in ("sgd", "rmsprop"):
        kwargs["momentum"] = 0.9
    if opts.amsgrad and name in ("adam", "adamw"):
        kwargs["amsgrad"] = True
    if opts.centered and name == "rmsprop":
        kwargs["centered"] = True
    if opts.use_ema:
        kwargs["use_ema"] = True
    if config.gradient_accumulation_steps > 1:
        kwargs["gradient_accumulation_steps"] = config.gradient_accumulation_steps
    return getattr(keras.optimizers, _OPTIMIZER_CLASSES[config.optimizer])(**kwargs)


def compiled_training_model(spec: ModelSpec | ModelFile, config: TrainingConfig, *, jit_compile: bool | str = False,
                            remat: str | None = None) -> Any:
    """The model as ``measure`` and the XLA plan train it: built, trainable as ``config`` says, compiled.

    ``remat``: a ``keras.RematScope`` mode the layers are created under (it is read when a
    layer is created, not when it is called).
    """
    import keras

    scope = keras.RematScope(mode=remat) if remat else nullcontext()
    with scope:
        model, backbone = build_model(spec, config.precision.value, config.train_mode)
    if config.train_mode is TrainMode.FROZEN_BACKBONE:
        if backbone is None:
            raise ValueError("A frozen backbone needs one: include_top=False for a catalogue model (the "
                             "transfer-learning head), a nested model in a saved file.")
        backbone.trainable = False
    elif config.train_mode is TrainMode.LAST_N:
        ops = [op for op, _ in walk_model(model, backbone)[0]]
        for op in ops[: max(0, len(ops) - config.last_n_layers)]:
            op.trainable = False
    model.compile(optimizer=keras_optimizer(config), loss="sparse_categorical_crossentropy", jit_compile=jit_compile)
    return model


def batch_shapes(model: Any, batch: int) -> tuple[tuple[int, ...], str, tuple[int, ...], int]:
    """``(x shape, x dtype, y shape, classes)`` of one batch of sparse integer labels.

    One label per output position (a segmentation map has one per pixel), as the engine's
    ledger counts them (``ModelProfile.label_elements``).
    """
    out_shape = tuple(int(d) for d in model.outputs[0].shape[1:])
    x_shape = (batch, *(int(d) for d in model.inputs[0].shape[1:]))
    x_dtype = str(getattr(model.inputs[0], "dtype", "float32"))
    return x_shape, x_dtype, (batch, *out_shape[:-1]), (out_shape[-1] if out_shape else 1)


MAX_WARMUP_STEPS = 30  # the loss scale halves per overflowing step: 2^15 -> 1 in 15


def measure_in_process(spec: ModelSpec | ModelFile, config: TrainingConfig, xla: bool = False,
                       trace: bool | str = False) -> dict[str, Any]:
    """Runs the measurement protocol of MEMORY_FACTS.md in this process.

    One inter-op and one intra-op thread; build, compile, warm-up ``train_on_batch``
    steps until one has applied its update (one step, except under mixed_float16's
    loss scaling), reset the allocator stats, one more step that applies its update,
    read the peak.

    ``xla``: compile the step with XLA (``jit_compile=True``). Off by default, whatever
    the device: the engine models TensorFlow's graph executor, and Keras 3's
    ``jit_compile="auto"`` would turn XLA on by itself on a GPU (off on a CPU).

    ``trace``: record the measured step with TensorFlow's profiler and return its
    allocator events under ``"allocations"`` (``_allocator_timeline``); ``"history"``
    also records everything before it (build, compile, warm-up) under
    ``"allocations_before"``.
    """
    started = time.perf_counter()
    print_stage(started, "starting TensorFlow")  # its import alone takes seconds, minutes on a busy host
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    gpus = tf.config.list_physical_devices("GPU")
    if config.device is not Device.GPU and gpus:
        tf.config.set_visible_devices([], "GPU")  # the CPU's kernels, as asked, on a machine with a GPU
        gpus = []
    elif config.device is Device.GPU and not gpus:
        raise RuntimeError("device gpu was asked for, but TensorFlow sees no GPU on this machine")
    device = "GPU:0" if gpus else "CPU:0"
    described = device  # GPU:0 also names the card, as the data files' environment does
    if gpus:
        # One region of this size instead of (nearly) the whole card, as TensorFlow takes
        # by default: several measurements can then share one GPU, each allocator alike.
        limit_mib = os.environ.get("CALC_GPU_MEMORY_LIMIT_MIB")
        if limit_mib:
            tf.config.set_logical_device_configuration(
                gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=int(limit_mib))])
        name = tf.config.experimental.get_device_details(gpus[0]).get("device_name")
        described = f"{device} ({name})" if name else device
    import keras

    print_stage(started, f"TensorFlow {tf.__version__} on {described}")
    ready = time.perf_counter()  # the run's own seconds start here, past TensorFlow's import
    extra: dict[str, Any] = {}
    # "history": everything from the build to the measured step, under the profiler too.
    with _recording_allocations(extra, "allocations_before") if trace == "history" else nullcontext():
        model = compiled_training_model(spec, config, jit_compile=xla)
        print_stage(started, "model built")
        batch = config.per_replica_batch
        rng = np.random.default_rng(0)
        x_shape, x_dtype, y_shape, classes = batch_shapes(model, batch)
        if "int" in x_dtype:  # token ids for an Embedding: the values do not change the memory
            x = rng.integers(0, 2, size=x_shape).astype(x_dtype)
        else:
            x = rng.random(x_shape, dtype=np.float32)
        y = rng.integers(0, classes, size=y_shape)
        print_stage(started, f"inputs made, batch {batch}")
        # mixed_float16 wraps the optimizer in a LossScaleOptimizer whose dynamic scale starts
        # at 2^15 and halves on every step with non-finite gradients, skipping the update:
        # with a 1000-class head the first steps all overflow (archive/probes/probe_loss_scale.py).
        # Training spends its time in steps that apply their update, and the engine predicts
        # those, so the warm-up goes on until one has, and the measured step must apply its own.
        # With gradient accumulation ``iterations`` is a fresh tensor (steps // N) on every
        # read, so it is read again after each step; the update applies on every Nth step.
        inner = getattr(model.optimizer, "inner_optimizer", model.optimizer)

        def step_applies_update() -> bool:
            done = int(keras.ops.convert_to_numpy(inner.iterations))
            model.train_on_batch(x, y)
            return int(keras.ops.convert_to_numpy(inner.iterations)) > done

        limit = MAX_WARMUP_STEPS * config.gradient_accumulation_steps
        warmup = 1
        while not step_applies_update():
            if warmup >= limit:
                raise RuntimeError(f"no update was applied in {warmup} warm-up steps (loss scale never settled)")
            warmup += 1
        print_stage(started, f"{warmup} warm-up step(s) done (the first traces and compiles the step)")
    for _ in range(limit):
        tf.config.experimental.reset_memory_stats(device)
        before = tf.config.experimental.get_memory_info(device)["current"]
        # Each attempt is recorded afresh: a step that skipped its update is not the one measured.
        with _recording_allocations(extra, "allocations") if trace else nullcontext():
            applied = step_applies_update()  # reading the scalar counter allocates nothing tracked
        info = tf.config.experimental.get_memory_info(device)
        if applied:
            break
    else:
        raise RuntimeError(f"the measured step skipped its update {limit} times")
    print_stage(started, "measured step done")
    return {**extra,
        "peak_bytes": int(info["peak"]),
        "current_before_bytes": int(before),
        "current_after_bytes": int(info["current"]),
        "seconds": round(time.perf_counter() - ready, 2),
        "device": described,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "threads": "inter_op=1 intra_op=1",
        "jit_compile": str(model.jit_compile),
        "warmup_steps": warmup,
    }


STAGE_PREFIX = "measure:"


def print_stage(started: float, what: str) -> None:
    """One line on stderr per stage of a measurement: a run stopped at its time limit says
    in its failure message (the tail of its stderr) how far it came."""
    print(f"{STAGE_PREFIX} {what} at {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)


@contextmanager
def _recording_allocations(into: dict[str, Any], key: str):
    """Records the block with TensorFlow's profiler; ``into[key]`` gets its allocator events."""
    import tensorflow as tf

    trace_dir = tempfile.mkdtemp(prefix="calc-trace-")
    try:
        tf.profiler.experimental.start(trace_dir,
                                       options=tf.profiler.experimental.ProfilerOptions(host_tracer_level=3))
        try:
            yield
        finally:
            tf.profiler.experimental.stop()
        into[key] = _allocator_timeline(trace_dir)
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)


def _allocator_timeline(trace_dir: str) -> list[list]:
    """The allocator's events in a profiler trace, in time order.

    Each is ``[kind, bytes, bytes_in_use_after, address, op, shape, region, requested]``
    with kind "a" (allocation) or "f" (free; op, shape and region empty); ``bytes`` is the
    chunk the allocator handed out (what its statistics count), ``requested`` what the
    op asked for. TensorFlow's BFC
    allocator emits them for the requests its statistics count (256 KiB and up on the
    CPU) when the profiler's host tracer runs at level 2 or more.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    events = []
    for path in Path(trace_dir).rglob("*.xplane.pb"):
        space = xplane_pb2.XSpace()
        space.ParseFromString(path.read_bytes())
        for plane in space.planes:
            names = {k: v.name for k, v in plane.event_metadata.items()}
            stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
            for line in plane.lines:
                for ev in line.events:
                    name = names.get(ev.metadata_id, "")
                    if name not in ("MemoryAllocation", "MemoryDeallocation"):
                        continue
                    st: dict[str, Any] = {}
                    for stat in ev.stats:
                        which = stat.WhichOneof("value")
                        value = getattr(stat, which)
                        if which == "ref_value":
                            value = plane.stat_metadata[value].name
                        st[stat_names.get(stat.metadata_id, "")] = value
                    t = line.timestamp_ns * 1000 + ev.offset_ps
                    events.append((t, ["a" if name == "MemoryAllocation" else "f", int(st.get("allocation_bytes", 0)),
                                       int(st.get("bytes_allocated", 0)), int(st.get("addr", 0)),
                                       str(st.get("tf_op", "")), str(st.get("shape", "")),
                                       str(st.get("region_type", "")), int(st.get("requested_bytes", 0))]))
    events.sort(key=lambda e: e[0])
    return [e for _, e in events]
