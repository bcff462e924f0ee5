"""XLA's buffer plan of Keras's own train step for a GPU, compiled on JAX without one.

Run in a plan worker of the engine, or a fresh child, whose environment ``calc.cluster.worker.kind_env`` sets
(``KERAS_BACKEND=jax``, XLA's autotuner off) before Keras and JAX are imported.

A ``PlanModel`` is one model built with its optimizer, kept to plan its step at any batch
and for any card: building and the symbolic pass cost 5-20 s a model, and do not depend on
the batch or the card (the state's shapes do not), so a worker that keeps the model pays
only tracing and XLA's compile for a further batch. Its plans are byte-identical to a
fresh process's (``tests/test_xla_plan.py``).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from calc.catalogue import ModelFile, ModelSpec
from calc.hub import HubSpec
from calc.keras import clear_session
from calc.keras.codegen import Codegen, compiler_options, stopped
from calc.keras.step import batch_shapes, compiled_training_model
from calc.requests import config_to_dict, spec_to_dict
from calc.types import TrainingConfig
from calc.xla.assignment import CompiledMemory, compiled_memory, hlo_assignment


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


def fresh_session(remat: str | None) -> float:
    """Keras on JAX with nothing built yet (the remat patch where a mode is asked for); when it started."""
    import keras

    if keras.backend.backend() != "jax":
        raise RuntimeError("the XLA plan needs KERAS_BACKEND=jax")
    started = time.perf_counter()
    clear_session()
    if remat:
        _static_remat_options()
    return started


NO_GEMM_CONFIG = "No supported config found"  # XLA's refusal of a GEMM fusion it has no configuration for


def card_answers(target_config: str) -> tuple[tuple[int, int], int, str]:
    """What the card ``target_config`` describes answers when Keras asks the device: its compute
    capability, its cuDNN version (9.10 is 91000) and its name."""
    def figure(pattern: str) -> re.Match[str]:
        found = re.search(pattern, target_config)
        if found is None:
            raise ValueError(f"the target names no {pattern!r}")
        return found

    capability = figure(r"cuda_compute_capability \{ major: (\d+) minor: (\d+) \}")
    dnn = figure(r"dnn_version_info \{ major: (\d+) minor: (\d+) \}")
    return ((int(capability[1]), int(capability[2])), int(dnn[1]) * 10000 + int(dnn[2]) * 100,
            figure(r'device_description_str: "([^"]*)"')[1])


def answer_as_the_card(target_config: str) -> None:
    """Makes Keras choose attention's kernel as it would on the card ``target_config`` describes, in
    this process (which has no GPU).

    The choice is made while the step is traced, by asking the device: Keras's JAX
    ``dot_product_attention`` (``MultiHeadAttention`` without dropout, ``GroupedQueryAttention``,
    KerasHub's LLMs) takes cuDNN's flash attention where cuDNN is installed, the card is Ampere or
    newer, the inputs are float16 or bfloat16 and the head fits (keras/src/backend/jax/nn.py,
    ``_can_use_flash_attention``, which calls JAX's cuDNN checks). Here those checks get the
    card's compute capability and the cuDNN version its target names. Flash attention keeps no
    score matrix for the backward pass, so on such a card a long sequence needs far less than
    XLA's own attention, which the plan would otherwise compile.
    """
    from jax._src.cudnn import fused_attention_stablehlo as cudnn

    capability, cudnn_version, _ = card_answers(target_config)

    def version(text: str) -> tuple[int, ...]:
        return tuple(int(x) for x in text.split("."))

    cudnn.check_cudnn_version = lambda: cudnn_version
    cudnn.check_compute_capability = lambda c: capability >= version(c)
    cudnn.is_cuda_compute_capability_equal = lambda c: capability == version(c)


class PlanModel:
    """One model built as ``config`` trains it (the batch aside), ready to plan at any batch and card.

    The step is what ``train_on_batch`` runs: ``jax.jit(model.train_step, donate_argnums=0)``
    (keras/src/backend/jax/trainer.py, ``make_train_function``) over the state it gathers
    (trainable, non-trainable, optimizer and metrics variables) and one batch.
    """

    def __init__(self, spec: ModelSpec | ModelFile, config: TrainingConfig, remat: str | None = None) -> None:
        import keras
        import numpy as np

        started = fresh_session(remat)
        if config.model_parallel > 1:
            raise ValueError("a catalogue model has no layout map to shard its weights over a model axis: "
                             "its mesh is data parallel (DATAx1)")
        self.mesh_shape = (config.num_gpus, config.model_parallel, config.hosts)
        model = compiled_training_model(spec, config, remat=remat)
        x_shape, x_dtype, y_shape, _ = batch_shapes(model, 1)
        # Keras builds the optimizer and the metrics from one small batch; the plan's batch is abstract.
        # The symbolic pass only infers shapes, and Keras 3.15's remat wrapper fails inside it
        # ("'str' object has no attribute '_error_repr'" under mode "full"), so remat is off
        # for that pass and back on for the step that is compiled.
        one = (np.zeros(x_shape, x_dtype), np.zeros(y_shape, "int32"), None)
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
        self._state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True,
                                           optimizer_variables=True, metrics_variables=True,
                                           purge_model_variables=False)
        self._shape_x, self._dtype_x, self._shape_y = x_shape[1:], x_dtype, y_shape[1:]
        self._keep(model, groups, lambda path: path.split("/")[0])
        attention = (keras.layers.MultiHeadAttention, keras.layers.GroupQueryAttention)
        self.asks_the_device = any(isinstance(layer, attention)
                                   for layer in model._flatten_layers(include_self=False, recursive=True))
        self.build_seconds = round(time.perf_counter() - started, 2)

    def _keep(self, model: Any, groups: tuple[Any, ...], layer_of: Any) -> None:
        """Keeps the built ``model``'s step and what names its values: the state ``groups``' bytes,
        each state variable's layer (``layer_of`` its path), the layers that hold no layers, and the
        optimizer's name scopes (a loss-scale wrapper's too), which ``calc.xla.peak`` reads."""
        import jax

        self._model = model
        self._step = jax.jit(model.train_step, donate_argnums=0)
        self._meshes: dict[str, Any] = {}
        # Each state variable's axes on the mesh (``keras.distribution.TensorLayout.axes``): what the preset's
        # layout map says, on the optimizer's slots their variable's; None where every variable is replicated.
        self.state_axes: tuple[list[tuple[str | None, ...]], ...] | None = None
        self.state_kinds: dict[tuple[int, int], str] = {}  # (group, index) -> "quantized" or "scales"
        self.group_bytes = tuple(_nbytes(g) for g in groups)
        labels = ("", "", "(optimizer state)", "(metrics)")
        self.state_layers = {(g, i): (layer_of(v.path) if labels[g] == "" else labels[g])
                             for g, group in enumerate(groups) for i, v in enumerate(group)}
        self.leaf_layers = frozenset(layer.name for layer in model._flatten_layers(include_self=False, recursive=True)
                                     if not list(layer._flatten_layers(include_self=False, recursive=False)))
        optimizer = model.optimizer
        self.optimizer_scopes = frozenset(filter(None, (optimizer.name, getattr(getattr(optimizer, "inner_optimizer",
                                                                                        None), "name", None))))

    asks_the_device = False  # whether the step's trace asks the device (it has attention), set by the build
    _answering: tuple[Any, ...] | None = None  # the card whose answers the last trace heard

    def answer_as_the_card(self, target_config: str) -> None:
        answer_as_the_card(target_config)

    def _answer_as(self, target_config: str) -> None:
        """Before a trace: the card's answers to the device questions the step asks (where it asks any)."""
        import jax

        if not self.asks_the_device:
            return
        answers = card_answers(target_config)
        if answers != self._answering:
            self.answer_as_the_card(target_config)
            jax.clear_caches()  # a step traced with another card's answers would be reused
            self._answering = answers

    mesh_shape: tuple[int, int, int] = (1, 1, 1)  # (data-parallel replicas, model axis, hosts)

    @property
    def on_mesh(self) -> bool:
        return self.mesh_shape != (1, 1, 1)

    def _mesh(self, target_config: str) -> Any:
        """The cards of the target, compile-only, as JAX's mesh: one card on one host (axis "x"), or the
        setup's mesh of ("batch", "model") over its hosts (topology "1 x hosts x cards per host")."""
        from jax.experimental import topologies

        if target_config not in self._meshes:
            data, model, hosts = self.mesh_shape
            if not self.on_mesh:
                topology = topologies.get_topology_desc(platform="cuda", target_config=target_config, topology="1x1x1")
                self._meshes[target_config] = topologies.make_mesh(topology, (1,), ("x",))
            else:
                topology = topologies.get_topology_desc(platform="cuda", target_config=target_config,
                                                        topology=f"1x{hosts}x{data * model // hosts}")
                self._meshes[target_config] = topologies.make_mesh(topology, (data, model), MESH_AXES)
        return self._meshes[target_config]

    def _sharding(self, target_config: str) -> Any:
        """A sharding on one device of the target card (one compile-only topology per card)."""
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(self._mesh(target_config), PartitionSpec())

    def _distribution(self, mesh: Any) -> Any:
        """The ``keras.distribution`` the step is traced under on ``mesh`` (layers ask it how to lay out
        their outputs); None where no layer would ask (data parallel)."""
        return None

    def _state_on(self, mesh: Any) -> tuple[list[Any], ...]:
        """The state as abstract values laid out on the setup's mesh: each variable by its axes."""
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        axes = self.state_axes or tuple([()] * len(group) for group in self._state)
        return tuple([jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=NamedSharding(mesh, PartitionSpec(*a)))
                      for v, a in zip(group, group_axes)] for group, group_axes in zip(self._state, axes))

    def batch(self, batch: int, sharding: Any) -> Any:
        """One batch of the step, abstract: (images, labels, no sample weights)."""
        import jax

        # Labels reach the step as int32 (JAX without x64 converts int64 numpy arrays).
        return (jax.ShapeDtypeStruct((batch, *self._shape_x), "int32" if "int" in self._dtype_x else self._dtype_x,
                                     sharding=sharding),
                jax.ShapeDtypeStruct((batch, *self._shape_y), "int32", sharding=sharding), None)

    def plan(self, batch: int, target_config: str, codegen: Codegen = "none") -> dict[str, Any]:
        """XLA's memory analysis of the step at ``batch`` for the card ``target_config`` describes.

        JAX compiles for the CUDA target described by ``target_config`` (a
        ``stream_executor.GpuTargetConfigProto`` in text form) as a compile-only client
        ("deviceless ahead-of-time compilation"). Where XLA dumps the compiled module
        (``_dump_folder``) the compile stops once the buffers are assigned and the bytes are read
        from the dumped assignment; elsewhere, or with another ``codegen`` (``calc.keras.codegen``),
        the compiled program's ``memory_analysis()`` gives them.
        """
        import jax
        import keras

        started = time.perf_counter()
        self._answer_as(target_config)
        if self.on_mesh:
            state, data, lowered = self._lower_on_mesh(batch, target_config)
        else:
            sharding = self._sharding(target_config)
            state = self._state_on(sharding.mesh)
            data = self.batch(batch, sharding)
            lowered = self._step.lower(state, data)
        traced = time.perf_counter()
        gemm: dict[str, Any] = {}
        try:
            memory, emitted = _compiled_memory(lowered, {}, codegen)
        except Exception as exc:  # noqa: BLE001 - XLA's runtime error has no public class to catch
            if NO_GEMM_CONFIG not in str(exc):
                raise
            # Without a device XLA takes each Triton GEMM fusion's default configuration, and for some
            # shapes it has none (Gemma 2 2B, 32 x 280 tokens, on an L4); on the card its autotuner
            # would fall back to cuBLAS for them. Compiled again with cuBLAS for every matrix product.
            memory, emitted = _compiled_memory(lowered, {"xla_gpu_enable_triton_gemm": False}, codegen)
            gemm = {"triton_gemm": False}
        compiled = time.perf_counter()
        trainable, non_trainable, optimizer, metrics = (tuple(_device_bytes(g) for g in state) if self.on_mesh
                                                         else self.group_bytes)
        kinds = {kind: sum(_device_bytes([state[g][i]]) for (g, i), k in self.state_kinds.items() if k == kind)
                 for kind in ("quantized", "scales")}
        explained = self._explained()
        return {
            "argument_bytes": memory.argument_bytes,
            "output_bytes": memory.output_bytes,
            "alias_bytes": memory.alias_bytes,
            "temp_bytes": memory.temp_bytes,
            "kernels_emitted": emitted,
            "trainable_bytes": trainable,
            "non_trainable_bytes": non_trainable,
            "optimizer_bytes": optimizer,
            "metrics_bytes": metrics,
            "batch_bytes": _device_bytes(data),
            # What a fresh process spends before XLA's compile: building the model and tracing the step.
            "build_seconds": round(self.build_seconds + traced - started, 2),
            "compile_seconds": round(compiled - traced, 2),
            "jax": jax.__version__,
            "keras": keras.__version__,
            **gemm,
            **({"peak": explained} if explained is not None else {}),
            **({"quantized_bytes": kinds["quantized"], "scale_bytes": kinds["scales"]} if self.state_kinds else {}),
            **({"mesh": dict(zip(("data", "model", "hosts"), self.mesh_shape))} if self.on_mesh else {}),
        }

    def _lower_on_mesh(self, batch: int, target_config: str) -> tuple[Any, Any, Any]:
        """(the state, the batch, the lowered step) on the setup's mesh of the target's cards, as Keras
        runs it under a ``keras.distribution``: each variable laid out by its axes, the global batch
        (``batch`` on each replica) split along the "batch" axis, the updated state kept where it was
        (``out_shardings``, keras/src/backend/jax/trainer.py ``make_train_function``). XLA's SPMD
        partitioner then plans one device's program."""
        from contextlib import nullcontext

        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        mesh = self._mesh(target_config)
        state = self._state_on(mesh)
        data = self.batch(batch * self.mesh_shape[0], NamedSharding(mesh, PartitionSpec(MESH_AXES[0])))
        step = jax.jit(self._model.train_step, donate_argnums=0,
                       out_shardings=(None, tuple([v.sharding for v in group] for group in state)))
        distribution = self._distribution(mesh)
        with distribution.scope() if distribution is not None else nullcontext():
            return state, data, step.lower(state, data)

    def _explained(self) -> dict[str, Any] | None:
        """What fills the compiled step's temporaries at their peak (``calc.xla.peak``), from the module
        XLA dumped (``calc.cluster.worker.kind_env``); None when XLA dumps nowhere. The dump is deleted."""
        from calc.xla.peak import explain

        folder = _dump_folder()
        if folder is None:
            return None
        try:
            dump = _latest_dump(folder)
            if dump is None:
                return None
            return explain(dump.read_bytes(), optimizer=self.optimizer_scopes, state_layers=self.state_layers,
                           leaf_layers=self.leaf_layers)
        except (OSError, ValueError) as exc:  # the plan stands without its explanation
            print(f"the compiled step's peak could not be read: {exc}", file=sys.stderr)
            return None
        finally:
            for entry in folder.iterdir():
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)


def _dump_folder() -> Path | None:
    """The folder this process's XLA dumps compiled modules to for the peak's explanation (``CALC_XLA_DUMP``,
    set with ``--xla_dump_to`` by ``calc.cluster.worker.kind_env``), or None; a folder of a user's own
    ``--xla_dump_to`` is never read or emptied."""
    folder = os.environ.get("CALC_XLA_DUMP", "")
    return Path(folder) if folder and f"--xla_dump_to={folder}" in os.environ.get("XLA_FLAGS", "") else None


def _latest_dump(folder: Path) -> Path | None:
    """The optimised step XLA dumped last into ``folder``, with its buffer assignment, or None."""
    dumps = sorted(folder.glob("*jit_train_step*gpu_after_optimizations.hlo.pb"), key=lambda f: f.stat().st_mtime)
    return dumps[-1] if dumps else None


def _compiled_memory(lowered: Any, options: dict[str, Any], codegen: Codegen) -> tuple[CompiledMemory, bool]:
    """The bytes XLA assigns the lowered step (and whether it emitted the kernels): read from the
    assignment it dumps where the compile stops there (``codegen`` ``"none"``, where it dumps one),
    else from the compiled program's ``memory_analysis()``."""
    folder = _dump_folder() if codegen == "none" else None
    if folder is None and codegen == "none":
        codegen = "unoptimised"  # no dumped assignment to read: the compile runs to its end
    try:
        memory = lowered.compile(compiler_options={**compiler_options(codegen), **options}).memory_analysis()
    except Exception as exc:  # noqa: BLE001 - XLA's runtime error has no public class to catch
        if folder is None or not stopped(exc):
            raise
        dump = _latest_dump(folder)
        if dump is None:
            raise RuntimeError("XLA stopped after assigning the step's buffers but dumped no assignment") from exc
        return compiled_memory(hlo_assignment(dump.read_bytes())), False
    if memory is None:
        raise RuntimeError("XLA gave no memory analysis of the compiled step")
    return CompiledMemory(int(memory.argument_size_in_bytes), int(memory.output_size_in_bytes),
                          int(memory.alias_size_in_bytes), int(memory.temp_size_in_bytes)), True


MESH_AXES = ("batch", "model")  # keras-hub's layout maps name these axes (``get_layout_map``'s defaults)


def _device_bytes(values: Any) -> int:
    """What one device holds of abstract values laid out on a mesh (each its shard's shape)."""
    import jax
    import numpy as np

    return sum(math.prod(v.sharding.shard_shape(v.shape) if getattr(v, "sharding", None) is not None else v.shape)
               * np.dtype(v.dtype).itemsize for v in jax.tree.leaves(values) if v is not None)


def _nbytes(values: Any) -> int:
    import jax
    import numpy as np

    return sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in jax.tree.leaves(values) if v is not None)


_WARM: dict[str, PlanModel] = {}  # the last model planned in this process, by its family


def plan_in_process(spec: ModelSpec | ModelFile | HubSpec, config: TrainingConfig, target_config: str,
                    remat: str | None = None, family: str | None = None, build: Any = None,
                    codegen: Codegen = "none") -> dict[str, Any]:
    """XLA's buffer plan of Keras's own train step for a GPU, compiled here without one.

    ``family`` names the configuration at any batch (a saved file's by its content, which a
    path alone does not); by default the spec, the config at batch 1 and the remat mode. Needs ``KERAS_BACKEND=jax`` and ``--xla_gpu_autotune_level=0`` in ``XLA_FLAGS`` before
    Keras and JAX are imported (``calc.cluster.worker.kind_env`` sets them): the autotuner
    would run convolutions on a device. The model is kept for the next request of the same
    configuration at another batch or card (its ``"warm"`` is then true); one model at a time,
    so that a worker holds one model's state. ``build`` makes the model (``PlanModel`` by default;
    ``calc.keras.hub.HubPlanModel`` for a KerasHub model). ``codegen``: how much of XLA's code
    generation the compile runs (``calc.keras.codegen``; the same plan, slower with more).
    """
    import gc

    import jax

    family = family or json.dumps([spec_to_dict(spec), config_to_dict(config.at_replica_batch(1)),
                                    remat], sort_keys=True)
    model = _WARM.get(family)
    warm = model is not None
    if model is None:
        _WARM.clear()
        jax.clear_caches()
        gc.collect()
        make: Any = build or PlanModel
        model = _WARM[family] = make(spec, config, remat)
    return {**model.plan(config.per_replica_batch, target_config, codegen), "warm": warm}
