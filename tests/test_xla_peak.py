"""What fills XLA's plan at its peak (calc/xla/assignment.py, calc/xla/peak.py).

A buffer assignment is written here in the protocol buffer's wire format by hand (field
numbers of ``xla/service/hlo.proto``), so the reader is checked against bytes it did not make.
"""

from __future__ import annotations

import sys

from calc.xla.assignment import (ALLOC, FREE, HOST_MEMORY_SPACE, SHARE_WITH, CompiledMemory, compiled_memory,
                                 fields, hlo_assignment, read_assignment, trace_peak)


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def message(*pairs: tuple[int, int | bytes]) -> bytes:
    return b"".join(field(n, v) for n, v in pairs)


def logical_buffer(ident: int, size: int, name: str, index: tuple[int, ...] = ()) -> bytes:
    location = message((2, name.encode()), (4, 100 + ident), *([(3, b"".join(varint(i) for i in index))] if index
                                                               else []))
    return message((1, ident), (2, size), (3, location))


def allocation(index: int, size: int, buffers: list[int], *, parameter: int | None = None,
               live_out: bool = False, aliased: bool = False, thread_local: bool = False, constant: bool = False,
               color: int = 0) -> bytes:
    pairs: list[tuple[int, int | bytes]] = [(1, index), (2, size)]
    if parameter is not None:
        pairs += [(5, 1), (6, parameter)]
    if live_out:
        pairs.append((7, 1))
    pairs += [(n, 1) for n, on in ((13, aliased), (3, thread_local), (12, constant)) if on]
    if color:
        pairs.append((8, color))
    pairs += [(9, message((1, b), (2, 0), (3, 0))) for b in buffers]
    return message(*pairs)


def event(kind: int, buffer: int, instruction: str, canonical: int = 0) -> bytes:
    pairs: list[tuple[int, int | bytes]] = [(2, buffer), (3, b"main"), (4, instruction.encode())]
    if kind:
        pairs.insert(0, (1, kind))
    if canonical:
        pairs.append((5, canonical))
    return message(*pairs)


def test_the_wire_format_is_read_as_written_packed_and_unpacked():
    raw = message((1, 7), (2, b"abc"), (3, 300), (3, b"".join(varint(v) for v in (1, 2, 300))))
    assert list(fields(raw)) == [(1, 7), (2, b"abc"), (3, 300), (3, b"\x01\x02\xac\x02")]


def test_the_trace_is_replayed_to_the_moment_the_live_temporaries_are_largest():
    """Buffers a (100), b (50), c (80) in one temporary allocation: a and b live together (150), a is
    freed, c comes while b lives (130), d shares c's memory and adds nothing; the peak is a and b, at
    the instruction that made b."""
    buffers = [logical_buffer(1, 100, "conv.1"), logical_buffer(2, 50, "fusion.2", (0,)),
               logical_buffer(3, 80, "conv.3"), logical_buffer(4, 80, "bitcast.4"),
               logical_buffer(5, 4096, "Arg_0.1")]
    trace = message(*[(1, e) for e in (event(ALLOC, 1, "conv.1"), event(ALLOC, 2, "fusion.2"),
                                        event(FREE, 1, "conv.3"), event(ALLOC, 3, "conv.3"),
                                        event(SHARE_WITH, 4, "bitcast.4", canonical=3), event(FREE, 4, "x"),
                                        event(FREE, 2, "x"), event(FREE, 3, "x"))], (3, 1))
    raw = message(*[(1, b) for b in buffers], (3, allocation(0, 4096, [5], parameter=0)),
                  (3, allocation(1, 160, [1, 2, 3, 4])), (4, trace))
    assignment = read_assignment(raw)
    assert [a.is_temporary for a in assignment.allocations] == [False, True]
    assert assignment.allocations[0].parameter_number == 0 and assignment.allocations[1].buffers == (1, 2, 3, 4)
    assert assignment.buffers[2].shape_index == (0,) and assignment.buffers[2].instruction_name == "fusion.2"
    assert assignment.buffers[2].instruction_id == 102
    peak = trace_peak(assignment.traces[0], assignment.buffers)
    assert (peak.live_bytes, peak.live, peak.instruction_name) == (150, (1, 2), "fusion.2")


def test_the_compiled_memory_counts_each_allocation_as_xlas_memory_analysis_does():
    """An entry parameter is an argument (and an alias where the output reuses it), a possibly
    live-out allocation an output (a donated parameter is both), a preallocated temporary a
    temporary; thread-local and constant allocations are none of them, nor is the host's memory.
    Read from a dumped HloProto's field 3, its module (field 1) left unread."""
    allocations = [allocation(0, 1000, [], parameter=0, live_out=True, aliased=True),  # donated weights
                   allocation(1, 300, [], parameter=1),  # the batch
                   allocation(2, 40, [], live_out=True),  # the loss
                   allocation(3, 5000, []),  # the temporaries
                   allocation(4, 8, [], constant=True), allocation(5, 16, [], thread_local=True),
                   allocation(6, 7000, [], color=HOST_MEMORY_SPACE)]  # a host-offloaded temporary
    proto = message((1, b"\xff\xff not a module"), (3, message(*[(3, a) for a in allocations])))
    assert compiled_memory(hlo_assignment(proto)) == CompiledMemory(argument_bytes=1300, output_bytes=1040,
                                                                    alias_bytes=1000, temp_bytes=5000)


def instruction(ident: int, name: str, opcode: str, op_name: str = "", target: str = "",
                operands: tuple[int, ...] = ()) -> bytes:
    pairs: list[tuple[int, int | bytes]] = [(1, name.encode()), (2, opcode.encode()), (35, ident)]
    if op_name:
        pairs.append((7, message((1, b"op"), (2, op_name.encode()))))
    if target:
        pairs.append((28, target.encode()))
    if operands:
        pairs.append((36, b"".join(varint(o) for o in operands)))
    return message(*pairs)


# One value of each kind a step's temporaries hold, by the op name Keras's JAX step gives it.
STEP = "jit(train_step)"
VALUES = [  # (id, name, opcode, op name, custom call target, operands, defined at index, bytes)
    (1, "Arg_0.1", "parameter", "state[0][0]", "", (), (), 0),
    (2, "Arg_1.2", "parameter", "data[0]", "", (), (), 0),
    (3, "cudnn-conv.3", "custom-call", f"{STEP}/jvp(conv1)/conv_general_dilated", "__cudnn$convForward", (2, 1),
     (0,), 4000),
    (4, "cudnn-conv.3", "custom-call", f"{STEP}/jvp(conv1)/conv_general_dilated", "__cudnn$convForward", (2, 1),
     (1,), 700),
    (5, "fusion.5", "fusion", f"{STEP}/jvp(conv1_relu)/max", "", (3,), (), 3000),
    (6, "fusion.6", "fusion", f"{STEP}/transpose(jvp(head))/dot_general", "", (5,), (), 200),
    (7, "fusion.7", "fusion", f"{STEP}/transpose(jvp(jvp()))/checkpoint/rematted_computation/block/add", "", (5,),
     (), 500),
    (8, "fusion.8", "fusion", f"{STEP}/adam/mul", "", (6,), (), 60),
    (9, "wrapped_transpose.9", "fusion", "state[0][0]", "", (1,), (), 90),
    (10, "input_transpose_fusion.10", "fusion", "", "", (1, 2), (1,), 80),
    (11, "copy.11", "copy", "", "", (6,), (), 30),
]


def hlo_proto(peak_free: int = 0) -> bytes:
    module = message((3, message((1, b"main"), *[(2, instruction(i, n, o, on, t, ops))
                                                 for i, n, o, on, t, ops, _, _ in VALUES
                                                 if n not in {v[1] for v in VALUES if v[0] < i}])))
    buffers = [message((1, i), (2, size), (3, message((2, n.encode()), (4, i if n != "cudnn-conv.3" else 3),
                                                      *([(3, varint(index[0]))] if index else []))))
               for i, n, _, _, _, _, index, size in VALUES if size]
    live = [i for i, *_, size in VALUES if size]
    events = [event(ALLOC, b, f"x.{b}") for b in live] + [event(FREE, b, "end") for b in live]
    temporaries = sum(size for *_, size in VALUES) + peak_free
    assignment = message(*[(1, b) for b in buffers], (3, allocation(0, 64, [], parameter=0)),
                         (3, allocation(1, temporaries, live)), (4, message(*[(1, e) for e in events])))
    return message((1, module), (3, assignment))


def test_each_value_at_the_peak_is_one_kind_of_one_layer_and_the_kinds_sum_to_the_temporaries():
    from calc.xla.peak import PeakExplained, explain

    out = explain(hlo_proto(peak_free=123), optimizer={"adam"}, state_layers={(0, 0): "conv1"},
                  leaf_layers={"conv1", "conv1_relu", "head", "block"})
    assert out["kinds"] == {"activations": 4000 + 3000 + 500, "gradients": 200, "optimizer": 60, "workspace": 700,
                            "layout_copies": 90 + 80, "other": 30, "packing": 123}
    assert out["temporaries_bytes"] == sum(out["kinds"].values()) == 8783
    layers = dict((name, per) for name, per in out["layers"])
    assert layers["conv1"] == {"activations": 4000, "workspace": 700, "layout_copies": 90}
    assert layers["(input batch)"] == {"layout_copies": 80}  # an unnamed fusion's second output: its second argument
    assert layers["block"] == {"activations": 500}  # recomputed under remat for the backward pass
    assert layers["head"] == {"gradients": 200} and layers["(optimizer update)"] == {"optimizer": 60}
    assert out["moment"] == {"instruction": "x.11", "layer": "(XLA)", "phase": ""}  # the last ALLOC
    explained = PeakExplained.of(out, 8783)
    assert explained is not None and explained.kind_bytes()["packing"] == 123
    assert PeakExplained.of(out, 8784) is None  # one that does not sum to XLA's own figure is not shown
    kept = explain(hlo_proto(), optimizer={"adam"}, layers_kept=2)
    assert [name for name, _ in kept["layers"]][-1] == "(other layers)" and len(kept["layers"]) == 3
    assert sum(sum(per.values()) for _, per in kept["layers"]) == kept["live_bytes"]


def test_a_card_s_dumped_step_is_summed_by_what_its_allocations_hold(tmp_path, monkeypatch):
    from tests.tools import load_tool

    dumps = load_tool("gpu_tf/xla_dumps")
    step = tmp_path / "ResNet50_b208"
    step.mkdir()
    (step / "module_0007.a_inference_one_step_on_data.sm_9.0_gpu_after_optimizations.hlo.pb").write_bytes(
        hlo_proto(peak_free=123))
    (step / "module_0003.a_inference_small.sm_9.0_gpu_after_optimizations.hlo.pb").write_bytes(b"")
    (step / "module_0007.a_inference_one_step_on_data.sm_9.0_gpu_after_optimizations-memory-usage-report.pb"
     ).write_bytes(b"\0" * 10_000)  # not a module: left alone
    (tmp_path / "nothing_compiled").mkdir()
    found = dumps.read_dumps(tmp_path)
    assert list(found) == ["ResNet50_b208"]
    summary = found["ResNet50_b208"]
    assert summary["module"].startswith("module_0007.") and summary["temporaries_bytes"] == 8783
    assert summary["argument_bytes"] == 64 and summary["output_only_bytes"] == 0
    assert summary["workspace_at_peak_bytes"] == 700 and summary["rematerialised_instructions"] == 0
    monkeypatch.setattr(sys.modules[__name__], "VALUES",
                        [(i, n + ".remat" if n.startswith("fusion.") else n, *rest) for i, n, *rest in VALUES])
    assert dumps.summary(hlo_proto())["rematerialised_instructions"] == 4  # fusion.5 to fusion.8, cloned by XLA
