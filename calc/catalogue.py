"""The Keras applications catalogue as data, and validation of a model request.

Pure Python: the Keras adapter turns a ``ModelSpec`` into a model. Sizes come from
each application's ``obtain_input_shape(default_size=..., min_size=...)`` call in
``keras/src/applications/*.py`` (Keras 3.15).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Weights this large are refused before anything is allocated: 1e9 float32
# parameters are 4 GB of weights alone, the same again for gradients.
MAX_PARAMS = 1_000_000_000
MAX_IMAGE_SIDE = 8192
MAX_CHANNELS = 64
MAX_CLASSES = 1_000_000


@dataclass(frozen=True)
class CatalogueEntry:
    name: str
    family: str
    default_size: int
    min_size: int
    top_features: int  # the width the classifier of include_top=True reads: its weights are this x classes

    @property
    def backbone_features(self) -> int:
        """The width of ``include_top=False``'s pooled output, which the new head reads."""
        return _BACKBONE_FEATURES.get(self.name, self.top_features)


# Where the backbone's output is narrower than what the application's own top reads:
# VGG's fc layers and MobileNetV3's last 1x1 convolution belong to the top.
_BACKBONE_FEATURES = {"VGG16": 512, "VGG19": 512, "MobileNetV3Small": 576, "MobileNetV3Large": 960}


def _family(family: str, entries: list[tuple[str, int, int]], min_size: int = 32):
    """(name, default size, top features) of each application of one family."""
    return [CatalogueEntry(n, family, size, min_size, features) for n, size, features in entries]


CATALOGUE: dict[str, CatalogueEntry] = {
    e.name: e
    for e in [
        *_family("VGG", [("VGG16", 224, 4096), ("VGG19", 224, 4096)]),
        *_family("ResNet", [("ResNet50", 224, 2048), ("ResNet101", 224, 2048), ("ResNet152", 224, 2048)]),
        *_family("ResNetV2", [("ResNet50V2", 224, 2048), ("ResNet101V2", 224, 2048), ("ResNet152V2", 224, 2048)]),
        *_family("Inception", [("InceptionV3", 299, 2048), ("InceptionResNetV2", 299, 1536)], min_size=75),
        *_family("Xception", [("Xception", 299, 2048)], min_size=71),
        *_family("MobileNet", [("MobileNet", 224, 1024), ("MobileNetV2", 224, 1280)]),
        *_family("MobileNetV3", [("MobileNetV3Small", 224, 1024), ("MobileNetV3Large", 224, 1280)]),
        *_family("DenseNet", [("DenseNet121", 224, 1024), ("DenseNet169", 224, 1664), ("DenseNet201", 224, 1920)]),
        *_family("NASNet", [("NASNetMobile", 224, 1056), ("NASNetLarge", 331, 4032)]),
        *_family(
            "EfficientNet",
            [("EfficientNetB0", 224, 1280), ("EfficientNetB1", 240, 1280), ("EfficientNetB2", 260, 1408),
             ("EfficientNetB3", 300, 1536), ("EfficientNetB4", 380, 1792), ("EfficientNetB5", 456, 2048),
             ("EfficientNetB6", 528, 2304), ("EfficientNetB7", 600, 2560)],
        ),
        *_family(
            "EfficientNetV2",
            [("EfficientNetV2B0", 224, 1280), ("EfficientNetV2B1", 240, 1280), ("EfficientNetV2B2", 260, 1408),
             ("EfficientNetV2B3", 300, 1536), ("EfficientNetV2S", 384, 1280), ("EfficientNetV2M", 480, 1280),
             ("EfficientNetV2L", 480, 1280)],
        ),
        *_family(
            "ConvNeXt",
            [("ConvNeXtTiny", 224, 768), ("ConvNeXtSmall", 224, 768), ("ConvNeXtBase", 224, 1024),
             ("ConvNeXtLarge", 224, 1536), ("ConvNeXtXLarge", 224, 2048)],
        ),
    ]
}

_LOWER = {name.lower(): name for name in CATALOGUE}


@dataclass(frozen=True)
class ModelSpec:
    """A catalogue model request: which application, at which input, with which head.

    ``include_top=True`` is the application's own classifier; ``False`` is the Keras
    transfer-learning shape (backbone, global average pooling, a new Dense head), the
    one a frozen backbone is trained with.
    """

    name: str
    height: int
    width: int
    channels: int = 3
    include_top: bool = True
    classes: int = 1000

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (self.height, self.width, self.channels)

    @property
    def key(self) -> str:
        top = "top" if self.include_top else "head"
        return f"{self.name}-{self.height}x{self.width}x{self.channels}-{top}{self.classes}"


@dataclass(frozen=True)
class ModelFile:
    """A model the user brings: a saved ``.keras`` or ``.h5`` file, by path.

    Measured as saved (``calc.keras.build.build_saved_model``), with every layer saved
    under the float32 policy computing in the precision asked for, as the engine
    estimates it. A relative path is read from the repository root (the validation set's
    own-model files live in ``calc/data/models``).
    """

    path: str

    @property
    def key(self) -> str:
        return os.path.basename(self.path)

    def resolved(self) -> str:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        return self.path if os.path.isabs(self.path) else os.path.join(root, self.path)


def lookup(name: str) -> CatalogueEntry:
    """Returns the catalogue entry for a name, case-insensitively.

    Raises:
        ValueError: naming the unknown model and a few close names.
    """
    if not isinstance(name, str) or name.lower() not in _LOWER:
        import difflib

        close = difflib.get_close_matches(str(name), list(CATALOGUE), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"Unknown model {name!r}. Expected one of the Keras applications "
            f"(see `python -m calc models`).{hint}"
        )
    return CATALOGUE[_LOWER[name.lower()]]


def _positive_int(name: str, value: object, upper: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a positive integer. Received: {name}={value!r}")
    if not 1 <= value <= upper:
        raise ValueError(f"{name} must be between 1 and {upper}. Received: {name}={value}")
    return value


def make_spec(
    name: str,
    image_size: int | None = None,
    *,
    height: int | None = None,
    width: int | None = None,
    channels: int = 3,
    include_top: bool = True,
    classes: int = 1000,
) -> ModelSpec:
    """Validates a catalogue request and returns its ``ModelSpec``.

    Args:
        name: a Keras application name (``"ResNet50"``), case-insensitive.
        image_size: square side in pixels; default: the model's own default size.
        height, width: a non-square input (override ``image_size``).
        channels, include_top, classes: as in ``keras.applications``.

    Returns:
        A validated ``ModelSpec``.

    Raises:
        ValueError: with what was expected and what came.

    Example:
        >>> make_spec("resnet50", 160).key
        'ResNet50-160x160x3-top1000'
    """
    entry = lookup(name)
    side = entry.default_size if image_size is None else image_size
    _positive_int("image_size", side, MAX_IMAGE_SIDE)
    h = _positive_int("height", side if height is None else height, MAX_IMAGE_SIDE)
    w = _positive_int("width", side if width is None else width, MAX_IMAGE_SIDE)
    _positive_int("channels", channels, MAX_CHANNELS)
    _positive_int("classes", classes, MAX_CLASSES)
    if min(h, w) < entry.min_size:
        raise ValueError(
            f"{entry.name} needs an input of at least {entry.min_size}x{entry.min_size} pixels. "
            f"Received: {h}x{w}"
        )
    spec = ModelSpec(entry.name, h, w, channels, bool(include_top), classes)
    params = approximate_params(spec, entry.top_features if spec.include_top else entry.backbone_features)
    if params > MAX_PARAMS:
        raise ValueError(
            f"{entry.name} at {h}x{w} with {classes:,} classes has at least {params:,} parameters "
            f"({params * 4 / 1024**3:,.1f} GiB of float32 weights alone); the limit is {MAX_PARAMS:,}. "
            "Use a smaller image, fewer classes or include_top=False."
        )
    return spec


def request_weights(spec: ModelSpec, head_features: int) -> tuple[int, ...]:
    """The parameters of each weight that grows with the request: the classifier of ``classes``
    outputs on ``head_features`` inputs (the application's own top, or the new head of
    ``include_top=False``), and VGG's Flatten -> fc1 top (others pool first)."""
    head = ((head_features + 1) * spec.classes,)
    if spec.include_top and spec.name in ("VGG16", "VGG19"):
        # Five 2x2 max-pools with 'valid' padding: each floors the side by two.
        flat = (spec.height // 32) * (spec.width // 32) * 512
        return (flat * 4096 + 4096, 4097 * 4096, *head)
    return head


def approximate_params(spec: ModelSpec, head_features: int) -> int:
    """Parameters that grow with the request (``request_weights``).

    Only the request-dependent part is counted; it is what can make a request absurd
    (a million classes on ConvNeXtXLarge is a 2·10^9-parameter head). The rest of every
    application is fixed and below 400 million parameters.
    """
    return sum(request_weights(spec, head_features))


# While Keras draws a weight's initial values it holds two more tensors of its size: the
# uniform or normal draw, and that draw scaled (keras/src/initializers/random_initializers.py
# calls ``random.uniform(shape, minval, maxval)``, which draws in [0, 1) and then scales and
# shifts). Measured: VGG16 builds at 64-480 px peaked at the process's own size plus the weights
# plus two copies of fc1 (within 0.15 GiB on TensorFlow; the JAX compile child peaks above that).
INITIALIZER_COPIES = 2


def build_bytes_at_least(spec: ModelSpec) -> int:
    """What a process needs at least, on top of its own size, to build ``spec``'s weights: every
    weight that grows with the request in float32, and the initializer's copies of the largest.

    A lower bound (the application's fixed weights are left out): a child whose budget is below
    it would be stopped for memory, so the build is refused before a child starts."""
    entry = CATALOGUE.get(spec.name)
    if entry is None:
        return 0
    weights = request_weights(spec, entry.top_features if spec.include_top else entry.backbone_features)
    return 4 * (sum(weights) + INITIALIZER_COPIES * max(weights))
