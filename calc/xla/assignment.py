"""XLA's buffer assignment of a compiled program, read from its protocol buffer, and replayed.

``memory_analysis().serialized_buffer_assignment_proto`` (JAX's compiled program) is an
``xla.BufferAssignmentProto`` (``xla/service/hlo.proto``): every logical buffer (a value one
instruction defines, with its size), the allocations they are placed in (the entry's
parameters, the outputs, the preallocated temporaries), and the heap simulator's trace of the
temporaries: each buffer allocated and freed in the order the program runs its instructions.
Replaying the trace gives the moment the live temporaries are largest and the values live then.

Pure Python: the protocol buffer's wire format is read here (no generated classes, no JAX),
so the parent and the tests read the same bytes the compile child got.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field of one message, in order: an int (varint, fixed) or bytes."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            length, i = _varint(buf, i)
            value, i = buf[i:i + length], i + length
        elif wire == 1:
            value, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wire == 5:
            value, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ValueError(f"unsupported protocol buffer wire type {wire}")
        yield number, value


def _ints(value: int | bytes) -> list[int]:
    """A repeated integer field's entry: one varint, or a packed run of them."""
    if isinstance(value, int):
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = _varint(value, i)
        out.append(v)
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass(frozen=True)
class LogicalBuffer:
    """One value of the program: what an instruction defines at one index of its output."""

    id: int
    size: int
    instruction_id: int
    instruction_name: str
    shape_index: tuple[int, ...]


@dataclass(frozen=True)
class Allocation:
    """One block of device memory the program is given before it runs."""

    index: int
    size: int
    is_parameter: bool
    parameter_number: int
    maybe_live_out: bool
    is_thread_local: bool
    is_constant: bool
    buffers: tuple[int, ...]  # logical buffer ids placed in it
    aliased_with_output: bool = False  # a parameter the program's output reuses (donated state)
    color: int = 0  # the memory it lives in: 0 the device's, HOST_MEMORY_SPACE the host's

    @property
    def is_temporary(self) -> bool:
        """Preallocated scratch of the program: neither an argument, an output, a constant nor thread-local."""
        return not (self.is_parameter or self.maybe_live_out or self.is_constant or self.is_thread_local)


HOST_MEMORY_SPACE = 5  # xla::Layout::kHostMemorySpace

ALLOC, FREE, SHARE_WITH = 0, 1, 2


@dataclass(frozen=True)
class Event:
    kind: int  # ALLOC, FREE, SHARE_WITH
    buffer_id: int
    instruction_name: str  # the instruction the program runs when it happens


@dataclass(frozen=True)
class Trace:
    allocation: int  # the allocation whose buffers it places
    events: tuple[Event, ...]


@dataclass(frozen=True)
class BufferAssignment:
    buffers: dict[int, LogicalBuffer]
    allocations: tuple[Allocation, ...]
    traces: tuple[Trace, ...]


def _location(buf: bytes) -> tuple[str, int, tuple[int, ...]]:
    name, instruction, index = "", -1, []
    for number, value in fields(buf):
        if number == 2 and isinstance(value, bytes):
            name = value.decode()
        elif number == 4 and isinstance(value, int):
            instruction = value
        elif number == 3:
            index += _ints(value)
    return name, instruction, tuple(index)


def _logical_buffer(buf: bytes) -> LogicalBuffer:
    ident = size = 0
    where: tuple[str, int, tuple[int, ...]] = ("", -1, ())
    for number, value in fields(buf):
        if number == 1 and isinstance(value, int):
            ident = value
        elif number == 2 and isinstance(value, int):
            size = value
        elif number == 3 and isinstance(value, bytes):
            where = _location(value)
    return LogicalBuffer(ident, size, where[1], where[0], where[2])


def _allocation(buf: bytes) -> Allocation:
    values: dict[int, int] = {}
    assigned: list[int] = []
    for number, value in fields(buf):
        if number == 9 and isinstance(value, bytes):
            assigned += [v for n, v in fields(value) if n == 1 and isinstance(v, int)]
        elif isinstance(value, int):
            values[number] = value
    return Allocation(index=values.get(1, 0), size=values.get(2, 0), is_parameter=bool(values.get(5, 0)),
                      parameter_number=_signed(values.get(6, 0)), maybe_live_out=bool(values.get(7, 0)),
                      is_thread_local=bool(values.get(3, 0)), is_constant=bool(values.get(12, 0)),
                      buffers=tuple(assigned), aliased_with_output=bool(values.get(13, 0)),
                      color=values.get(8, 0))


def _event(buf: bytes) -> Event:
    kind = buffer = 0
    name = ""
    for number, value in fields(buf):
        if number == 1 and isinstance(value, int):
            kind = value
        elif number == 2 and isinstance(value, int):
            buffer = value
        elif number == 4 and isinstance(value, bytes):
            name = value.decode()
    return Event(kind, buffer, name)


def _trace(buf: bytes) -> Trace:
    events, allocation = [], 0
    for number, value in fields(buf):
        if number == 1 and isinstance(value, bytes):
            events.append(_event(value))
        elif number == 3 and isinstance(value, int):
            allocation = value
    return Trace(allocation, tuple(events))


def read_assignment(buf: bytes) -> BufferAssignment:
    """The buffer assignment a ``BufferAssignmentProto``'s bytes describe."""
    buffers: dict[int, LogicalBuffer] = {}
    allocations, traces = [], []
    for number, value in fields(buf):
        if not isinstance(value, bytes):
            continue
        if number == 1:
            b = _logical_buffer(value)
            buffers[b.id] = b
        elif number == 3:
            allocations.append(_allocation(value))
        elif number == 4:
            traces.append(_trace(value))
    return BufferAssignment(buffers, tuple(allocations), tuple(traces))


@dataclass(frozen=True)
class TracePeak:
    """The moment a trace's live buffers are largest: their bytes, which they are, and the instruction run then."""

    live_bytes: int
    live: tuple[int, ...]  # logical buffer ids, in the order they were allocated
    instruction_name: str
    event_index: int


def trace_peak(trace: Trace, buffers: dict[int, LogicalBuffer]) -> TracePeak:
    """Replays ``trace``: a buffer is live from its ALLOC to its FREE; one that shares another's memory
    (SHARE_WITH) adds nothing. The first moment the live bytes are largest, and the buffers live then."""
    def replay(stop: int | None) -> tuple[int, int, dict[int, int]]:
        live: dict[int, int] = {}
        total = best = best_at = 0
        for i, event in enumerate(trace.events):
            if stop is not None and i > stop:
                break
            if event.kind == ALLOC:
                live[event.buffer_id] = buffers[event.buffer_id].size
                total += live[event.buffer_id]
            elif event.kind == SHARE_WITH:
                live[event.buffer_id] = 0
            elif event.kind == FREE:
                total -= live.pop(event.buffer_id, 0)
            if total > best:
                best, best_at = total, i
        return best, best_at, live

    best, at, _ = replay(None)
    _, _, live = replay(at)
    return TracePeak(best, tuple(b for b, size in live.items() if size), trace.events[at].instruction_name if
                     trace.events else "", at)


@dataclass(frozen=True)
class Instruction:
    """One instruction of the compiled module: what the peak's reader needs of it."""

    id: int
    name: str
    opcode: str
    op_name: str  # the JAX op name of its metadata ("jit(train_step)/jvp(conv1)/conv_general_dilated"), or ""
    target: str  # a custom call's target ("__cudnn$convForward"), or ""
    operands: tuple[int, ...] = ()  # the ids of its operands


def _instruction(buf: bytes) -> Instruction:
    ident, name, opcode, op_name, target = 0, "", "", "", ""
    operands: list[int] = []
    for number, value in fields(buf):
        if number == 35 and isinstance(value, int):
            ident = value
        elif number == 36:
            operands += _ints(value)
        elif isinstance(value, bytes):
            if number == 1:
                name = value.decode()
            elif number == 2:
                opcode = value.decode()
            elif number == 28:
                target = value.decode()
            elif number == 7:  # OpMetadata: op_name = 2
                op_name = next((v.decode() for n, v in fields(value) if n == 2 and isinstance(v, bytes)), "")
    return Instruction(ident, name, opcode, op_name, target, tuple(operands))


def read_module(buf: bytes) -> dict[int, Instruction]:
    """Every instruction of an ``HloModuleProto``, of every computation, by id."""
    out: dict[int, Instruction] = {}
    for number, value in fields(buf):
        if number == 3 and isinstance(value, bytes):  # HloComputationProto: instructions = 2
            for n, v in fields(value):
                if n == 2 and isinstance(v, bytes):
                    instruction = _instruction(v)
                    out[instruction.id] = instruction
    return out


@dataclass(frozen=True)
class CompiledMemory:
    """The device memory a compiled program is given, as ``memory_analysis()`` reports it."""

    argument_bytes: int
    output_bytes: int
    alias_bytes: int  # of the arguments, what the outputs reuse
    temp_bytes: int


def compiled_memory(assignment: BufferAssignment) -> CompiledMemory:
    """What ``memory_analysis()`` of the compiled program reports, from its buffer assignment.

    JAX's compile-only client answers it from the same ``BufferAssignmentProto``, each allocation
    counted once (``CompiledMemoryStats::PopulateBufferStatsFromAllocations``, XLA's
    ``xla/pjrt/compiled_memory_stats.cc``): an entry parameter's size as an argument (and as an
    alias when the output reuses it), a possibly live-out allocation's as an output, a preallocated
    temporary's as a temporary. Allocations in the host's memory are left out (none in a
    training step's plan)."""
    device = [a for a in assignment.allocations if a.color != HOST_MEMORY_SPACE]
    return CompiledMemory(argument_bytes=sum(a.size for a in device if a.is_parameter),
                          output_bytes=sum(a.size for a in device if a.maybe_live_out),
                          alias_bytes=sum(a.size for a in device if a.is_parameter and a.aliased_with_output),
                          temp_bytes=sum(a.size for a in device if a.is_temporary))


def hlo_assignment(buf: bytes) -> BufferAssignment:
    """The buffer assignment of an ``HloProto`` (what ``--xla_dump_hlo_as_proto`` writes after
    optimizations), its module left unread."""
    for number, value in fields(buf):
        if number == 3 and isinstance(value, bytes):
            return read_assignment(value)
    raise ValueError("the dumped module carries no buffer assignment")


def read_hlo_proto(buf: bytes) -> tuple[dict[int, Instruction], BufferAssignment]:
    """An ``HloProto`` (what ``--xla_dump_hlo_as_proto`` writes after optimizations): the module's
    instructions and its buffer assignment."""
    module, assignment = b"", b""
    for number, value in fields(buf):
        if number == 1 and isinstance(value, bytes):
            module = value
        elif number == 3 and isinstance(value, bytes):
            assignment = value
    if not assignment:
        raise ValueError("the dumped module carries no buffer assignment")
    return read_module(module), read_assignment(assignment)
