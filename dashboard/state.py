"""The dashboard's inputs: one typed record, read from and written to the URL.

Every input has a widget key and a query parameter of the same name, so a copied
link reproduces the view. Unknown or invalid values fall back to defaults with a
warning; nothing here raises on user input.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from calc.catalogue import CATALOGUE, MAX_IMAGE_SIDE, lookup
from calc.gpus import GPU_PRESETS
from calc.hub import DTYPES, MAX_CLASSES, MAX_LORA_RANK, MAX_SEQUENCE, QUANTIZE_MODES, hub_models
from calc.types import MAX_DEVICES_PER_HOST, MAX_HOSTS, Device, Optimizer, Precision, TrainMode
from calc.xla import REMAT_MODES
from dashboard.i18n import LANGUAGES, tr
from dashboard.plain import plain

MAX_BATCH = 65536
MAX_QUERY_VALUE_CHARS = 64
MAX_COMPARED = 6  # models on the Compare page
MAX_LIST_CHARS = 256  # a comma-separated list in the link (6 model or preset names, or every GPU preset)


@dataclass(frozen=True)
class Inputs:
    source: str = "catalogue"  # "hub" (a KerasHub preset), "upload" (a file) or "summary" (pasted text)
    model: str = "ResNet50"
    image_size: int = 224
    batch_size: int = 32
    optimizer: str = "adam"
    momentum: bool = False  # SGD, RMSprop
    amsgrad: bool = False  # Adam, AdamW
    centered: bool = False  # RMSprop
    ema: bool = False  # use_ema, any optimizer
    grad_accum: int = 1  # gradient_accumulation_steps
    precision: str = "float32"
    device: str = "gpu"  # whose kernels run the step (calc.types.Device)
    train_mode: str = "all"
    last_n: int = 10
    gpu: str = "t4"
    gpu_memory_gib: float = 16.0
    num_gpus: int = 1
    margin: int = 5  # percent
    unit: str = "GiB"
    step: str = "xla"  # "xla": the compiled step (Keras's default on a GPU); "graph": jit_compile=False
    remat: str = "none"  # keras.RematScope mode of the XLA step (calc.xla.REMAT_MODES)
    lang: str = "en"  # the interface's language (dashboard.i18n.LANGUAGES)
    present: bool = False  # the Formula page's presentation mode (dashboard.presentation)
    models: str = ""  # the Compare page's models, comma-separated ("": its defaults)
    gpus: str = ""  # the Compare page's GPU presets, comma-separated ("": its defaults)
    hubs: str = ""  # the Compare page's KerasHub presets, comma-separated ("": its defaults)
    hub: str = "gemma2_2b_en"  # a KerasHub preset (calc.hub), with source "hub"
    seq_len: int = 512  # a KerasHub text model's tokens per example
    lora_rank: int = 4  # LoRA's rank (backbone.enable_lora); 0 trains every weight
    hub_dtype: str = "auto"  # the dtype policy a KerasHub model is built under ("auto": its task's default)
    hub_classes: int = 2  # a KerasHub classifier's new head
    hub_frozen: bool = False  # a KerasHub classifier's backbone frozen: the new head alone trains
    model_parallel: int = 1  # a KerasHub model's mesh: cards sharing its weights by the preset's layout map
    hosts: int = 1  # the hosts the mesh's cards sit on
    quantize: str = "none"  # a KerasHub model quantized before LoRA (calc.hub.QUANTIZE_MODES)

    def to_query(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}


DEFAULTS = Inputs()
OPTIMIZERS = [o.value for o in Optimizer]
PRECISIONS = [p.value for p in Precision]
DEVICES = [d.value for d in Device]
TRAIN_MODES = [m.value for m in TrainMode]
GPUS = [*GPU_PRESETS, "custom"]
UNITS = ["GiB", "GB"]
SOURCES = ["catalogue", "hub", "upload", "summary"]
HUB_MODELS = list(hub_models())
HUB_DTYPES = ["auto", *DTYPES]
MODELS = list(CATALOGUE)
STEPS = ["xla", "graph"]
REMATS = ["none", *REMAT_MODES]
QUANTIZE = ["none", *QUANTIZE_MODES]


def _int(name: str, text: str, low: int, high: int) -> int:
    value = int(text)  # ValueError on "abc", "2.5"
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}")
    return value


def _choice(name: str, text: str, options: list[str]) -> str:
    if text not in options:
        raise ValueError(f"unknown {name}")
    return text


def _names(text: str, name_of, most: int) -> str:
    """A comma-separated list, each item checked (``name_of`` raises on an unknown one), without repeats."""
    names = list(dict.fromkeys(name_of(item.strip()) for item in text.split(",") if item.strip()))
    if len(names) > most:
        raise ValueError(f"at most {most}")
    return ",".join(names)


def parse_query(params: dict[str, str]) -> tuple[Inputs, list[str]]:
    """Turns query parameters into ``Inputs``; bad values become defaults plus a warning."""
    inputs, warnings = parse_query_by_key(params)
    return inputs, [text for _, text in warnings]


def parse_query_by_key(params: dict[str, str]) -> tuple[Inputs, list[tuple[str, str]]]:
    """``parse_query``, each warning with the input it is about."""
    values = asdict(DEFAULTS)
    warnings: list[tuple[str, str]] = []
    parsers = {
        "source": lambda t: _choice("source", t, SOURCES),
        "model": lambda t: lookup(t).name,
        "image_size": lambda t: _int("image_size", t, 1, MAX_IMAGE_SIDE),
        "batch_size": lambda t: _int("batch_size", t, 1, MAX_BATCH),
        "optimizer": lambda t: _choice("optimizer", t, OPTIMIZERS),
        "momentum": lambda t: _bool("momentum", t),
        "amsgrad": lambda t: _bool("amsgrad", t),
        "centered": lambda t: _bool("centered", t),
        "ema": lambda t: _bool("ema", t),
        "grad_accum": lambda t: _int("grad_accum", t, 1, 1024),
        "precision": lambda t: _choice("precision", t, PRECISIONS),
        "device": lambda t: _choice("device", t, DEVICES),
        "train_mode": lambda t: _choice("train_mode", t, TRAIN_MODES),
        "last_n": lambda t: _int("last_n", t, 1, 10000),
        "gpu": lambda t: _choice("gpu", t, GPUS),
        "gpu_memory_gib": lambda t: _float("gpu_memory_gib", t, 0.25, 4096.0),
        "num_gpus": lambda t: _int("num_gpus", t, 1, 1024),
        "margin": lambda t: _int("margin", t, 0, 90),
        "unit": lambda t: _choice("unit", t, UNITS),
        "step": lambda t: _choice("step", t, STEPS),
        "remat": lambda t: _choice("remat", t, REMATS),
        "lang": lambda t: _choice("lang", t, list(LANGUAGES)),
        "present": lambda t: _bool("present", t),
        "models": lambda t: _names(t, lambda n: lookup(n).name, MAX_COMPARED),
        "gpus": lambda t: _names(t, lambda k: _choice("gpus", k, list(GPU_PRESETS)), len(GPU_PRESETS)),
        "hub": lambda t: _choice("hub", t, HUB_MODELS),
        "hubs": lambda t: _names(t, lambda n: _choice("hubs", n, HUB_MODELS), MAX_COMPARED),
        "seq_len": lambda t: _int("seq_len", t, 1, MAX_SEQUENCE),
        "lora_rank": lambda t: _int("lora_rank", t, 0, MAX_LORA_RANK),
        "hub_dtype": lambda t: _choice("hub_dtype", t, HUB_DTYPES),
        "hub_classes": lambda t: _int("hub_classes", t, 1, MAX_CLASSES),
        "hub_frozen": lambda t: _bool("hub_frozen", t),
        "model_parallel": lambda t: _int("model_parallel", t, 1, MAX_DEVICES_PER_HOST),
        "hosts": lambda t: _int("hosts", t, 1, MAX_HOSTS),
        "quantize": lambda t: _choice("quantize", t, QUANTIZE),
    }
    for key, raw in params.items():
        if key not in parsers:
            continue  # unrelated parameters are left alone
        text = str(raw)[:MAX_LIST_CHARS if key in ("models", "gpus", "hubs") else MAX_QUERY_VALUE_CHARS]
        try:
            values[key] = parsers[key](text)
        except (ValueError, TypeError, OverflowError):
            warnings.append((key, tr("Ignored {key}={value} from the link: using {default!r}.", key=key,
                                     value=plain(repr(text[:MAX_QUERY_VALUE_CHARS])), default=values[key])))
    inputs = Inputs(**values)
    if inputs.batch_size % inputs.num_gpus:
        warnings.append(("num_gpus", tr("batch_size {batch_size} is not divisible by num_gpus {num_gpus}: using 1 GPU.",
                                        batch_size=inputs.batch_size, num_gpus=inputs.num_gpus)))
        inputs = replace(inputs, num_gpus=1)
    if (inputs.num_gpus * inputs.model_parallel) % inputs.hosts:
        warnings.append(("hosts", tr("{cards} cards do not split evenly over {hosts} hosts: using one host.",
                                     cards=inputs.num_gpus * inputs.model_parallel, hosts=inputs.hosts)))
        inputs = replace(inputs, hosts=1)
    return inputs, warnings


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{name} must be true or false")


def _float(name: str, text: str, low: float, high: float) -> float:
    value = float(text)
    if not low <= value <= high:  # also false for nan
        raise ValueError(f"{name} must be between {low} and {high}")
    return value


FIELD_NAMES = [f.name for f in fields(Inputs)]
