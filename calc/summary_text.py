"""A ledger from the text of ``model.summary()``, for people who can share only that.

Both the Keras 2 layout (seed 000) and Keras 3's box-drawn table are read. The text
carries names, types, output shapes and parameter counts, not the wiring or the
fused activations, so the model is read as a chain (each layer feeding the next)
and every parameter block as one variable; BatchNormalization's 4C parameters split
into 2C trainable and 2C moving statistics. The estimate says so beside its number.
"""

from __future__ import annotations

import math
import re

from calc.types import LayerStats, ModelProfile

MAX_SUMMARY_CHARS = 1_000_000
MAX_LAYERS = 5000

_ROW = re.compile(
    r"^[\s│|]*(?P<name>[\w.:/\-]+)\s+\((?P<type>[A-Za-z_]\w*)\)\s*[│|]?\s*"
    r"(?P<shape>\((?:None|\d+)(?:,\s*(?:None|\d+))*,?\)|\[\(.*?\)\]|\(None\))\s*[│|]?\s*(?P<params>[\d,]+)"
)
_TOTAL = re.compile(r"Total params:\s*([\d,]+)")


def _dims(shape_text: str) -> tuple[int, ...]:
    first = re.search(r"\(([^()]*)\)", shape_text)
    if first is None:
        raise ValueError(f"cannot read the output shape {shape_text!r}")
    parts = [p.strip() for p in first.group(1).split(",") if p.strip()]
    if not parts or parts[0] != "None":
        raise ValueError(f"expected a batch dimension of None first, received {shape_text!r}")
    dims = tuple(int(p) for p in parts[1:] if p != "None")
    if len(dims) != len(parts) - 1:
        raise ValueError(f"every dimension but the batch must be known, received {shape_text!r}")
    return dims


def parse_summary(text: str, name: str = "pasted summary") -> ModelProfile:
    """Reads ``model.summary()`` text into a chain-shaped ``ModelProfile``.

    Raises:
        ValueError: when no layer rows are found, or the text is too long.
    """
    if not isinstance(text, str):
        raise ValueError("Expected the text of model.summary().")
    if len(text) > MAX_SUMMARY_CHARS:
        raise ValueError(f"The text is {len(text):,} characters; the limit is {MAX_SUMMARY_CHARS:,}.")
    if "Connected to" in text:
        raise ValueError("This summary has a 'Connected to' column (a functional model with branches); only "
                         "chain-shaped summaries can be read from text. Upload the .keras file instead.")
    rows = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            rows.append((m.group("name"), m.group("type"), _dims(m.group("shape")), int(m.group("params").replace(",", ""))))
            if len(rows) > MAX_LAYERS:
                raise ValueError(f"More than {MAX_LAYERS} layers.")
    if not rows:
        raise ValueError("No layer rows found: paste the table printed by model.summary(), "
                         "rows like 'conv1 (Conv2D)   (None, 112, 112, 64)   9,472'.")
    if rows[0][1] == "InputLayer":
        input_shape = rows[0][2]
        rows = rows[1:]
    else:
        raise ValueError("The first row must be the InputLayer (its output shape is the input).")
    elements = [math.prod(input_shape)]
    layers = []
    for layer_name, kind, dims, params in rows:
        elements.append(math.prod(dims))
        t = len(elements) - 1
        if kind == "BatchNormalization" and params % 4 == 0:
            trainable, frozen = (params // 4, params // 4), (params // 4, params // 4)
        else:
            trainable, frozen = ((params,) if params else ()), ()
        layers.append(LayerStats(layer_name, kind, (t - 1,), (t,), (dims,), trainable, frozen))
    from calc.rules import is_known_layer_type

    unknown = tuple(sorted({l.layer_type for l in layers if not is_known_layer_type(l.layer_type)}))
    total = _TOTAL.search(text)
    if total and int(total.group(1).replace(",", "")) != sum(l.params for l in layers):
        raise ValueError("The rows' parameters do not add up to 'Total params': is part of the table missing "
                         "(seed 000 elides the middle of VGG16's)?")
    return ModelProfile(name=name, input_shape=input_shape, layers=tuple(layers), tensor_elements=tuple(elements),
                        input_ids=(0,), output_ids=(len(elements) - 1,), unknown_layer_types=unknown)
