"""The parameters a saved model's config declares, counted before Keras builds anything.

Keras 3 writes each built layer's input shape into its config (``build_config``, and the
shapes of the tensors in ``inbound_nodes``), so the weights of the layers that hold nearly
all of a model's parameters can be counted from the text: Dense, the convolutions,
Embedding and the recurrent layers. Building a model allocates every weight, so a 728-byte
``config.json`` declaring Input(40000) -> Dense(40000) asks for 6 GB; reading such a file
is refused from this count (``calc.uploads``) instead of being stopped at the reader's
memory budget after seconds of a core. A layer whose input shape the config does not say
counts nothing: the count is a floor, never more than Keras would build.
"""

from __future__ import annotations

from math import prod
from typing import Any

CONVOLUTIONS = {"Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose"}
DEPTHWISE = {"DepthwiseConv1D", "DepthwiseConv2D", "SeparableConv1D", "SeparableConv2D"}
RECURRENT_GATES = {"SimpleRNN": 1, "LSTM": 4, "GRU": 3}


def declared_params(config: object) -> int:
    """The parameters of every layer config in ``config`` whose input shape it states."""
    total, stack = 0, [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("class_name"), str) and isinstance(node.get("config"), dict):
                total += layer_params(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return total


def layer_params(layer: dict[str, Any]) -> int:
    """One layer's weights from its class, its config and its input shape (0 where unknown)."""
    kind, c = layer["class_name"], layer["config"]
    if kind == "Embedding":
        return _int(c.get("input_dim")) * _int(c.get("output_dim"))
    shape = input_shape(layer)
    if not shape:
        return 0
    channels = shape[0] if c.get("data_format") == "channels_first" and len(shape) > 1 else shape[-1]
    bias = 1 if c.get("use_bias", True) else 0
    if kind == "Dense":
        units = _int(c.get("units"))
        return channels * units + bias * units
    if kind in CONVOLUTIONS:
        filters, kernel = _int(c.get("filters")), prod(_ints(c.get("kernel_size")))
        return kernel * channels // max(1, _int(c.get("groups")) or 1) * filters + bias * filters
    if kind in DEPTHWISE:
        multiplier = _int(c.get("depth_multiplier")) or 1
        depthwise = prod(_ints(c.get("kernel_size"))) * channels * multiplier
        filters = _int(c.get("filters"))
        return depthwise + channels * multiplier * filters + bias * (filters or channels * multiplier)
    if kind in RECURRENT_GATES:
        units = _int(c.get("units"))
        second_bias = bias if kind == "GRU" and c.get("reset_after", True) else 0
        return RECURRENT_GATES[kind] * units * (channels + units + bias + second_bias)
    return 0


def input_shape(layer: dict[str, Any]) -> list[int]:
    """The layer's first input's shape without the batch: its ``build_config``, else the first
    tensor of its first inbound node; [] when neither is there or a dimension is unknown."""
    build = layer.get("build_config")
    shape = build.get("input_shape") if isinstance(build, dict) else None
    if not _is_shape(shape):
        nodes = layer.get("inbound_nodes")
        args = nodes[0].get("args") if isinstance(nodes, list) and nodes and isinstance(nodes[0], dict) else None
        first = args[0] if isinstance(args, list) and args else None
        tensor = first.get("config") if isinstance(first, dict) else None
        shape = tensor.get("shape") if isinstance(tensor, dict) else None
    if not isinstance(shape, list) or not _is_shape(shape):
        return []
    dims = shape[1:]
    if any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in dims):
        return []
    return dims


def _is_shape(value: object) -> bool:
    return isinstance(value, list) and len(value) >= 2 and not isinstance(value[0], list)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _ints(value: object) -> list[int]:
    if isinstance(value, list):
        return [_int(v) for v in value]
    return [_int(value)]
