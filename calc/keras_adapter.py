"""The only module that imports Keras or TensorFlow.

It turns a ``keras.Model`` into a ``ModelProfile`` (plain data), builds catalogue
models, and runs the real measurement of one training step. Everything is imported
lazily so that importing ``calc`` stays cheap.
"""

from __future__ import annotations

import gc
import json
import math
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from calc.catalogue import ModelFile, ModelSpec
from calc.facts.layers import is_known_layer_type
from calc.types import Device, LayerStats, ModelProfile, Optimizer, TrainingConfig, TrainMode

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _keras():
    import keras

    return keras


def _elements(shape: Any) -> int:
    dims = [d for d in tuple(shape)[1:]]
    if any(d is None for d in dims):
        raise ValueError(
            f"Every dimension but the batch must be known to estimate memory. Received shape {tuple(shape)}"
        )
    return int(math.prod(dims))


def _activation_name(op: Any) -> str:
    fn = getattr(op, "activation", None)
    if fn is None:
        return "linear"
    return getattr(fn, "__name__", type(fn).__name__)


def _is_functional(op: Any) -> bool:
    return hasattr(op, "_nodes_by_depth") and hasattr(op, "inputs")


def _as_functional(op: Any) -> Any:
    """The graph of a functional model, or of a built Sequential (its ``_functional``)."""
    if _is_functional(op):
        return op
    inner = getattr(op, "_functional", None)
    return inner if inner is not None and _is_functional(inner) else None


def _detail(op: Any) -> str:
    parts = []
    for attr in ("kernel_size", "pool_size", "strides", "rate", "axis", "approximate"):
        value = getattr(op, attr, None)
        if value is not None and not callable(value):
            parts.append(f"{attr}={value}")
    # Only where they differ from the defaults, so that no Keras application's ledger changes.
    dilation = getattr(op, "dilation_rate", None)
    if isinstance(dilation, (tuple, list)) and any(d != 1 for d in dilation):
        parts.append(f"dilation_rate={tuple(dilation)}")
    if getattr(op, "padding", None) == "causal":
        parts.append("padding=causal")
    return " ".join(parts)


def _attention_steps(op: Any, node: Any, tensor_map: dict[int, int], out_ids: tuple[int, ...],
                     synthetic: Any) -> list[tuple] | None:
    """A ``MultiHeadAttention`` call as the steps TensorFlow runs (Keras 3.15), or None.

    One layer on the graph, but the tensors its backward pass keeps are not a multiple of
    its input or output: the attention probabilities grow with the square of the sequence.
    So the call becomes its steps (``keras/src/layers/attention/multi_head_attention.py``),
    each a row of the ledger with its own tensors: the query, key and value projections
    (``EinsumDense``, their weights), the scores (``Einsum``, which keeps both inputs), the
    softmax and the context (``Einsum``), then the output projection. Without dropout the
    layer calls ``ops.dot_product_attention``, which TensorFlow computes as the scores in
    the compute dtype, a float32 softmax (``AttentionSoftmax``, kept for its gradient) and a
    cast back (``Cast``: a new tensor only under mixed precision) that the context keeps.
    With dropout the query is scaled first (the scaled copy is what the scores keep), the
    softmax runs in the compute dtype and ``Dropout`` keeps its mask. Only rank-3 inputs
    (batch, sequence, features) over the default attention axis; anything else stays one
    row and is reported as an unknown type.
    """
    if type(op).__name__ != "MultiHeadAttention" or len(out_ids) != 1:
        return None
    try:
        return _attention_step_rows(op, node, tensor_map, out_ids, synthetic)
    except (AttributeError, TypeError, ValueError, KeyError, IndexError):
        return None  # a Keras whose layer differs: one row, reported as an unknown type


def _attention_step_rows(op: Any, node: Any, tensor_map: dict[int, int], out_ids: tuple[int, ...],
                         synthetic: Any) -> list[tuple] | None:
    args, kwargs = list(node.arguments.args), dict(node.arguments.kwargs)
    query = args[0] if args else kwargs.get("query")
    value = args[1] if len(args) > 1 else kwargs.get("value")
    if kwargs.get("return_attention_scores") or query is None or value is None:
        return None
    key = args[2] if len(args) > 2 else kwargs.get("key")
    key = value if key is None else key
    ids = [tensor_map[id(t)] for t in (query, key, value)]  # a miss: the caller's fallback
    if any(len(t.shape) != 3 for t in (query, key, value)) or tuple(op._attention_axes or (1,)) != (1,):
        return None
    heads, key_dim = int(op.num_heads), int(op.key_dim)
    value_dim = int(op.value_dim or key_dim)
    t_len, s_len = int(query.shape[1]), int(value.shape[1])
    q_id, k_id, v_id = ids
    name = op.name
    q = synthetic((t_len, heads, key_dim))
    k = synthetic((s_len, heads, key_dim))
    v = synthetic((s_len, heads, value_dim))
    steps = [
        (f"{name}/query", "EinsumDense", (q_id,), (q,), ((t_len, heads, key_dim),), op._query_dense),
        (f"{name}/key", "EinsumDense", (k_id,), (k,), ((s_len, heads, key_dim),), op._key_dense),
        (f"{name}/value", "EinsumDense", (v_id,), (v,), ((s_len, heads, value_dim),), op._value_dense),
    ]
    scores_shape = (heads, t_len, s_len)
    scores = synthetic(scores_shape)
    if float(op.dropout or 0.0) > 0.0:
        scaled = synthetic((t_len, heads, key_dim))
        probs, dropped = synthetic(scores_shape), synthetic(scores_shape)
        steps += [
            (f"{name}/scale", "Rescaling", (q,), (scaled,), ((t_len, heads, key_dim),), None),
            (f"{name}/scores", "Einsum", (k, scaled), (scores,), (scores_shape,), None),
            (f"{name}/softmax", "Softmax", (scores,), (probs,), (scores_shape,), None),
            (f"{name}/dropout", "Dropout", (probs,), (dropped,), (scores_shape,), None),
        ]
        attended = dropped
    else:
        probs, cast = synthetic(scores_shape), synthetic(scores_shape)
        steps += [
            (f"{name}/scores", "Einsum", (q, k), (scores,), (scores_shape,), None),
            (f"{name}/softmax", "AttentionSoftmax", (scores,), (probs,), (scores_shape,), None),
            (f"{name}/cast", "Cast", (probs,), (cast,), (scores_shape,), None),
        ]
        attended = cast
    context = synthetic((t_len, heads, value_dim))
    steps += [
        (f"{name}/context", "Einsum", (attended, v), (context,), ((t_len, heads, value_dim),), None),
        (f"{name}/output", "EinsumDense", (context,), out_ids, (tuple(int(d) for d in node.outputs[0].shape[1:]),),
         op._output_dense),
    ]
    return steps


def _walk(model: Any, backbone: Any = None) -> tuple[list[tuple[Any, LayerStats]], list[int], list[int], list[int]]:
    """Flattens a functional model (nested models inlined) into ledger rows in run order."""
    elements: list[int] = []
    rows: list[tuple[Any, LayerStats]] = []
    seen_weights: set[int] = set()
    global_policy = _keras().config.dtype_policy().name

    def new_tensor(kt: Any) -> int:
        elements.append(_elements(kt.shape))
        return len(elements) - 1

    def synthetic(shape: tuple[int, ...]) -> int:
        elements.append(int(math.prod(shape)))
        return len(elements) - 1

    def visit(fn: Any, tensor_map: dict[int, int], in_backbone: bool) -> None:
        for depth in sorted(fn._nodes_by_depth, reverse=True):
            for node in fn._nodes_by_depth[depth]:
                op = node.operation
                if op is None or node.is_input:
                    continue
                in_ids = tuple(tensor_map[id(x)] for x in node.input_tensors)
                graph = _as_functional(op)
                if graph is not None:
                    inner = {id(x): t for x, t in zip(graph.inputs, in_ids)}
                    visit(graph, inner, in_backbone or op is backbone)
                    for outer, inner_out in zip(node.outputs, graph.outputs):
                        tensor_map[id(outer)] = inner[id(inner_out)]
                    continue
                out_ids = tuple(new_tensor(kt) for kt in node.outputs)
                for kt, t in zip(node.outputs, out_ids):
                    tensor_map[id(kt)] = t
                policy = getattr(op, "dtype_policy", None)
                f32 = bool(
                    policy is not None
                    and policy.compute_dtype == "float32"
                    and policy.name != global_policy
                )
                steps = _attention_steps(op, node, tensor_map, out_ids, synthetic)
                if steps is None:
                    steps = [(op.name, type(op).__name__, in_ids, out_ids,
                              tuple(tuple(kt.shape[1:]) for kt in node.outputs), op)]
                for name, layer_type, ins, outs, shapes, owner in steps:
                    trainable, frozen = [], []
                    shares = False
                    for v in getattr(owner, "weights", []) if owner is not None else []:
                        if id(v) in seen_weights:
                            shares = True
                            continue
                        seen_weights.add(id(v))
                        size = int(math.prod(v.shape))
                        (trainable if v.trainable else frozen).append(size)
                    rows.append(
                        (
                            op,
                            LayerStats(
                                name=name,
                                layer_type=layer_type,
                                input_ids=tuple(ins),
                                output_ids=outs,
                                output_shapes=shapes,
                                trainable_weight_elements=tuple(trainable),
                                non_trainable_weight_elements=tuple(frozen),
                                activation=_activation_name(op) if owner is op else "linear",
                                float32_compute=f32 or layer_type == "AttentionSoftmax",
                                in_backbone=in_backbone,
                                shares_weights=shares,
                                detail=_detail(op) if owner is op else "",
                            ),
                        )
                    )

    model = _as_functional(model) or model
    if not _is_functional(model):
        raise ValueError(
            "Only functional and Sequential Keras models can be profiled (subclassed models "
            f"have no graph to read). Received: {type(model).__name__}"
        )
    tensor_map: dict[int, int] = {}
    input_ids = [new_tensor(x) for x in model.inputs]
    for x, t in zip(model.inputs, input_ids):
        tensor_map[id(x)] = t
    visit(model, tensor_map, False)
    output_ids = [tensor_map[id(x)] for x in model.outputs]
    return rows, elements, input_ids, output_ids


def profile_model(model: Any, name: str | None = None, backbone: Any = None) -> ModelProfile:
    """Reads a built functional ``keras.Model`` into a ``ModelProfile``.

    Args:
        model: a functional or Sequential Keras model with known input shapes.
        name: the profile's name (default: the model's).
        backbone: a nested model whose layers are marked ``in_backbone``.

    Returns:
        The per-layer ledger; unknown layer types are listed, not dropped.
    """
    rows, elements, input_ids, output_ids = _walk(model, backbone)
    layers = tuple(stats for _, stats in rows)
    unknown = sorted({l.layer_type for l in layers if not is_known_layer_type(l.layer_type)})
    out_shape = tuple(model.outputs[0].shape[1:])
    # Sparse integer labels: one int32 per sample per output position.
    label_elements = int(math.prod(out_shape[:-1])) if len(out_shape) > 1 else 1
    return ModelProfile(
        name=name or model.name,
        input_shape=tuple(int(d) for d in model.inputs[0].shape[1:]),
        layers=layers,
        tensor_elements=tuple(elements),
        input_ids=tuple(input_ids),
        output_ids=tuple(output_ids),
        label_elements=label_elements,
        unknown_layer_types=tuple(unknown),
    )


def build_model(spec: ModelSpec | ModelFile, precision: str = "float32",
                train_mode: TrainMode = TrainMode.ALL) -> tuple[Any, Any]:
    """Builds a catalogue model with ``weights=None``. Returns ``(model, backbone or None)``.

    A ``ModelFile`` is loaded instead (``build_saved_model``).

    ``include_top=False`` gives the Keras transfer-learning recipe: the application
    without its top, global average pooling and a new softmax Dense head; with a frozen
    backbone the backbone is called with ``training=False``, as the Keras guide does.
    """
    if isinstance(spec, ModelFile):
        return build_saved_model(spec.resolved(), precision)
    keras = _keras()
    keras.config.set_dtype_policy(precision)
    app = getattr(keras.applications, spec.name)
    if spec.include_top:
        model = app(weights=None, include_top=True, input_shape=spec.input_shape, classes=spec.classes)
        return model, None
    base = app(weights=None, include_top=False, input_shape=spec.input_shape)
    inputs = keras.Input(spec.input_shape)
    if train_mode is TrainMode.FROZEN_BACKBONE:
        x = base(inputs, training=False)
    else:
        x = base(inputs)
    x = keras.layers.GlobalAveragePooling2D(name="head_pool")(x)
    outputs = keras.layers.Dense(spec.classes, activation="softmax", name="head_predictions")(x)
    return keras.Model(inputs, outputs, name=f"{spec.name}_transfer"), base


def _load_saved(path: str) -> Any:
    """A saved model, loaded with Keras safe mode on and without its compile state."""
    try:
        return _keras().saving.load_model(path, compile=False, safe_mode=True)
    except Exception as exc:  # Keras raises many types for bad files; all mean "cannot read"
        raise ValueError(f"Keras could not load this file safely: {type(exc).__name__}: {exc}"[:500]) from None


def _first_nested(model: Any) -> Any:
    return next((op for op in getattr(model, "layers", []) if _as_functional(op) is not None), None)


def build_saved_model(path: str, precision: str = "float32") -> tuple[Any, Any]:
    """A saved model as the engine estimates it. Returns ``(model, its first nested model or None)``.

    The engine reads a file's layers under the float32 policy and applies the precision
    asked for to all of them, as if the model had been built under that global policy.
    Keras saves each layer's policy in the file, so under mixed precision the model is
    cloned with every layer saved as ``float32`` recreated under ``precision`` (fresh
    weights: their values do not change the step's memory).
    """
    keras = _keras()
    keras.config.set_dtype_policy(precision)
    model = _load_saved(path)
    if precision != "float32":
        def recast(layer: Any) -> Any:
            config = layer.get_config()
            if getattr(layer, "dtype_policy", None) is not None and layer.dtype_policy.name == "float32":
                config["dtype"] = precision
            return layer.__class__.from_config(config)

        model = keras.models.clone_model(model, clone_function=recast, recursive=True)
    return model, _first_nested(model)


def profile_catalogue_model(spec: ModelSpec) -> ModelProfile:
    """Builds a catalogue model once, reads its ledger, and lets the model go."""
    keras = _keras()
    # Auto-generated layer names count up per process ("global_average_pooling2d_3"
    # after other models): a fresh scope makes the ledger independent of what this
    # process built before (the build worker, the CLI and tests agree).
    keras.backend.clear_session()
    model, backbone = build_model(spec)
    try:
        return profile_model(model, name=spec.key, backbone=backbone)
    finally:
        del model, backbone
        keras.backend.clear_session()
        gc.collect()


_OPTIMIZER_CLASSES = {
    Optimizer.SGD: "SGD", Optimizer.ADAM: "Adam", Optimizer.ADAMW: "AdamW", Optimizer.NADAM: "Nadam",
    Optimizer.ADAMAX: "Adamax", Optimizer.RMSPROP: "RMSprop", Optimizer.ADAGRAD: "Adagrad",
    Optimizer.ADADELTA: "Adadelta", Optimizer.FTRL: "Ftrl", Optimizer.LION: "Lion", Optimizer.LAMB: "Lamb",
    Optimizer.ADAFACTOR: "Adafactor",
}


def _optimizer(config: TrainingConfig) -> Any:
    keras = _keras()
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
    keras = _keras()
    scope = keras.RematScope(mode=remat) if remat else nullcontext()
    with scope:
        model, backbone = build_model(spec, config.precision.value, config.train_mode)
    if config.train_mode is TrainMode.FROZEN_BACKBONE:
        if backbone is None:
            raise ValueError("A frozen backbone needs one: include_top=False for a catalogue model (the "
                             "transfer-learning head), a nested model in a saved file.")
        backbone.trainable = False
    elif config.train_mode is TrainMode.LAST_N:
        ops = [op for op, _ in _walk(model, backbone)[0]]
        for op in ops[: max(0, len(ops) - config.last_n_layers)]:
            op.trainable = False
    model.compile(optimizer=_optimizer(config), loss="sparse_categorical_crossentropy", jit_compile=jit_compile)
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
    keras = _keras()
    started = time.perf_counter()
    extra: dict[str, Any] = {}
    # "history": everything from the build to the measured step, under the profiler too.
    with _recording_allocations(extra, "allocations_before") if trace == "history" else nullcontext():
        model = compiled_training_model(spec, config, jit_compile=xla)
        batch = config.per_replica_batch
        rng = np.random.default_rng(0)
        x_shape, x_dtype, y_shape, classes = batch_shapes(model, batch)
        if "int" in x_dtype:  # token ids for an Embedding: the values do not change the memory
            x = rng.integers(0, 2, size=x_shape).astype(x_dtype)
        else:
            x = rng.random(x_shape, dtype=np.float32)
        y = rng.integers(0, classes, size=y_shape)
        # mixed_float16 wraps the optimizer in a LossScaleOptimizer whose dynamic scale starts
        # at 2^15 and halves on every step with non-finite gradients, skipping the update:
        # with a 1000-class head the first steps all overflow (benchmarks/probe_loss_scale.py).
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
    return {**extra,
        "peak_bytes": int(info["peak"]),
        "current_before_bytes": int(before),
        "current_after_bytes": int(info["current"]),
        "seconds": round(time.perf_counter() - started, 2),
        "device": described,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "threads": "inter_op=1 intra_op=1",
        "jit_compile": str(model.jit_compile),
        "warmup_steps": warmup,
    }


def _static_remat_options() -> None:
    """Keras 3.15's JAX remat passes a layer's options through ``jax.checkpoint`` as traced values.

    ``remat`` (keras/src/backend/jax/core.py) is ``jax.checkpoint(layer.call)``, so
    ``training=True`` reaches BatchNormalization or Dropout as a tracer and their ``if
    training:`` fails ("Attempted boolean conversion"): RematScope("full") cannot train
    any catalogue model with BatchNormalization on the JAX backend. What RematScope asks
    for is the layer's tensors recomputed, not its options, so in this process the
    options that are not arrays are bound before ``jax.checkpoint`` sees the call.
    """
    import jax
    from keras.src.backend.jax import core

    def remat(f: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            arrays = {k: v for k, v in kwargs.items() if hasattr(v, "shape")}
            options = {k: v for k, v in kwargs.items() if k not in arrays}
            return jax.checkpoint(lambda *a, **kw: f(*a, **kw, **options))(*args, **arrays)

        return call

    core.remat = remat


def plan_in_process(spec: ModelSpec | ModelFile, config: TrainingConfig, target_config: str,
                    remat: str | None = None) -> dict[str, Any]:
    """XLA's buffer plan of Keras's own train step for a GPU, compiled here without one.

    Needs ``KERAS_BACKEND=jax`` and ``--xla_gpu_autotune_level=0`` in ``XLA_FLAGS`` before
    Keras and JAX are imported (``calc.xla_plan.worker_env`` sets them): the autotuner
    would run convolutions on a device. JAX compiles for the CUDA target described by
    ``target_config`` (a ``stream_executor.GpuTargetConfigProto`` in text form) as a
    compile-only client ("deviceless ahead-of-time compilation"), and the compiled
    program's ``memory_analysis()`` gives the bytes XLA assigned.

    The step is what ``train_on_batch`` runs: ``jax.jit(model.train_step, donate_argnums=0)``
    (keras/src/backend/jax/trainer.py, ``make_train_function``) over the state it gathers
    (trainable, non-trainable, optimizer and metrics variables) and one batch.
    """
    import jax
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import NamedSharding, PartitionSpec

    keras = _keras()
    if keras.backend.backend() != "jax":
        raise RuntimeError("the XLA plan needs KERAS_BACKEND=jax")
    started = time.perf_counter()
    topology = topologies.get_topology_desc(platform="cuda", target_config=target_config, topology="1x1x1")
    sharding = NamedSharding(topologies.make_mesh(topology, (1,), ("x",)), PartitionSpec())
    keras.backend.clear_session()
    if remat:
        _static_remat_options()
    model = compiled_training_model(spec, config, remat=remat)
    batch = config.per_replica_batch
    x_shape, x_dtype, y_shape, _ = batch_shapes(model, batch)
    # Keras builds the optimizer and the metrics from one small batch; the plan's batch is abstract.
    # The symbolic pass only infers shapes, and Keras 3.15's remat wrapper fails inside it
    # ("'str' object has no attribute '_error_repr'" under mode "full"), so remat is off
    # for that pass and back on for the step that is compiled.
    one = (np.zeros((1, *x_shape[1:]), x_dtype), np.zeros((1, *y_shape[1:]), "int32"), None)
    modes = [(layer, layer._remat_mode) for layer in model._flatten_layers(include_self=True, recursive=True)]
    for layer, _ in modes:
        layer._remat_mode = None
    try:
        model._symbolic_build(data_batch=one)
    finally:
        for layer, mode in modes:
            layer._remat_mode = mode
    groups = (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
              model.metrics_variables)
    state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True, optimizer_variables=True,
                                 metrics_variables=True, purge_model_variables=False)

    def abstract(v: Any) -> Any:
        return jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=sharding)

    # Labels reach the step as int32 (JAX without x64 converts int64 numpy arrays).
    data = (jax.ShapeDtypeStruct(x_shape, "int32" if "int" in x_dtype else x_dtype, sharding=sharding),
            jax.ShapeDtypeStruct(y_shape, "int32", sharding=sharding), None)
    lowered = jax.jit(model.train_step, donate_argnums=0).lower(jax.tree.map(abstract, state), data)
    built = time.perf_counter()
    compiled = lowered.compile()
    memory = compiled.memory_analysis()

    def nbytes(values: Any) -> int:
        return sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in jax.tree.leaves(values) if v is not None)

    return {
        "argument_bytes": int(memory.argument_size_in_bytes),
        "output_bytes": int(memory.output_size_in_bytes),
        "alias_bytes": int(memory.alias_size_in_bytes),
        "temp_bytes": int(memory.temp_size_in_bytes),
        "generated_code_bytes": int(memory.generated_code_size_in_bytes),
        "trainable_bytes": nbytes(groups[0]),
        "non_trainable_bytes": nbytes(groups[1]),
        "optimizer_bytes": nbytes(groups[2]),
        "metrics_bytes": nbytes(groups[3]),
        "batch_bytes": nbytes(data),
        "build_seconds": round(built - started, 2),
        "compile_seconds": round(time.perf_counter() - built, 2),
        "jax": jax.__version__,
        "keras": keras.__version__,
    }


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


def profile_model_file(path: str) -> ModelProfile:
    """Loads a saved ``.keras`` or ``.h5`` model with Keras safe mode on and profiles it.

    No custom objects are registered and Lambda layers are refused by safe mode, so a
    file cannot run code while it loads. The model is dropped before returning.
    """
    keras = _keras()
    model = _load_saved(path)
    try:
        return profile_model(model, name=os.path.basename(path), backbone=_first_nested(model))
    finally:
        del model
        keras.backend.clear_session()
        gc.collect()


def _child_main(argv: list[str]) -> int:
    """Entry of the subprocesses: measure one case, profile one saved file, or serve builds."""
    from calc.requests import config_from_dict, spec_from_dict

    if argv[:1] == ["--serve-builds"]:
        from calc.build_worker import serve_builds

        return serve_builds(sys.stdin, sys.stdout)
    if argv[:1] == ["--plan-xla"]:
        request = json.loads(sys.stdin.read())
        try:
            result = plan_in_process(spec_from_dict(request["spec"]), config_from_dict(request["config"]),
                                     request["target_config"], request.get("remat"))
        except Exception as exc:  # a layer XLA cannot compile, a model that cannot be built: the answer
            sys.stdout.write("REFUSED " + json.dumps(f"{type(exc).__name__}: {exc}"[:500]) + "\n")
            return 0
        sys.stdout.write("PLAN " + json.dumps(result) + "\n")
        return 0
    if argv[:1] == ["--profile-file"]:
        from calc.profiles import profile_to_dict

        try:
            profile = profile_model_file(argv[1])
        except ValueError as exc:
            sys.stdout.write("REFUSED " + json.dumps(str(exc)) + "\n")
            return 0
        sys.stdout.write("PROFILE " + json.dumps(profile_to_dict(profile)) + "\n")
        return 0
    request = json.loads(argv[0])
    trace = request.get("trace")
    result = measure_in_process(spec_from_dict(request["spec"]), config_from_dict(request["config"]),
                                xla=request.get("xla") is True, trace=trace if trace in (True, "history") else False)
    sys.stdout.write("MEASURED " + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_child_main(sys.argv[1:]))
