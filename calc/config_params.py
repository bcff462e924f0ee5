"""The parameters a saved model's config declares, counted before Keras builds anything.

Keras 3 writes each built layer's input shape into its config (``build_config``, and the
shapes of the tensors in ``inbound_nodes``), so the weights of the layers that hold nearly
all of a model's parameters can be counted from the text: Dense, the convolutions,
Embedding and the recurrent layers. Building a model allocates every weight, so a 728-byte
``config.json`` declaring Input(40000) -> Dense(40000) asks for 6 GB; reading such a file
is refused from this count (``calc.uploads``) instead of being stopped at the reader's
memory budget after seconds of a core. In a Sequential model a layer may come without its
input shape (a file can leave ``build_config`` out); Keras then builds it from the layers
before it, and so does this count, following the shape from the ``InputLayer`` through the
layers whose output shape it knows. A layer whose input shape neither says counts nothing:
the count is a floor, never more than Keras would build.
"""

from __future__ import annotations

from math import prod
from typing import Any

CONVOLUTIONS = {"Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose"}
DEPTHWISE = {"DepthwiseConv1D", "DepthwiseConv2D", "SeparableConv1D", "SeparableConv2D"}
RECURRENT_GATES = {"SimpleRNN": 1, "LSTM": 4, "GRU": 3}


IDENTITY = {"Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise",
            "GaussianDropout", "AlphaDropout", "Activation", "ReLU", "LeakyReLU", "PReLU", "ELU", "Softmax",
            "BatchNormalization", "LayerNormalization", "GroupNormalization", "UnitNormalization",
            "ActivityRegularization", "Masking", "Identity", "Rescaling", "Normalization"}
POOLING = {"MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "AveragePooling1D", "AveragePooling2D",
           "AveragePooling3D"}


def declared_params(config: object) -> int:
    """The parameters of every layer config in ``config`` whose input shape it states, or that a
    Sequential model's layers before it imply."""
    total, stack = 0, [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            layers = node.get("config", {}).get("layers") if isinstance(node.get("config"), dict) else None
            if node.get("class_name") == "Sequential" and isinstance(layers, list):
                total += _sequential_params(layers, stack)
                continue
            if isinstance(node.get("class_name"), str) and isinstance(node.get("config"), dict):
                total += layer_params(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return total


def _sequential_params(layers: list, stack: list) -> int:
    """A Sequential model's layers in order, each counted with the shape the layers before it
    give where its config states none; a nested model is left to ``declared_params``."""
    total, shape = 0, None
    for layer in layers:
        if not (isinstance(layer, dict) and isinstance(layer.get("class_name"), str)
                and isinstance(layer.get("config"), dict)):
            shape = None
            continue
        if isinstance(layer["config"].get("layers"), list):  # a model inside: counted as any model is
            stack.append(layer)
            shape = None
            continue
        stack.extend(layer["config"].values())  # a wrapped layer (Bidirectional, TimeDistributed) inside
        shape = input_shape(layer) or shape
        total += layer_params(layer, shape)
        shape = output_shape(layer, shape)
    return total


def layer_params(layer: dict[str, Any], shape: list[int] | None = None) -> int:
    """One layer's weights from its class, its config and its input shape (its own, else
    ``shape``; 0 where neither is known)."""
    kind, c = layer["class_name"], layer["config"]
    if kind == "Embedding":
        return _int(c.get("input_dim")) * _int(c.get("output_dim"))
    shape = input_shape(layer) or shape
    if not shape or not _int(shape[-1]):
        return 0
    if kind == "EinsumDense":
        return _einsum_params(c, shape)
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


def _einsum_params(c: dict[str, Any], shape: list[int]) -> int:
    """EinsumDense's kernel and bias, each dimension named by a letter of its equation and sized
    by the input (without the batch) or by ``output_shape``; 0 where one is not known."""
    equation = c.get("equation")
    if not isinstance(equation, str) or "..." in equation or equation.count(",") != 1 or "->" not in equation:
        return 0
    inputs, rest = equation.split(",")
    kernel, output = rest.split("->")
    out_dims = _output_dims(c) or []
    sizes: dict[str, int] = {}
    if len(inputs) == len(shape) + 1:
        sizes.update(zip(inputs[1:], shape))
    if len(out_dims) == len(output) - 1:
        sizes.update((k, _int(v)) for k, v in zip(output[1:], out_dims) if k not in sizes and _int(v))
    kernel_dims = [sizes.get(k, 0) for k in kernel]
    bias_axes = c.get("bias_axes") or ""
    bias_dims = [sizes.get(k, 0) for k in bias_axes] if isinstance(bias_axes, str) else [0]
    if not all(kernel_dims) or not all(bias_dims):
        return 0
    return prod(kernel_dims) + (prod(bias_dims) if bias_axes else 0)


def _output_dims(c: dict[str, Any]) -> list | None:
    """EinsumDense's ``output_shape`` as a list (Keras writes one dimension as a number)."""
    out = c.get("output_shape")
    return [out] if isinstance(out, int) else out if isinstance(out, list) else None


def output_shape(layer: dict[str, Any], shape: list[int] | None) -> list[int] | None:
    """The shape (without the batch) a layer gives in a Sequential model, where its class and config
    say it; None where unknown. Only the channels-last layout is followed."""
    kind, c = layer["class_name"], layer["config"]
    if kind == "InputLayer":
        given = c.get("batch_shape") or c.get("batch_input_shape")
        return [d if _int(d) else 0 for d in given[1:]] if _is_shape(given) else None
    if not shape or c.get("data_format") == "channels_first":
        return None
    if kind in IDENTITY:
        return shape
    if kind == "Dense":
        return shape[:-1] + [_int(c.get("units"))]
    if kind == "EinsumDense":
        dims = _output_dims(c)
        return [d if _int(d) else 0 for d in dims] if dims else None
    if kind == "Embedding":
        return shape + [_int(c.get("output_dim"))]
    if kind in RECURRENT_GATES:
        units = _int(c.get("units"))
        return shape[:-1] + [units] if c.get("return_sequences") else [units]
    if kind == "Flatten":
        return [prod(shape)] if all(shape) else None
    if kind == "Reshape":
        target = c.get("target_shape")
        if not isinstance(target, list) or not all(isinstance(d, int) for d in target):
            return None
        if target.count(-1) == 1 and all(shape) and prod(d for d in target if d != -1) > 0:
            return [prod(shape) // prod(d for d in target if d != -1) if d == -1 else d for d in target]
        return target if all(d > 0 for d in target) else None
    if kind.startswith("Global") and "Pooling" in kind:
        return [1] * (len(shape) - 1) + [shape[-1]] if c.get("keepdims") else [shape[-1]]
    if kind in CONVOLUTIONS or kind in DEPTHWISE or kind in POOLING:
        return _spatial(kind, c, shape)
    return None


def _spatial(kind: str, c: dict[str, Any], shape: list[int]) -> list[int]:
    """A convolution's or pooling's output: each spatial side from its window, stride and padding
    (0 where not known), then the channels."""
    rank = len(shape) - 1
    window = _ints(c.get("pool_size") if kind in POOLING else c.get("kernel_size"))
    strides = _ints(c.get("strides")) if c.get("strides") is not None else window if kind in POOLING else [1]
    dilation = _ints(c.get("dilation_rate")) if c.get("dilation_rate") is not None else [1]
    window, strides, dilation = (v * rank if len(v) == 1 else v for v in (window, strides, dilation))
    sides = []
    for i, side in enumerate(shape[:-1]):
        k, st, dl = (window[i], strides[i], dilation[i]) if i < min(len(window), len(strides), len(dilation)) \
            else (0, 0, 0)
        if not (side and k and st and dl) or "Transpose" in kind:
            sides.append(0)
        elif c.get("padding") in ("same", "causal"):
            sides.append(-(-side // st))
        else:
            sides.append(max(0, (side - dl * (k - 1) - 1) // st + 1))
    if kind in POOLING:
        channels = shape[-1]
    elif kind in DEPTHWISE:
        channels = _int(c.get("filters")) or shape[-1] * (_int(c.get("depth_multiplier")) or 1)
    else:
        channels = _int(c.get("filters"))
    return sides + [channels]


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
