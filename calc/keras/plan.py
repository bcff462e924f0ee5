"""XLA's buffer plan of Keras's own train step for a GPU, compiled on JAX without one.

Run in a child process whose environment ``calc.workers.plans.plan_env`` sets
(``KERAS_BACKEND=jax``, XLA's autotuner off) before Keras and JAX are imported.
"""

from __future__ import annotations

import math
import time
from typing import Any

from calc.catalogue import ModelFile, ModelSpec
from calc.keras.step import batch_shapes, compiled_training_model
from calc.types import TrainingConfig


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
    Keras and JAX are imported (``calc.workers.plans.plan_env`` sets them): the autotuner
    would run convolutions on a device. JAX compiles for the CUDA target described by
    ``target_config`` (a ``stream_executor.GpuTargetConfigProto`` in text form) as a
    compile-only client ("deviceless ahead-of-time compilation"), and the compiled
    program's ``memory_analysis()`` gives the bytes XLA assigned.

    The step is what ``train_on_batch`` runs: ``jax.jit(model.train_step, donate_argnums=0)``
    (keras/src/backend/jax/trainer.py, ``make_train_function``) over the state it gathers
    (trainable, non-trainable, optimizer and metrics variables) and one batch.
    """
    import jax
    import keras
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import NamedSharding, PartitionSpec

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
    if memory is None:
        raise RuntimeError("XLA gave no memory analysis of the compiled step")

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
