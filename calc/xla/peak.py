"""What fills XLA's plan at its peak: the temporaries live then, by kind and by Keras layer.

XLA gives the compiled step one block of temporaries, as large as the most its values ever
need at once (plus what its heap layout cannot pack). Its buffer assignment (read by
``calc.xla.assignment`` from the module XLA dumps after optimizing it) traces every value in
the order the step runs, so the moment the live values are largest is known, and which values
they are. Each value's instruction carries the op name Keras's JAX step gave it, which says
where it comes from:

- ``jit(train_step)/jvp(LAYER)/...``: the forward pass of LAYER. Live at the peak, which comes
  in the backward pass, such a value is an **activation** kept for the backward pass (or, with
  remat, recomputed for it).
- ``jit(train_step)/transpose(jvp(LAYER))/...``: LAYER's backward pass: **gradients**, of the
  weights and of the activations in flight.
- ``jit(train_step)/OPTIMIZER/...`` (``adam``, ``sgd``, ...): the update: **optimizer** temporaries.
- the second result of a cuDNN convolution or a cuBLAS matmul: its **workspace**.
- ``state[...]`` / ``data[...]`` (the step's own arguments, by their place): a **layout copy** of a
  weight, an optimizer variable or the batch, in the layout a kernel wants.
- no op name (XLA's own copies and bookkeeping): **other**.

Every byte of the temporaries is in one kind: the live values at the peak by the rules above,
and ``packing``, the rest of the block (values the heap layout could not fit into the gaps
of others). The kinds sum to the temporaries XLA's memory analysis reports, to the byte.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from calc.xla.assignment import BufferAssignment, Instruction, read_hlo_proto, trace_peak

KINDS = ("activations", "gradients", "optimizer", "workspace", "layout_copies", "other", "packing")
PHASES = ("forward", "backward", "update", "")
EXPLAIN_FORMAT = 1
LAYERS_KEPT = 40  # layers named in an explanation, the largest at the peak; the rest are summed in OTHER_LAYERS
OTHER_LAYERS = "(other layers)"
_JVP = re.compile(r"jvp\(([^()/]*)\)")
REMAT_SCOPE = "rematted_computation"  # jax.checkpoint's forward, run again in the backward pass
_STATE = re.compile(r"^state\[(\d+)\]\[(\d+)\]")
_WORKSPACE_TARGETS = ("__cudnn$conv", "__cublas")


@dataclass(frozen=True)
class Origin:
    """Where one value comes from: its kind, the Keras layer (or a label in parentheses), the phase."""

    kind: str
    layer: str
    phase: str


def origin(instruction: Instruction | None, shape_index: tuple[int, ...], optimizer: frozenset[str],
           state_layers: dict[tuple[int, int], str], leaf_layers: frozenset[str],
           instructions: dict[int, Instruction] | None = None) -> Origin:
    """The kind, layer and phase of the value ``instruction`` defines at ``shape_index``.

    An instruction XLA made itself (no op name) that reads the step's own arguments (``state[...]``,
    ``data[...]``; a fusion that transposes several weights at once) is a layout copy of them: of
    its ``shape_index``-th such argument where it reads as many as it returns, else of the first."""
    if instruction is None:
        return Origin("other", "(XLA)", "")
    op_name = instruction.op_name
    if not op_name and instructions:
        arguments = [a for a in _arguments(instruction, instructions) if _STATE.match(a) or a.startswith("data[")]
        if arguments:
            op_name = arguments[shape_index[0]] if shape_index and shape_index[0] < len(arguments) else arguments[0]
    segments = op_name.split("/")
    phase = ""
    for segment in segments:
        if segment.startswith("transpose("):
            phase = "backward"
            break
        if segment.startswith("jvp("):
            phase = "forward"
            break
        if segment in optimizer:
            phase = "update"
            break
    if instruction.opcode == "custom-call" and shape_index[:1] and shape_index[0] >= 1 and \
            instruction.target.startswith(_WORKSPACE_TARGETS):
        return Origin("workspace", _layer(segments, leaf_layers), phase)
    if (state := _STATE.match(op_name)) is not None:
        return Origin("layout_copies", state_layers.get((int(state[1]), int(state[2])), "(state)"), "")
    if op_name.startswith("data["):
        return Origin("layout_copies", "(input batch)", "")
    if phase == "backward":
        # With remat, the backward pass runs the forward again ("rematted_computation"): those are activations.
        kind = "activations" if REMAT_SCOPE in segments else "gradients"
        return Origin(kind, _layer(segments, leaf_layers), phase)
    if phase == "forward":
        return Origin("activations", _layer(segments, leaf_layers), phase)
    if phase == "update":
        return Origin("optimizer", "(optimizer update)", phase)
    return Origin("other", "(XLA)", "")


def _arguments(instruction: Instruction, instructions: dict[int, Instruction], depth: int = 3) -> list[str]:
    """The op names of the step's arguments an instruction reads, through XLA's own unnamed
    instructions (bitcasts, tuple elements) up to ``depth`` steps back."""
    out: list[str] = []
    for ident in instruction.operands:
        operand = instructions.get(ident)
        if operand is None:
            continue
        if operand.op_name:
            out.append(operand.op_name)
        elif depth > 1:
            out += _arguments(operand, instructions, depth - 1)
    return out


def _layer(segments: list[str], leaf_layers: frozenset[str]) -> str:
    """The Keras layer an op name names: a segment that is one of the model's layers (a layer inside
    a backbone, or under remat's ``checkpoint``), else the first non-empty ``jvp(LAYER)``."""
    for segment in segments:
        if segment in leaf_layers:
            return segment
    for segment in segments:
        for name in _JVP.findall(segment):
            if name:
                return name
    return "(XLA)"


def explain(hlo_proto: bytes, *, optimizer: Iterable[str], state_layers: dict[tuple[int, int], str] | None = None,
            leaf_layers: Iterable[str] = (), layers_kept: int = LAYERS_KEPT) -> dict[str, Any]:
    """The temporaries of a compiled step (``HloProto`` bytes) at their peak, by kind and by layer.

    Args:
        hlo_proto: the module after optimizations with its buffer assignment.
        optimizer: the name scopes of Keras's optimizer update (``optimizer.name``: "adam"; a
            loss-scale optimizer's and its inner one's).
        state_layers: the layer of each state variable, by (group, index) in the step's state
            (``state[0][i]``: trainable variable i).
        leaf_layers: the model's layers that hold no layers.

    Returns:
        JSON-ready: ``temporaries_bytes`` (the block's size), ``live_bytes`` (the values live at its
        peak), ``kinds`` (bytes of each of ``KINDS``; they sum to ``temporaries_bytes``),
        ``moment`` (the instruction run at the peak, its layer and phase) and ``layers`` ([layer,
        {kind: bytes}] by the layer's bytes, largest first: ``layers_kept`` of them, the rest summed
        as ``OTHER_LAYERS``).
    """
    instructions, assignment = read_hlo_proto(hlo_proto)
    out = explain_assignment(instructions, assignment, optimizer=frozenset(optimizer),
                             state_layers=state_layers or {}, leaf_layers=frozenset(leaf_layers))
    out["layers"] = fold_layers(out["layers"], layers_kept)
    return out


def fold_layers(layers: list[list[Any]], kept: int) -> list[list[Any]]:
    """An explanation's ``layers`` ([layer, {kind: bytes}], largest first) with the first ``kept`` named
    and the rest summed by kind as ``OTHER_LAYERS`` (one already there is summed in too)."""
    if len(layers) <= kept:
        return layers
    rest: dict[str, int] = {}
    for _, per in layers[kept:]:
        for kind, nbytes in per.items():
            rest[kind] = rest.get(kind, 0) + nbytes
    return [*layers[:kept], [OTHER_LAYERS, rest]]


def explain_assignment(instructions: dict[int, Instruction], assignment: BufferAssignment, *,
                       optimizer: frozenset[str],
                       state_layers: dict[tuple[int, int], str], leaf_layers: frozenset[str]) -> dict[str, Any]:
    by_name = {i.name: i for i in instructions.values()}
    temporaries = [a for a in assignment.allocations if a.is_temporary]
    temporaries_bytes = sum(a.size for a in temporaries)
    in_temporaries = {b for a in temporaries for b in a.buffers}
    kinds = dict.fromkeys(KINDS, 0)
    layers: dict[str, dict[str, int]] = {}
    live_bytes, moment = 0, {"instruction": "", "layer": "", "phase": ""}
    traced = [t for t in assignment.traces if t.events and t.events[0].buffer_id in in_temporaries]
    if traced:
        trace = max(traced, key=lambda t: len(t.events))
        peak = trace_peak(trace, assignment.buffers)
        live_bytes = peak.live_bytes
        for ident in peak.live:
            buffer = assignment.buffers[ident]
            where = origin(instructions.get(buffer.instruction_id) or by_name.get(buffer.instruction_name),
                           buffer.shape_index, optimizer, state_layers, leaf_layers, instructions)
            kinds[where.kind] += buffer.size
            per = layers.setdefault(where.layer, {})
            per[where.kind] = per.get(where.kind, 0) + buffer.size
        at = origin(by_name.get(peak.instruction_name), (), optimizer, state_layers, leaf_layers, instructions)
        moment = {"instruction": peak.instruction_name, "layer": at.layer, "phase": at.phase}
    kinds["packing"] = temporaries_bytes - live_bytes
    if kinds["packing"] < 0:
        raise ValueError(f"the live values at the peak ({live_bytes:,} bytes) exceed the temporaries "
                         f"({temporaries_bytes:,} bytes)")
    ordered = sorted(layers.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    return {"format": EXPLAIN_FORMAT, "temporaries_bytes": temporaries_bytes, "live_bytes": live_bytes,
            "kinds": kinds, "moment": moment, "layers": [[name, per] for name, per in ordered]}


@dataclass(frozen=True)
class PeakExplained:
    """What fills a compiled plan's temporaries at their peak (``explain``'s answer as data)."""

    kinds: tuple[tuple[str, int], ...]  # (kind, bytes) in ``KINDS`` order; they sum to the temporaries
    moment_instruction: str
    moment_layer: str
    moment_phase: str  # "forward", "backward", "update", or "" (XLA's own copies)
    layers: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # (layer, ((kind, bytes), ...)), largest first

    @property
    def temporaries_bytes(self) -> int:
        return sum(nbytes for _, nbytes in self.kinds)

    def kind_bytes(self) -> dict[str, int]:
        return dict(self.kinds)

    @classmethod
    def of(cls, raw: Any, temporaries_bytes: int) -> PeakExplained | None:
        """From the child's ``peak``; None when absent, of another format, or not summing to
        ``temporaries_bytes`` (XLA's memory analysis of the same compile)."""
        try:
            if raw is None or raw.get("format") != EXPLAIN_FORMAT:
                return None
            kinds = tuple((kind, int(raw["kinds"].get(kind, 0))) for kind in KINDS)
            moment = raw["moment"]
            layers = tuple((str(name), tuple((k, int(v)) for k, v in per.items())) for name, per in raw["layers"])
            explained = cls(kinds, str(moment["instruction"]), str(moment["layer"]), str(moment["phase"]), layers)
        except (AttributeError, KeyError, TypeError, ValueError):
            return None
        return explained if explained.temporaries_bytes == temporaries_bytes else None

    def to_dict(self) -> dict[str, Any]:
        return {"kinds": dict(self.kinds),
                "moment": {"instruction": self.moment_instruction, "layer": self.moment_layer,
                           "phase": self.moment_phase},
                "layers": [[name, dict(per)] for name, per in self.layers]}
