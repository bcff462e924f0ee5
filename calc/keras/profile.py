"""A built functional ``keras.Model`` read into a ``ModelProfile``: its per-layer ledger.

The model's graph is walked in run order, nested models inlined; a ``MultiHeadAttention``
call becomes the steps TensorFlow runs. Unknown layer types are listed, not dropped.
"""

from __future__ import annotations

import math
from typing import Any

from calc.facts.layers import is_known_layer_type
from calc.types import LayerStats, ModelProfile


def _elements(shape: Any) -> int:
    dims = [d for d in tuple(shape)[1:]]
    if any(d is None for d in dims):
        raise ValueError(
            f"Every dimension but the batch must be known to estimate memory. Received shape {tuple(shape)}"
        )
    return int(math.prod(dims))


def _activation_name(op: Any) -> str:
    fn = getattr(op, "activation", None)
    if fn is None:
        return "linear"
    return getattr(fn, "__name__", type(fn).__name__)


def is_functional(op: Any) -> bool:
    return hasattr(op, "_nodes_by_depth") and hasattr(op, "inputs")


def as_functional(op: Any) -> Any:
    """The graph of a functional model, or of a built Sequential (its ``_functional``)."""
    if is_functional(op):
        return op
    inner = getattr(op, "_functional", None)
    return inner if inner is not None and is_functional(inner) else None


def _detail(op: Any) -> str:
    parts = []
    for attr in ("kernel_size", "pool_size", "strides", "rate", "axis", "approximate"):
        value = getattr(op, attr, None)
        if value is not None and not callable(value):
            parts.append(f"{attr}={value}")
    # Only where they differ from the defaults, so that no Keras application's ledger changes.
    dilation = getattr(op, "dilation_rate", None)
    if isinstance(dilation, (tuple, list)) and any(d != 1 for d in dilation):
        parts.append(f"dilation_rate={tuple(dilation)}")
    if getattr(op, "padding", None) == "causal":
        parts.append("padding=causal")
    return " ".join(parts)


def _attention_steps(op: Any, node: Any, tensor_map: dict[int, int], out_ids: tuple[int, ...],
                     synthetic: Any) -> list[tuple] | None:
    """A ``MultiHeadAttention`` call as the steps TensorFlow runs (Keras 3.15), or None.

    One layer on the graph, but the tensors its backward pass keeps are not a multiple of
    its input or output: the attention probabilities grow with the square of the sequence.
    So the call becomes its steps (``keras/src/layers/attention/multi_head_attention.py``),
    each a row of the ledger with its own tensors: the query, key and value projections
    (``EinsumDense``, their weights), the scores (``Einsum``, which keeps both inputs), the
    softmax and the context (``Einsum``), then the output projection. Without dropout the
    layer calls ``ops.dot_product_attention``, which TensorFlow computes as the scores in
    the compute dtype, a float32 softmax (``AttentionSoftmax``, kept for its gradient) and a
    cast back (``Cast``: a new tensor only under mixed precision) that the context keeps.
    With dropout the query is scaled first (the scaled copy is what the scores keep), the
    softmax runs in the compute dtype and ``Dropout`` keeps its mask. Only rank-3 inputs
    (batch, sequence, features) over the default attention axis; anything else stays one
    row and is reported as an unknown type.
    """
    if type(op).__name__ != "MultiHeadAttention" or len(out_ids) != 1:
        return None
    try:
        return _attention_step_rows(op, node, tensor_map, out_ids, synthetic)
    except (AttributeError, TypeError, ValueError, KeyError, IndexError):
        return None  # a Keras whose layer differs: one row, reported as an unknown type


def _attention_step_rows(op: Any, node: Any, tensor_map: dict[int, int], out_ids: tuple[int, ...],
                         synthetic: Any) -> list[tuple] | None:
    args, kwargs = list(node.arguments.args), dict(node.arguments.kwargs)
    query = args[0] if args else kwargs.get("query")
    value = args[1] if len(args) > 1 else kwargs.get("value")
    if kwargs.get("return_attention_scores") or query is None or value is None:
        return None
    key = args[2] if len(args) > 2 else kwargs.get("key")
    key = value if key is None else key
    ids = [tensor_map[id(t)] for t in (query, key, value)]  # a miss: the caller's fallback
    if any(len(t.shape) != 3 for t in (query, key, value)) or tuple(op._attention_axes or (1,)) != (1,):
        return None
    heads, key_dim = int(op.num_heads), int(op.key_dim)
    value_dim = int(op.value_dim or key_dim)
    t_len, s_len = int(query.shape[1]), int(value.shape[1])
    q_id, k_id, v_id = ids
    name = op.name
    q = synthetic((t_len, heads, key_dim))
    k = synthetic((s_len, heads, key_dim))
    v = synthetic((s_len, heads, value_dim))
    steps: list[tuple] = [
        (f"{name}/query", "EinsumDense", (q_id,), (q,), ((t_len, heads, key_dim),), op._query_dense),
        (f"{name}/key", "EinsumDense", (k_id,), (k,), ((s_len, heads, key_dim),), op._key_dense),
        (f"{name}/value", "EinsumDense", (v_id,), (v,), ((s_len, heads, value_dim),), op._value_dense),
    ]
    scores_shape = (heads, t_len, s_len)
    scores = synthetic(scores_shape)
    if float(op.dropout or 0.0) > 0.0:
        scaled = synthetic((t_len, heads, key_dim))
        probs, dropped = synthetic(scores_shape), synthetic(scores_shape)
        steps += [
            (f"{name}/scale", "Rescaling", (q,), (scaled,), ((t_len, heads, key_dim),), None),
            (f"{name}/scores", "Einsum", (k, scaled), (scores,), (scores_shape,), None),
            (f"{name}/softmax", "Softmax", (scores,), (probs,), (scores_shape,), None),
            (f"{name}/dropout", "Dropout", (probs,), (dropped,), (scores_shape,), None),
        ]
        attended = dropped
    else:
        probs, cast = synthetic(scores_shape), synthetic(scores_shape)
        steps += [
            (f"{name}/scores", "Einsum", (q, k), (scores,), (scores_shape,), None),
            (f"{name}/softmax", "AttentionSoftmax", (scores,), (probs,), (scores_shape,), None),
            (f"{name}/cast", "Cast", (probs,), (cast,), (scores_shape,), None),
        ]
        attended = cast
    context = synthetic((t_len, heads, value_dim))
    steps += [
        (f"{name}/context", "Einsum", (attended, v), (context,), ((t_len, heads, value_dim),), None),
        (f"{name}/output", "EinsumDense", (context,), out_ids, (tuple(int(d) for d in node.outputs[0].shape[1:]),),
         op._output_dense),
    ]
    return steps


def _step_stats(op: Any, step: tuple, seen_weights: set[int], float32_compute: bool,
                in_backbone: bool) -> LayerStats:
    """One ledger row: a step of ``op`` (the operation itself, or one of its attention steps).

    A weight already counted by an earlier row (a shared layer) is not counted again;
    the row says it shares weights.
    """
    name, layer_type, ins, outs, shapes, owner = step
    trainable: list[int] = []
    frozen: list[int] = []
    shares = False
    for v in getattr(owner, "weights", []) if owner is not None else []:
        if id(v) in seen_weights:
            shares = True
            continue
        seen_weights.add(id(v))
        size = int(math.prod(v.shape))
        (trainable if v.trainable else frozen).append(size)
    return LayerStats(
        name=name,
        layer_type=layer_type,
        input_ids=tuple(ins),
        output_ids=outs,
        output_shapes=shapes,
        trainable_weight_elements=tuple(trainable),
        non_trainable_weight_elements=tuple(frozen),
        activation=_activation_name(op) if owner is op else "linear",
        float32_compute=float32_compute or layer_type == "AttentionSoftmax",
        in_backbone=in_backbone,
        shares_weights=shares,
        detail=_detail(op) if owner is op else "",
    )


def walk_model(model: Any,
               backbone: Any = None) -> tuple[list[tuple[Any, LayerStats]], list[int], list[int], list[int]]:
    """Flattens a functional model (nested models inlined) into ledger rows in run order.

    Returns ``(rows, tensor elements, input ids, output ids)``; each row is the Keras
    operation and its ``LayerStats``.
    """
    import keras

    elements: list[int] = []
    rows: list[tuple[Any, LayerStats]] = []
    seen_weights: set[int] = set()
    global_policy = keras.config.dtype_policy().name

    def new_tensor(kt: Any) -> int:
        elements.append(_elements(kt.shape))
        return len(elements) - 1

    def synthetic(shape: tuple[int, ...]) -> int:
        elements.append(int(math.prod(shape)))
        return len(elements) - 1

    def visit(fn: Any, tensor_map: dict[int, int], in_backbone: bool) -> None:
        for depth in sorted(fn._nodes_by_depth, reverse=True):
            for node in fn._nodes_by_depth[depth]:
                op = node.operation
                if op is None or node.is_input:
                    continue
                in_ids = tuple(tensor_map[id(x)] for x in node.input_tensors)
                graph = as_functional(op)
                if graph is not None:
                    inner = {id(x): t for x, t in zip(graph.inputs, in_ids)}
                    visit(graph, inner, in_backbone or op is backbone)
                    for outer, inner_out in zip(node.outputs, graph.outputs):
                        tensor_map[id(outer)] = inner[id(inner_out)]
                    continue
                out_ids = tuple(new_tensor(kt) for kt in node.outputs)
                for kt, t in zip(node.outputs, out_ids):
                    tensor_map[id(kt)] = t
                policy = getattr(op, "dtype_policy", None)
                f32 = bool(
                    policy is not None
                    and policy.compute_dtype == "float32"
                    and policy.name != global_policy
                )
                steps = _attention_steps(op, node, tensor_map, out_ids, synthetic)
                if steps is None:
                    steps = [(op.name, type(op).__name__, in_ids, out_ids,
                              tuple(tuple(kt.shape[1:]) for kt in node.outputs), op)]
                for step in steps:
                    rows.append((op, _step_stats(op, step, seen_weights, f32, in_backbone)))

    model = as_functional(model) or model
    if not is_functional(model):
        raise ValueError(
            "Only functional and Sequential Keras models can be profiled (subclassed models "
            f"have no graph to read). Received: {type(model).__name__}"
        )
    tensor_map: dict[int, int] = {}
    input_ids = [new_tensor(x) for x in model.inputs]
    for x, t in zip(model.inputs, input_ids):
        tensor_map[id(x)] = t
    visit(model, tensor_map, False)
    output_ids = [tensor_map[id(x)] for x in model.outputs]
    return rows, elements, input_ids, output_ids


def profile_model(model: Any, name: str | None = None, backbone: Any = None) -> ModelProfile:
    """Reads a built functional ``keras.Model`` into a ``ModelProfile``.

    Args:
        model: a functional or Sequential Keras model with known input shapes.
        name: the profile's name (default: the model's).
        backbone: a nested model whose layers are marked ``in_backbone``.

    Returns:
        The per-layer ledger; unknown layer types are listed, not dropped.
    """
    rows, elements, input_ids, output_ids = walk_model(model, backbone)
    layers = tuple(stats for _, stats in rows)
    unknown = sorted({layer.layer_type for layer in layers if not is_known_layer_type(layer.layer_type)})
    out_shape = tuple(model.outputs[0].shape[1:])
    # Sparse integer labels: one int32 per sample per output position.
    label_elements = int(math.prod(out_shape[:-1])) if len(out_shape) > 1 else 1
    return ModelProfile(
        name=name or model.name,
        input_shape=tuple(int(d) for d in model.inputs[0].shape[1:]),
        layers=layers,
        tensor_elements=tuple(elements),
        input_ids=tuple(input_ids),
        output_ids=tuple(output_ids),
        label_elements=label_elements,
        unknown_layer_types=tuple(unknown),
    )
