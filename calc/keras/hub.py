"""KerasHub models built without their weights, and XLA's plan of their train step.

A deferred variable is one Keras creates inside ``keras.StatelessScope(initialize_variables=False)``
with a callable initializer: it has a shape and a dtype and no value. Symbolic calls (the
functional model's construction, ``Model._symbolic_build``) draw a placeholder from the
initializer inside JAX's abstract evaluation, which allocates nothing. XLA's plan lowers the
step over the state's shapes alone (``calc.keras.plan.PlanModel.plan``), so a 9 B parameter
model is planned in about a gigabyte: its weights are never made.

The backbone's layers and the optimizer's and metrics' variables are created in the scope; the
task is made and compiled outside it (an optimizer's iteration count is made from a value,
which a stateless scope refuses): a classifier's head is the one weight made.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import nullcontext
from typing import Any

from calc.hub import HubModel, HubSpec
from calc.keras import clear_session
from calc.keras.codegen import Codegen
from calc.keras.plan import MESH_AXES, PlanModel, card_answers, fresh_session
from calc.keras.plan import answer_as_the_card as plan_answers
from calc.types import TrainingConfig, TrainMode

TASK_CLASS = {"causal_lm": "CausalLM", "text_classifier": "TextClassifier", "image_classifier": "ImageClassifier"}


def _deferred() -> Any:
    import keras

    return keras.StatelessScope(initialize_variables=False)


def deferred_backbone(model: HubModel, lora_rank: int = 0, remat: str | None = None, quantize: str = "") -> Any:
    """The preset's backbone from its figures, every variable deferred; quantized as ``model.quantize(quantize)``
    quantizes it (``quantized_policies``), then LoRA enabled at ``lora_rank``."""
    import keras
    import keras_hub

    figures = {k: tuple(v) if isinstance(v, list) else v for k, v in model.backbone.items()}
    if quantize:
        figures["dtype"] = quantized_policies(model, quantize)
    scope = keras.RematScope(mode=remat) if remat else nullcontext()
    with _deferred(), scope:
        backbone = getattr(keras_hub.models, f"{model.family}Backbone")(**figures)
        if lora_rank:
            backbone.enable_lora(rank=lora_rank)
    return backbone


def _probe(cls: type, mode: str, base: str) -> str | None:
    """The policy Keras's own ``quantize(mode)`` gives a small layer of class ``cls`` built under ``base``
    ("int4/128_from_bfloat16"), or None where it leaves the class as it is (float8 and an embedding)."""
    import keras
    import numpy as np

    from calc.xla.plan import PlanError

    makers = {keras.layers.Dense: (lambda: cls(8, dtype=base), (2, 8)),
              keras.layers.EinsumDense: (lambda: cls("ab,bc->ac", output_shape=8, dtype=base), (2, 8)),
              keras.layers.Embedding: (lambda: cls(16, 8, dtype=base), (2,))}
    known = [k for k in makers if issubclass(cls, k)]
    if not known:
        raise PlanError(f"Keras quantizes {cls.__name__} layers in a way this tool does not plan yet")
    make, shape = makers[known[0]]
    layer = make()
    layer(np.zeros(shape, "int32" if len(shape) == 1 else "float32"))
    try:
        layer.quantize(mode)
    except NotImplementedError:
        return None
    return str(layer.dtype_policy.name)


def quantized_policies(model: HubModel, mode: str) -> Any:
    """The ``DTypePolicyMap`` a backbone is built under to hold the variables ``backbone.quantize(mode)``
    leaves it (which Keras makes from the weights' values): by each layer's path, the policy Keras's
    ``quantize`` gives a layer of its class (``_probe``), for the layers ``Model.quantize`` quantizes (those
    whose class defines ``quantize`` itself; a subclass that does not is refused by its type check).
    This is how Keras builds a quantized model it loads: its variables are made, never its weights."""
    import keras
    import keras_hub

    base = keras.config.dtype_policy().name
    figures = {k: tuple(v) if isinstance(v, list) else v for k, v in model.backbone.items()}
    with _deferred():
        plain = getattr(keras_hub.models, f"{model.family}Backbone")(**figures)
    policies: dict[type, str | None] = {}
    policy_map = keras.dtype_policies.DTypePolicyMap(default_policy=base)
    for layer in plain._flatten_layers(include_self=False, recursive=True):
        cls = type(layer)
        if list(layer._flatten_layers(include_self=False, recursive=False)) or "quantize" not in vars(cls):
            continue
        if cls not in policies:
            policies[cls] = _probe(cls, mode, base)
        if policies[cls] is not None:
            policy_map[layer.path] = policies[cls]
    # The backbone is built again from a fresh session, so that its layers take the same names as ``plain``'s.
    clear_session()
    keras.config.set_dtype_policy(base)
    return policy_map


def parameter_counts(model: HubModel, lora_rank: int, classes: int) -> tuple[int, int | None, int, bool]:
    """From one build of the preset's backbone (no backbone weight made): its parameters; where keras-hub
    publishes timm's count (``published_params``), the trainable parameters of its image classifier with
    ``classes`` outputs (the head is made), else None; the backbone's trainable parameters once LoRA is
    enabled on it at ``lora_rank``; and whether its token embedding is tied to a language-model head."""
    import keras_hub

    clear_session()
    backbone = deferred_backbone(model)
    params = int(backbone.count_params())
    tied = bool(getattr(getattr(backbone, "token_embedding", None), "tie_weights", False))
    classifier = None
    if model.published_params:
        task = getattr(keras_hub.models, f"{model.family}{TASK_CLASS[model.task]}")(
            backbone=backbone, preprocessor=None, num_classes=classes)
        classifier = sum(math.prod(v.shape) for v in task.trainable_weights)
    with _deferred():
        backbone.enable_lora(rank=lora_rank)
    return params, classifier, sum(math.prod(v.shape) for v in backbone.trainable_weights), tied


def hub_training_model(spec: HubSpec, config: TrainingConfig, remat: str | None = None) -> Any:
    """The preset's task model as ``config`` trains it, compiled with the task's own loss and metrics
    and ``config``'s optimizer; every variable deferred (no weight is made)."""
    import keras
    import keras_hub

    from calc.keras.step import keras_optimizer

    model = spec.model
    keras.config.set_dtype_policy(spec.dtype)
    backbone = deferred_backbone(model, spec.lora_rank, remat, spec.quantize)
    task_class = getattr(keras_hub.models, f"{model.family}{TASK_CLASS[model.task]}")
    head = {} if model.task == "causal_lm" else {"num_classes": spec.classes}
    # Outside the scope: the task compiles itself with a default optimizer, whose iteration count is
    # made from a value. A classifier's head is made here, a hidden size by the classes.
    task = task_class(backbone=backbone, preprocessor=None, **head)
    if config.train_mode is TrainMode.FROZEN_BACKBONE:
        backbone.trainable = False
    elif config.train_mode is TrainMode.LAST_N:
        raise ValueError("a KerasHub model trains all its layers, LoRA's or a frozen backbone's head.")
    task.compile(optimizer=keras_optimizer(config))
    return task


def batch_structure(task: Any, batch: int, sequence: int) -> tuple[Any, Any, Any]:
    """One batch as the task's train step takes it, as ``jax.ShapeDtypeStruct``s: its inputs (token ids
    and masks of ``sequence`` tokens, or images), the labels (a token each for a causal LM, one per
    example for a classifier) and the sample weights (a causal LM's: one per token)."""
    import jax
    import keras

    def placeholder(tensor: Any) -> Any:
        shape = [batch if i == 0 else d for i, d in enumerate(tensor.shape)]
        shape = [sequence if d is None else int(d) for d in shape]
        dtype = str(tensor.dtype)
        return jax.ShapeDtypeStruct(tuple(shape), "int32" if "int" in dtype else dtype)

    x = keras.tree.map_structure(placeholder, task.input)
    if _is_causal_lm(task):
        return x, jax.ShapeDtypeStruct((batch, sequence), "int32"), jax.ShapeDtypeStruct((batch, sequence), "bool")
    return x, jax.ShapeDtypeStruct((batch,), "int32"), None


def _model_parallel(model: HubModel, devices: Any) -> Any:
    """``keras.distribution.ModelParallel`` over ``devices`` (data replicas x model axis) with the preset's
    own layout map (its backbone class's ``get_layout_map``); ``PlanError`` for a family keras-hub gives none."""
    import keras
    import keras_hub

    from calc.xla.plan import PlanError

    backbone = getattr(keras_hub.models, f"{model.family}Backbone")
    if not callable(getattr(backbone, "get_layout_map", None)):
        raise PlanError(f"keras-hub gives {model.family} models no layout map to shard their weights by: "
                        "use a data-parallel mesh (DATAx1)")
    mesh = keras.distribution.DeviceMesh(devices.shape, MESH_AXES, devices=devices)
    return keras.distribution.ModelParallel(layout_map=backbone.get_layout_map(mesh), batch_dim_name=MESH_AXES[0])


def _axes(variable: Any) -> tuple[str | None, ...]:
    """A variable's axes on the mesh: its layout's, or none (replicated)."""
    layout = getattr(variable, "_layout", None)
    axes = tuple(layout.axes) if layout is not None else ()
    return axes if len(axes) == len(variable.shape) else (None,) * len(variable.shape)


SCALE_NAMES = ("scale", "zero", "amax_history")  # the variables quantization adds beside a kernel


def _quantized_kinds(task: Any, groups: tuple[Any, ...]) -> dict[tuple[int, int], str]:
    """Of the frozen state, what quantization made: the quantized kernels (8-bit variables; int4's packed two to
    a byte) and their scales and zero points (``SCALE_NAMES``, in the policy's variable dtype), of a layer whose
    policy quantizes, by (group, index)."""
    quantized = {layer.path for layer in task._flatten_layers(include_self=False, recursive=True)
                 if getattr(layer, "quantization_mode", None)}
    kinds = {}
    # The frozen variables (group 1) alone: float8's scales and histories train (Keras overwrites them with their
    # "gradient") and its kernels keep the policy's dtype, so float8 splits nothing off.
    for i, v in enumerate(groups[1]):
        layer, _, name = v.path.rpartition("/")
        if layer.split("/", 1)[-1] not in quantized and layer not in quantized:
            continue
        if any(s in name for s in SCALE_NAMES):  # an int4 kernel's zero points are int8 too
            kinds[(1, i)] = "scales"
        elif str(v.dtype) in ("int8", "uint8"):
            kinds[(1, i)] = "quantized"
    return kinds


def _is_causal_lm(task: Any) -> bool:
    import keras_hub

    return isinstance(task, keras_hub.models.CausalLM)


def answer_as_the_card(target_config: str) -> None:
    """``calc.keras.plan.answer_as_the_card``, and KerasHub's own questions: Gemma, Gemma 3 and Mixtral
    ask whether they run on a GPU and which (``running_on_gpu``; a T4 is denied the fused op)."""
    import keras_hub  # noqa: F401  (its models bind ``running_on_gpu`` by name when imported)
    from keras_hub.src.utils import keras_utils

    plan_answers(target_config)
    name = card_answers(target_config)[2]
    on_gpu = lambda: True  # noqa: E731
    keras_utils.get_gpu_names = lambda: [name]
    for module in [m for n, m in sys.modules.items() if n.startswith("keras_hub.") and m is not None]:
        if getattr(module, "running_on_gpu", None) is not None:
            setattr(module, "running_on_gpu", on_gpu)


class HubPlanModel(PlanModel):
    """A KerasHub task built without weights, ready to plan its step at any batch and card
    (``PlanModel``'s ``plan``, over the state's shapes)."""

    def __init__(self, spec: HubSpec, config: TrainingConfig, remat: str | None = None) -> None:  # noqa: D107
        import jax
        import keras
        import numpy as np

        started = fresh_session(remat)
        self.mesh_shape = (config.num_gpus, config.model_parallel, config.hosts)
        self._preset = spec.model
        task = hub_training_model(spec, config, remat)
        if config.model_parallel > 1:
            # As under the distribution's scope: each model variable laid out by the preset's layout map, which
            # the optimizer's slots then take from their variable (``add_variable_from_reference``).
            layouts = _model_parallel(spec.model, np.arange(config.devices).reshape(config.num_gpus,
                                                                                    config.model_parallel))
            for variable in task.weights:
                variable._layout = layouts.get_variable_layout(variable)
        self._sequence = max(1, spec.sequence_length)  # an image model's inputs have no unknown length
        x, y, weights = batch_structure(task, 1, self._sequence)
        zeros = lambda tree: keras.tree.map_structure(lambda s: np.zeros(s.shape, s.dtype), tree)  # noqa: E731
        one = (zeros(x), zeros(y), None if weights is None else zeros(weights))
        with _deferred():  # the optimizer's slots and the metrics' variables, deferred too
            task._symbolic_build(data_batch=one)
        groups = (task.trainable_variables, task.non_trainable_variables, task.optimizer.variables,
                  task.metrics_variables)
        self._state = tuple([jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in group] for group in groups)
        # A backbone's variables are named by their own layer (".../decoder_block_0/attention/query/kernel").
        self._keep(task, groups, lambda path: path.split("/")[-2] if "/" in path else path)
        if config.model_parallel > 1:
            self.state_axes = tuple([_axes(v) for v in group] for group in groups)
            for group in groups:  # the layouts live on in the step's shardings; their mesh here is no device's
                for v in group:
                    v._layout = None
        if spec.quantize:
            self.state_kinds = _quantized_kinds(task, groups)
        self.trainable_params = sum(math.prod(v.shape) for v in task.trainable_variables)
        self.params = sum(math.prod(v.shape) for v in task.backbone.weights)
        self.build_seconds = round(time.perf_counter() - started, 2)

    def batch(self, batch: int, sharding: Any) -> Any:
        import jax

        data = batch_structure(self._model, batch, self._sequence)
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), data)

    asks_the_device = True  # every KerasHub text model has attention; an image model's questions cost nothing

    def _distribution(self, mesh: Any) -> Any:
        return _model_parallel(self._preset, mesh.devices) if self.mesh_shape[1] > 1 else None

    def answer_as_the_card(self, target_config: str) -> None:
        answer_as_the_card(target_config)

    def plan(self, batch: int, target_config: str, codegen: Codegen = "none") -> dict[str, Any]:
        return {**super().plan(batch, target_config, codegen), "trainable_params": self.trainable_params,
                "params": self.params}
