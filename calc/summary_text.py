"""A ledger from the text of ``model.summary()``, for people who can share only that.

Both the Keras 2 layout (seed 000) and Keras 3's box-drawn table are read. The text
carries names, types, output shapes and parameter counts, not the fused activations,
and every parameter block is read as one variable; BatchNormalization's 4C parameters
split into 2C trainable and 2C moving statistics. A summary with a "Connected to"
column (a functional model) is read with its wiring; one without is read as a chain,
each layer feeding the next. The estimate says which beside its number.

Keras 3 fits the table to the terminal and cuts long cells with "…"; a cut name is
matched to the earlier layer it begins, and where several begin the same way the
nearest earlier one is taken and counted, so the page can ask for a wider table
(``model.summary(line_length=200)`` cuts nothing).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from calc.types import LayerStats, ModelProfile

MAX_SUMMARY_CHARS = 1_000_000
MAX_LAYERS = 2000  # twice the largest Keras application (NASNetLarge: 1,040 layer calls)
MAX_ELEMENTS = 2**36  # one layer's output per sample: 256 GiB of float32
MAX_ROW_PARAMS = 10**12

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
    if not all(p == "None" or (p.isascii() and p.isdigit() and len(p) <= 10) for p in parts[1:]):
        raise ValueError(f"expected whole dimensions below 2**31, received {shape_text[:60]!r}")
    dims = tuple(int(p) for p in parts[1:] if p != "None")
    if len(dims) != len(parts) - 1:
        raise ValueError(f"every dimension but the batch must be known, received {shape_text[:60]!r}")
    if any(d >= 2**31 for d in dims) or math.prod(dims) > MAX_ELEMENTS:
        raise ValueError(f"a layer output of more than {MAX_ELEMENTS:,} elements per sample, received "
                         f"{shape_text[:60]!r}")
    return dims


def _params(text: str) -> int:
    """A row's "Param #": a whole number below ``MAX_ROW_PARAMS``."""
    digits = text.replace(",", "").strip() or "0"
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 13 or int(digits) > MAX_ROW_PARAMS:
        raise ValueError(f"expected a layer's parameters below {MAX_ROW_PARAMS:,}, received {text.strip()[:30]!r}")
    return int(digits)


@dataclass(frozen=True)
class SummaryReading:
    """What was read from the text, and how sure the wiring is."""

    profile: ModelProfile
    connected: bool  # wiring read from "Connected to" (else: a chain)
    connections: int = 0
    ambiguous_connections: int = 0  # cut names that matched several earlier layers
    assumed_activations: int = 0  # Activation rows whose name did not say the function
    assumed_activation: str = "relu"


@dataclass
class _Row:
    name: str
    name_cut: bool
    layer_type: str
    dims: tuple[int, ...]
    params: int
    sources: list[tuple[str, bool]]  # (name or its beginning, was it cut)


def parse_summary(text: str, name: str = "pasted summary", activation: str = "relu",
                  input_shape: tuple[int, ...] | None = None) -> ModelProfile:
    """Reads ``model.summary()`` text into a ``ModelProfile`` (see ``read_summary``)."""
    return read_summary(text, name, activation, input_shape).profile


def parse_shape(text: str) -> tuple[int, ...] | None:
    """``"224, 224, 3"`` -> ``(224, 224, 3)``; empty -> ``None``; raises ``ValueError`` otherwise."""
    parts = [p for p in re.split(r"[\s,x×()]+", text or "") if p]
    if not parts:
        return None
    if len(parts) > 4 or not all(p.isascii() and p.isdigit() for p in parts):
        raise ValueError(f"Expected up to 4 positive integers such as 224, 224, 3. Received: {text[:40]!r}")
    shape = tuple(int(p) for p in parts)
    if any(d < 1 or d > 65536 for d in shape) or math.prod(shape) > 2**31:
        raise ValueError(f"Each dimension must be between 1 and 65536. Received: {text[:40]!r}")
    return shape


def read_summary(text: str, name: str = "pasted summary", activation: str = "relu",
                 input_shape: tuple[int, ...] | None = None) -> SummaryReading:
    """Reads ``model.summary()`` text: a chain, or a functional model with its wiring.

    Args:
        text: what ``model.summary()`` printed (Keras 2 or 3).
        name: the profile's name.
        activation: the function assumed for ``Activation`` rows whose name does not
            say it (``conv1_relu`` does, ``activation_3`` does not).
        input_shape: the input without the batch, for tables with no InputLayer row
            (Keras prints none for a Sequential model); ignored when the table has one.

    Raises:
        ValueError: when no layer rows are found, a row reads from a layer that is not
            an earlier row, the parameters do not add up, or the text is too long.
    """
    if not isinstance(text, str):
        raise ValueError("Expected the text of model.summary().")
    if len(text) > MAX_SUMMARY_CHARS:
        raise ValueError(f"The text is {len(text):,} characters; the limit is {MAX_SUMMARY_CHARS:,}.")
    connected = "Connected to" in text
    rows = _box_rows(text) if "│" in text else _line_rows(text, connected)
    if not rows:
        raise ValueError("No layer rows found: paste the table printed by model.summary(), "
                         "rows like 'conv1 (Conv2D)   (None, 112, 112, 64)   9,472'.")
    if len(rows) > MAX_LAYERS:
        raise ValueError(f"More than {MAX_LAYERS} layers.")
    if rows[0].layer_type != "InputLayer":
        if input_shape is None:
            raise ValueError("The table has no InputLayer row (Keras prints none for a Sequential model): give the "
                             "input shape without the batch, e.g. 224, 224, 3.")
        if not input_shape or any(not isinstance(d, int) or d < 1 for d in input_shape):
            raise ValueError(f"The input shape must be positive integers. Received: {input_shape!r}")
        rows.insert(0, _Row("input", False, "InputLayer", tuple(input_shape), 0, []))
    reading = _build(rows, connected, name, activation)
    total = _TOTAL.search(text)
    if total and int(total.group(1).replace(",", "")) != reading.profile.total_params:
        raise ValueError("The rows' parameters do not add up to 'Total params': is part of the table missing "
                         "(the Japanese blog post on GPU memory elides the middle of VGG16's)?")
    return reading


def _line_rows(text: str, connected: bool) -> list[_Row]:
    """Keras 2 (and Keras 3 chains): one line per layer; with "Connected to", the layer's
    sources follow on its line and on lines of their own. Without it, a chain."""
    rows: list[_Row] = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            rows.append(_Row(m.group("name"), False, m.group("type"), _dims(m.group("shape")),
                             _params(m.group("params")), []))
            if len(rows) > MAX_LAYERS:
                break
            line = line[m.end():]
        if connected and rows:
            rows[-1].sources.extend((s, False) for s in _KERAS2_SOURCE.findall(line))
    if not connected:
        for previous, row in zip(rows, rows[1:]):
            if row.layer_type != "InputLayer":
                row.sources.append((previous.name, False))
    return rows


_CELL_NAME = re.compile(r"^(?P<name>[^\s(…]+)(?P<cut>…)?(?:\s*\((?P<type>[A-Za-z_]\w*)(?P<tcut>…)?\)?)?$")
_KERAS2_SOURCE = re.compile(r"'(?P<name>[^'\[\s]+)\[\d+\]\[\d+\]'")


def _box_rows(text: str) -> list[_Row]:
    """Keras 3: rows between '├' rules, each cell possibly over several lines; a table
    without a "Connected to" column is a chain (each row reads the one before)."""
    rows: list[_Row] = []
    cells: list[list[str]] | None = None
    for line in [*text.splitlines(), "└"]:
        stripped = line.strip()
        if stripped.startswith("│"):
            parts = [p.strip() for p in stripped.split("│")[1:-1]]
            if len(parts) not in (3, 4):  # a chain has no "Connected to" column
                raise ValueError(f"Expected the columns layer, shape, parameters (and connected to): {stripped[:120]!r}")
            cells = cells or [[], [], [], []]
            for column, part in zip(cells, parts):
                if part:
                    column.append(part)
        elif stripped.startswith(("├", "└")) and cells is not None:
            rows.append(_box_row(cells))
            cells = None
            if len(rows) > MAX_LAYERS:
                break
    return rows


def _box_row(cells: list[list[str]]) -> _Row:
    label = " ".join(cells[0])
    m = _CELL_NAME.match(label)
    if m is None or m.group("type") is None:
        raise ValueError(f"Cannot read the layer and its type from {label[:120]!r}.")
    layer_type = m.group("type") + ("…" if m.group("tcut") else "")
    sources = []
    entries = [e.strip() for line in cells[3] for e in line.split(", ")]  # wide tables: "a[0][0], b[0][0]"
    for entry in entries:
        if entry in ("-", ""):
            continue
        cut = entry.endswith("…")
        entry = entry.rstrip("…")
        head = entry.split("[", 1)[0]
        sources.append((head, cut and "[" not in entry))
    return _Row(m.group("name"), bool(m.group("cut")), layer_type, _dims(" ".join(cells[1])),
                _params(" ".join(cells[2])), sources)


def _full_type(shown: str, input_rank: int) -> str:
    """A type cut by the table's width ("GlobalAveragePoolin…"), completed from the known
    Keras types that begin with it; between 1D/2D/3D variants the input's rank decides."""
    from calc.facts.layers import LAYER_RULES

    if not shown.endswith("…"):
        return shown
    matches = [t for t in LAYER_RULES if t.startswith(shown[:-1])]
    if len(matches) > 1:
        matches = [t for t in matches if t.endswith(f"{input_rank - 1}D")] or matches
    return matches[0] if len(matches) == 1 else shown


def _weights(row: _Row) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The parameter count as variables: one block, except where the layer type says more."""
    channels = row.dims[-1] if row.dims else 0
    if row.layer_type == "BatchNormalization" and channels and row.params % channels == 0:
        # gamma, beta trainable (either may be off: scale=False, center=False); moving
        # mean and variance not: 4C, 3C or 2C parameters.
        per = row.params // channels
        if 2 <= per <= 4:
            return (channels,) * (per - 2), (channels, channels)
    if row.layer_type == "Normalization":
        return (), ((row.params,) if row.params else ())  # mean, variance, count: statistics, not trained
    return ((row.params,) if row.params else ()), ()


# Activation layers print no function; their names usually carry it (conv1_relu, ...).
_NAMED_FUNCTIONS = ("relu6", "leaky_relu", "relu", "hard_swish", "hard_silu", "swish", "silu", "gelu", "elu", "selu",
                    "hard_sigmoid", "sigmoid", "tanh", "softmax", "softplus", "mish")


def _activation_from_name(layer_name: str) -> str | None:
    lowered = layer_name.lower()
    return next((f for f in _NAMED_FUNCTIONS if f in lowered), None)


def _build(rows: list[_Row], connected: bool, name: str, activation: str) -> SummaryReading:
    from calc.facts.layers import is_known_layer_type

    elements: list[int] = []
    ranks: list[int] = []
    defined: list[tuple[str, bool, int]] = []  # (name, cut, output tensor id)
    consumed: set[int] = set()
    layers: list[LayerStats] = []
    input_ids: list[int] = []
    connections = ambiguous = guessed = 0
    for row in rows:
        elements.append(math.prod(row.dims))
        ranks.append(len(row.dims))
        t = len(elements) - 1
        if row.layer_type == "InputLayer":
            input_ids.append(t)
            defined.append((row.name, row.name_cut, t))
            continue
        sources = []
        for source, cut in row.sources:
            tensor, several = _resolve(source, cut, defined, row.name)
            connections += 1
            ambiguous += several
            sources.append(tensor)
        if not sources:  # a functional row with no inputs listed reads the row before it
            sources.append(defined[-1][2])
        consumed.update(sources)
        row.layer_type = _full_type(row.layer_type, ranks[sources[0]])
        trainable, frozen = _weights(row)
        function = "linear"
        if row.layer_type == "Activation":
            named = _activation_from_name(row.name)
            if named is None:
                function, guessed = activation, guessed + 1
            else:
                function = named
        layers.append(LayerStats(row.name + ("…" if row.name_cut else ""), row.layer_type, tuple(sources), (t,),
                                 (row.dims,), trainable, frozen, activation=function))
        defined.append((row.name, row.name_cut, t))
    outputs = tuple(t for _, _, t in defined if t not in consumed and t not in input_ids) or (len(elements) - 1,)
    unknown = tuple(sorted({layer.layer_type for layer in layers if not is_known_layer_type(layer.layer_type)}))
    first_input = rows[0].dims
    profile = ModelProfile(name=name, input_shape=first_input, layers=tuple(layers), tensor_elements=tuple(elements),
                           input_ids=tuple(input_ids), output_ids=outputs, unknown_layer_types=unknown)
    return SummaryReading(profile, connected, connections if connected else 0, ambiguous, guessed, activation)


def _resolve(source: str, cut: bool, defined: list[tuple[str, bool, int]], reader: str) -> tuple[int, bool]:
    """The tensor an input name refers to; ``True`` when several earlier layers fit a cut name."""
    exact = [t for n, ncut, t in defined if n == source and not ncut and not cut]
    if exact:
        return exact[-1], False
    fits = [t for n, ncut, t in defined
            if (cut and n.startswith(source)) or (ncut and source.startswith(n)) or (n == source and (cut or ncut))]
    if not fits:
        raise ValueError(f"Layer {reader!r} reads from {source + ('…' if cut else '')!r}, which is not an earlier row "
                         "of the table.")
    return fits[-1], len(fits) > 1
