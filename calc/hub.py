"""KerasHub models: the second catalogue, planned by XLA only (pure Python, no Keras).

A KerasHub model is named by its preset (``gemma2_2b_en``) and built from the architecture
figures of ``calc/data/hub_models.json``, never from its weights (``calc.keras.hub`` builds it
without materialising one). What a training setup adds to the preset is a ``HubSpec``: the
sequence length of a text model, the LoRA rank (``backbone.enable_lora``), the dtype policy
the model is built under, and a classifier's number of classes.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HUB_DATA = Path(__file__).resolve().parent / "data" / "hub_models.json"
DTYPES = ("bfloat16", "float32", "mixed_bfloat16", "mixed_float16")  # Keras dtype policies
DTYPE_BYTES = {"bfloat16": 2, "float32": 4, "mixed_bfloat16": 4, "mixed_float16": 4}  # a variable's bytes
MAX_SEQUENCE = 1 << 17  # a sequence longer than this is refused before any compile
MAX_LORA_RANK = 1024
# Backbones in which keras-hub's enable_lora finds no layer named query or value, so LoRA would train nothing:
# the convolutional ones, and Swin, whose window attention projects query, key and value with one fused Dense
# ("attention_qkv").
NO_ATTENTION = ("ResNet", "DenseNet", "VGG", "EfficientNet", "MobileNet", "Xception", "CSPNet", "HGNetV2",
                "SwinTransformer")
MAX_CLASSES = 65_536  # a classifier's head is made with its weights (calc.keras.hub)
# Keras's weight quantization modes a fine-tuning step takes (``Model.quantize``): int8 and int4 keep the frozen
# kernels in 8 and 4 bits with scales in the policy's dtype; float8 trains the matrix products in 8-bit floats with scaling
# factors beside kernels of the policy's dtype. GPTQ and AWQ need a calibration data set and are not planned.
QUANTIZE_MODES = ("int8", "int4", "float8")


@dataclass(frozen=True)
class HubModel:
    """One preset: its family (the keras-hub class prefix), its task, its backbone's figures."""

    preset: str
    family: str  # keras_hub.models.<family>Backbone, <family>CausalLM / TextClassifier / ImageClassifier
    task: str  # "causal_lm", "text_classifier" or "image_classifier"
    params: int  # as keras-hub publishes it for the preset (the backbone's)
    description: str
    backbone: dict[str, Any] = field(hash=False)  # the backbone's keyword arguments
    architecture_source: str = ""
    params_source: str = ""
    # Where keras-hub publishes another count than the backbone's (EfficientNet: timm's count of the
    # 1,000-class classifier's trainable parameters), that count; 0 where ``params`` is the published one.
    published_params: int = 0
    # A causal LM's head is its token embedding (tied), which a layout map splits on a mesh (``calc.xla.kept``).
    head_tied: bool = False

    @property
    def text(self) -> bool:
        return self.task != "image_classifier"

    @property
    def max_sequence(self) -> int | None:
        """The longest sequence the backbone takes where it has learned positions (GPT-2, BERT), else None."""
        return self.backbone.get("max_sequence_length") if self.family in ("GPT2", "Bert", "Roberta",
                                                                           "DebertaV3") else None

    @property
    def sequence_limit(self) -> int:
        """The longest sequence a setup may ask of this model: its learned positions', else ``MAX_SEQUENCE``."""
        return self.max_sequence or MAX_SEQUENCE

    @property
    def image_shape(self) -> tuple[int, ...] | None:
        shape = self.backbone.get("image_shape") or self.backbone.get("input_shape")  # EfficientNet's name
        return tuple(shape) if shape else None


@functools.cache
def hub_models() -> dict[str, HubModel]:
    """Every KerasHub preset of the data file, by preset name."""
    data = json.loads(HUB_DATA.read_text())
    return {m["preset"]: HubModel(m["preset"], m["family"], m["task"], int(m["params"]), m["description"],
                                  dict(m["backbone"]), m.get("architecture_source", ""), m.get("params_source", ""),
                                  int(m.get("published_params", 0)), bool(m.get("head_tied", False)))
            for m in data["models"]}


def is_hub_model(name: str) -> bool:
    return name in hub_models()


@dataclass(frozen=True)
class HubSpec:
    """A KerasHub model as one training setup builds it.

    ``sequence_length``: tokens per example (text models; 0 for images). ``lora_rank``: LoRA on the
    backbone's query and value projections with this rank, everything else frozen; 0 trains every
    weight. ``dtype``: the dtype policy the model is built under ("bfloat16": weights and compute in
    bfloat16, as Keras's LoRA guides load Gemma; "mixed_bfloat16": float32 weights). ``classes``: a
    classifier's outputs. ``quantize``: the backbone quantized as ``model.quantize(mode)`` quantizes it
    (``QUANTIZE_MODES``; "" for none), LoRA on top.
    """

    preset: str
    sequence_length: int = 512
    lora_rank: int = 0
    dtype: str = "bfloat16"
    classes: int = 2
    quantize: str = ""

    @property
    def model(self) -> HubModel:
        return hub_models()[self.preset]

    @property
    def key(self) -> str:
        shape = f"seq{self.sequence_length}" if self.model.text else "x".join(map(str, self.model.image_shape or ()))
        lora = f"-lora{self.lora_rank}" if self.lora_rank else ""
        head = f"-classes{self.classes}" if self.model.task != "causal_lm" else ""
        quantized = f"-{self.quantize}" if self.quantize else ""
        return f"{self.preset}-{shape}{lora}-{self.dtype}{quantized}{head}"


def make_hub_spec(preset: str, sequence_length: int | None = None, lora_rank: int = 0, dtype: str | None = None,
                  classes: int = 2, quantize: str = "") -> HubSpec:
    """A checked ``HubSpec``; ``ValueError`` with one line for the user otherwise."""
    models = hub_models()
    if preset not in models:
        raise ValueError(f"unknown KerasHub preset {preset!r}; `python -m calc models --hub` lists them.")
    model = models[preset]
    if model.text:
        sequence_length = 512 if sequence_length is None else sequence_length
        if not 1 <= sequence_length <= model.sequence_limit:
            raise ValueError(f"{preset} takes sequences of 1 to {model.sequence_limit:,} tokens. "
                             f"Received: {sequence_length}")
    elif sequence_length:
        raise ValueError(f"{preset} is an image model: it takes no sequence length.")
    else:
        sequence_length = 0
    if not 0 <= lora_rank <= MAX_LORA_RANK:
        raise ValueError(f"the LoRA rank must be 0 (none) to {MAX_LORA_RANK}. Received: {lora_rank}")
    if lora_rank and model.family in NO_ATTENTION:
        raise ValueError(f"{preset} has no attention projections for LoRA to adapt: set the LoRA rank to 0.")
    dtype = dtype or ("bfloat16" if model.task == "causal_lm" else "float32")
    if dtype not in DTYPES:
        raise ValueError(f"the dtype policy must be one of {', '.join(DTYPES)}. Received: {dtype!r}")
    if not 1 <= classes <= MAX_CLASSES:
        raise ValueError(f"classes must be 1 to {MAX_CLASSES:,}. Received: {classes}")
    if quantize and quantize not in QUANTIZE_MODES:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZE_MODES)}. Received: {quantize!r}")
    return HubSpec(preset, sequence_length, lora_rank, dtype, classes, quantize)


def lora_applies(model: HubModel, frozen: bool) -> bool:
    """Whether LoRA has anything to adapt: the backbone has attention, and is not frozen for a classifier's
    new head to train alone (a causal LM has no new head, so ``frozen`` does not apply to it)."""
    return model.family not in NO_ATTENTION and not (frozen and model.task != "causal_lm")


def lora_counts(model: HubModel, rank: int) -> tuple[int, int] | None:
    """(adapter parameters, bias parameters) that train under LoRA at ``rank``: on every layer's query
    and value projections (keras-hub's ``Backbone.get_lora_target_names``), an ``EinsumDense`` kernel
    of shape (..., heads, head size) gains ``A`` of its leading dimensions by ``rank`` and ``B`` of
    ``rank`` by its last, and the projection's bias, where it has one, trains too (``enable_lora``
    sets the layer trainable and freezes its kernel alone). None for a family whose attention this
    does not describe."""
    b = model.backbone
    if "num_layers" not in b:  # a convolutional backbone
        return None
    layers, hidden = b["num_layers"], b["hidden_dim"]
    if model.family in ("Gemma", "Gemma3", "Llama3", "Mistral", "Qwen", "Phi3"):
        heads, kv = b["num_query_heads"], b["num_key_value_heads"]
        head = b.get("head_dim") or hidden // heads
    elif model.family in ("GPT2", "Bert", "Roberta", "ViT", "DeiT"):
        heads = kv = b["num_heads"]
        head = hidden // heads
    else:
        return None
    biased = model.family in ("GPT2", "Bert", "Roberta", "Qwen") or (model.family in ("ViT", "DeiT") and
                                                                       b.get("use_mha_bias", True))
    adapters = rank * (hidden * heads + head) + rank * (hidden * kv + head)
    return layers * adapters, layers * (heads + kv) * head if biased else 0


def lora_parameters(model: HubModel, rank: int) -> int | None:
    """The parameters that train under LoRA at ``rank`` (``lora_counts``), or None."""
    counts = lora_counts(model, rank)
    return None if counts is None else sum(counts)


# Keras makes LoRA's two kernels float32 whatever the policy (``EinsumDense.enable_lora``: "to avoid the
# risk of underflow or overflow during fine-tuning").
LORA_BYTES = 4
# Beside its slots, a Keras optimizer holds its iteration count (int32) and its learning rate (float32).
OPTIMIZER_SCALAR_BYTES = 8


def lora_trainable_bytes(spec: HubSpec) -> int | None:
    """What LoRA's trainable weights take: the adapters in float32, the biases in the policy's variable
    dtype; None where ``lora_counts`` does not describe the family."""
    counts = lora_counts(spec.model, spec.lora_rank)
    return None if counts is None else LORA_BYTES * counts[0] + DTYPE_BYTES[spec.dtype] * counts[1]


def optimizer_state_bytes(trainable: int, slots: int) -> int:
    """What the optimizer's variables take: ``slots`` copies of the trainable weights (each slot takes
    its weight's dtype), and its two scalars."""
    return slots * trainable + OPTIMIZER_SCALAR_BYTES
