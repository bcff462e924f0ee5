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
from calc.keras.codegen import Codegen
from calc.keras.plan import PlanModel, card_answers, fresh_session
from calc.keras.plan import answer_as_the_card as plan_answers
from calc.types import TrainingConfig, TrainMode

TASK_CLASS = {"causal_lm": "CausalLM", "text_classifier": "TextClassifier", "image_classifier": "ImageClassifier"}


def _deferred() -> Any:
    import keras

    return keras.StatelessScope(initialize_variables=False)


def deferred_backbone(model: HubModel, lora_rank: int = 0, remat: str | None = None) -> Any:
    """The preset's backbone from its figures, every variable deferred; LoRA enabled at ``lora_rank``."""
    import keras
    import keras_hub

    figures = {k: tuple(v) if isinstance(v, list) else v for k, v in model.backbone.items()}
    scope = keras.RematScope(mode=remat) if remat else nullcontext()
    with _deferred(), scope:
        backbone = getattr(keras_hub.models, f"{model.family}Backbone")(**figures)
        if lora_rank:
            backbone.enable_lora(rank=lora_rank)
    return backbone


def backbone_parameters(model: HubModel) -> int:
    """The parameters of the preset's backbone as built from its figures (no weight made)."""
    import keras

    keras.backend.clear_session()
    return int(deferred_backbone(model).count_params())


def classifier_trainable_parameters(model: HubModel, classes: int) -> int:
    """The trainable parameters of the preset's image classifier with ``classes`` outputs (no backbone
    weight made; the head is)."""
    import keras
    import keras_hub

    keras.backend.clear_session()
    backbone = deferred_backbone(model)
    task = getattr(keras_hub.models, f"{model.family}{TASK_CLASS[model.task]}")(backbone=backbone, preprocessor=None,
                                                                              num_classes=classes)
    return sum(math.prod(v.shape) for v in task.trainable_weights)


def lora_trainable_parameters(model: HubModel, rank: int) -> int:
    """The backbone's trainable parameters once LoRA is enabled at ``rank`` (no weight made)."""
    import keras

    keras.backend.clear_session()
    return sum(math.prod(v.shape) for v in deferred_backbone(model, rank).trainable_weights)


def hub_training_model(spec: HubSpec, config: TrainingConfig, remat: str | None = None) -> Any:
    """The preset's task model as ``config`` trains it, compiled with the task's own loss and metrics
    and ``config``'s optimizer; every variable deferred (no weight is made)."""
    import keras
    import keras_hub

    from calc.keras.step import keras_optimizer

    model = spec.model
    keras.config.set_dtype_policy(spec.dtype)
    backbone = deferred_backbone(model, spec.lora_rank, remat)
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
        task = hub_training_model(spec, config, remat)
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
        self.trainable_params = sum(math.prod(v.shape) for v in task.trainable_variables)
        self.params = sum(math.prod(v.shape) for v in task.backbone.weights)
        self.build_seconds = round(time.perf_counter() - started, 2)

    def batch(self, batch: int, sharding: Any) -> Any:
        import jax

        data = batch_structure(self._model, batch, self._sequence)
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), data)

    asks_the_device = True  # every KerasHub text model has attention; an image model's questions cost nothing

    def answer_as_the_card(self, target_config: str) -> None:
        answer_as_the_card(target_config)

    def plan(self, batch: int, target_config: str, codegen: Codegen = "none") -> dict[str, Any]:
        return {**super().plan(batch, target_config, codegen), "trainable_params": self.trainable_params,
                "params": self.params}
