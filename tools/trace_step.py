"""What is alive at a measured step's peak, op by op, from TensorFlow's profiler.

    python tools/trace_step.py SUBSTRING [--top 15] [--layers] [--save FILE.json]
    python tools/trace_step.py SUBSTRING --table SUBSTRING [SUBSTRING ...]
    python tools/trace_step.py SUBSTRING --history [--save FILE.json]

For the first committed validation case whose id contains SUBSTRING, runs the
measurement protocol once in a fresh process (``calc.workers.measure.measure_once`` with
``trace=True``: the measured step is recorded by ``tf.profiler`` at host tracer level
3, whose allocator events name the op, shape and role of every tracked request) and
prints:

- the measured peak, what was resident before the step, and the engine's prediction
  with its parts;
- the allocations made during the step that are alive at the peak, summed by part of
  the step (forward ops, ``gradient_tape/`` ops, everything else: optimizer updates,
  casts of variables, the loss) and by op kind (the op's last two name parts, numbers
  dropped), largest first;
- the op whose allocation set the peak.

``--history`` traces from the model's build on and replays the real requests through
``calc.engine.allocator.BFC`` after swapped histories (the engine's resident pools among them),
then lists what the first step requests beyond the measured one, and the optimizer's
zeros buffers (one per distinct slot shape) against the ``assign_add`` copies made of
them before the measured step.

The events only cover requests of 256 KiB and up (those the allocator's statistics
count). ``--save`` writes the raw events for further study.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from dataclasses import replace

from calc.engine.counting import raw_bytes as _raw_bytes
from calc.engine.ledger import OPT, W
from calc.engine.walk import simulate as _simulate
from calc.estimate import estimate_memory, plan_step
from calc.profiles import get_profile
from calc.validation import CPU_DATA, CUSTOM_DATA, case_id, cases
from calc.workers.measure import measure_once

MIB = 2 ** 20


def kind_of(op: str) -> str:
    """The op's name below its layer, numbers dropped: ``model/layer/batchnorm/mul_1`` -> ``batchnorm/mul``."""
    parts = op.split("/")
    below = parts[3:] if parts[0] == "gradient_tape" else parts[2:]
    return "/".join(re.sub(r"_\d+$", "", p) for p in below) or op


def layer_of(op: str, names: set[str] = frozenset()) -> str:
    """The layer an op belongs to: the first part of its name (numbers dropped) that names a
    layer in ``names``, which finds layers inside a nested backbone
    (``model/backbone/layer/op``); without ``names``, the part below the model."""
    parts = op.split("/")
    for p in parts[:-1]:
        name = re.sub(r"_\d+$", "", p)
        if name in names:
            return name
    i = 2 if parts[0] == "gradient_tape" else 1
    return re.sub(r"_\d+$", "", parts[i]) if len(parts) > i else ""


def part_of(op: str, model_prefixes: set[str]) -> str:
    first = op.split("/", 1)[0]
    if first == "gradient_tape":
        return "backward (gradient_tape/)"
    if first in model_prefixes:
        return "forward"
    return f"other ({first}/)"


# Ops named after an optimizer or the loss, not after the model.
NOT_THE_MODEL = re.compile(r"^(gradient_tape|sgd|adam|adamw|nadam|adamax|rmsprop|rm_sprop|adagrad|ada_grad|adadelta|"
                           r"ada_delta|ada_max|ftrl|lion|lamb|adafactor|loss_scale_optimizer|compile_loss|keras)",
                           re.I)


def find_case(substring: str):
    """The first validation case (catalogue, then own models) whose id contains ``substring``."""
    match = next(((s, c) for s, c in (*cases(CPU_DATA), *cases(CUSTOM_DATA)) if substring in case_id(s, c)), None)
    if match is None:
        raise SystemExit(f"no validation case contains {substring!r}")
    return match


def walk_requested(profile, config) -> tuple[int, int, str]:
    """The engine's walk at its peak in requested bytes (no chunk effects): (total, weights and slots, phase)."""
    b = config.per_replica_batch
    return max((sum(m.fixed) + sum(n * _raw_bytes(size * b) for hist in m.per_sample for size, n in hist),
                m.fixed[W] + m.fixed[OPT], m.phase) for m in _simulate(profile, config, record=True).moments)


def live_at_peak(events: list[list]) -> tuple[int, list[list], list]:
    """(index of the peak event, the step's allocations alive then, that event)."""
    live: dict[int, list] = {}
    best, best_live, best_ev = -1, [], None
    peak_bytes = -1
    for i, ev in enumerate(events):
        kind, nbytes, in_use, addr = ev[:4]
        if kind == "a":
            live[addr] = ev
            if in_use > peak_bytes:
                peak_bytes, best, best_live, best_ev = in_use, i, list(live.values()), ev
        else:
            live.pop(addr, None)
    return best, best_live, best_ev


def table(substrings: list[str]) -> None:
    """One line per case: the walk's requested bytes against the step's, and the chunk overhead."""
    print(f"{'case':70s} {'peak':>7s} {'step req.':>9s} {'walk req.':>9s} {'walk err':>8s} {'chunks +':>8s} "
          f"{'engine err':>10s}")
    for sub in substrings:
        spec, config = find_case(sub)
        result = measure_once(spec, config, trace=True)
        profile = get_profile(spec)
        total, resident, _ = walk_requested(profile, config)
        _, live, _ = live_at_peak(result["allocations"])
        given, asked = sum(e[1] for e in live), sum(e[7] for e in live)
        walk = total - resident
        predicted = estimate_memory(profile, config).peak_bytes
        print(f"{case_id(spec, config):70s} {result['peak_bytes'] / MIB:7.1f} {asked / MIB:9.1f} {walk / MIB:9.1f} "
              f"{100 * (walk / asked - 1):+7.1f}% {100 * (given / asked - 1):+7.1f}% "
              f"{100 * (predicted / result['peak_bytes'] - 1):+9.1f}%", flush=True)


INIT_OPS = ("AddV2", "Mul", "StatelessRandomUniformV2", "StatelessRandomNormalV2", "StatelessTruncatedNormalV2",
            "Sqrt", "zeros")


def history(sub: str, save: str | None) -> None:
    """Replays a process's real requests through ``calc.engine.allocator.BFC``, whole and in swapped parts."""
    from calc.engine.allocator import BFC
    from calc.engine.resident import resident_pool as _resident_pool
    from calc.engine.resident import resident_requests as _resident_requests
    from calc.engine.training import trainable_flags as _trainable_flags
    from calc.engine.training import variable_elements as _variable_elements

    spec, config = find_case(sub)
    result = measure_once(spec, config, trace="history")
    if save:
        with open(save, "w") as f:
            json.dump({"case": case_id(spec, config), "result": result}, f)
    before, step = result["allocations_before"], result["allocations"]
    # The warm-up starts with the first allocation of the model's forward pass (not an
    # initializer's, not the optimizer's).
    warm = next((i for i, e in enumerate(before) if e[0] == "a" and "/" in e[4] and not NOT_THE_MODEL.match(e[4])
                 and "nitializ" not in e[4] and e[4].split("/")[-1] not in INIT_OPS), len(before))

    def peak(pool, parts) -> float:
        live: dict = {}
        for k, events in enumerate(parts):
            if k == len(parts) - 1:
                pool.reset_peak()
            for e in events:
                if e[0] == "a":
                    live[e[3]] = pool.alloc(e[7])
                elif e[3] in live:
                    pool.free(live.pop(e[3]))
        return pool.peak / MIB

    profile = get_profile(spec)

    def shared_zeros_pool():
        """The engine's drawn history, but one slot buffer per distinct size (the real zeros)."""
        requests = _resident_requests(profile, config)
        n_variables = len(_variable_elements(profile, _trainable_flags(profile, config)[0])[0])
        seen: set[int] = set()
        slots = [n for n in requests[n_variables:] if not (n in seen or seen.add(n))]
        return _resident_pool(profile, config, True, requests=requests[:n_variables] + slots)

    rows = [
        ("real build + real warm-up (the process)", peak(BFC(), [before[:warm], before[warm:], step])),
        ("real build, no warm-up", peak(BFC(), [before[:warm], step])),
        ("real build + the measured step as the warm-up", peak(BFC(), [before[:warm], step, step])),
        ("engine's resident pool (drawn) + real warm-up", peak(_resident_pool(profile, config, True), [before[warm:], step])),
        ("engine's resident pool (one value) + real warm-up",
         peak(_resident_pool(profile, config, False), [before[warm:], step])),
        ("engine's resident pool (drawn), no warm-up", peak(_resident_pool(profile, config, True), [step])),
        ("engine's variables + one zeros buffer per slot size + real warm-up", peak(shared_zeros_pool(),
                                                                                  [before[warm:], step])),
    ]
    print(f"{case_id(spec, config)}: measured {result['peak_bytes'] / MIB:.1f} MiB; "
          f"the real requests replayed through calc.engine.allocator.BFC after each history:")
    for label, value in rows:
        print(f"  {label:66s} {value:8.1f}")
    extra: dict[str, int] = defaultdict(int)
    for events, sign in ((before[warm:], 1), (step, -1)):
        for e in events:
            if e[0] == "a":
                extra[re.sub(r"_\d+$", "", e[4])] += sign * e[7]
    diff = sorted(((v, k) for k, v in extra.items() if abs(v) >= MIB), reverse=True)
    print("  requested by the warm-up minus the measured step, by op: "
          + ", ".join(f"{k or '(unnamed)'} {v / MIB:+.1f} MiB" for v, k in diff[:6]))
    # The optimizer's slots start as one zeros buffer per distinct shape, shared by every slot
    # of that shape; the first assign_add on a shared buffer copies it (the last holder
    # updates in place).
    # (The profiler names no shape for the zeros, so both are grouped by size.)
    zeros = Counter(e[7] for e in before if e[0] == "a" and e[4].endswith("/Initializer/zeros"))
    copies = Counter(e[7] for e in before if e[0] == "a" and "AssignAddVariableOp" in e[4])
    later = sum(1 for e in step if e[0] == "a" and "AssignAddVariableOp" in e[4])
    print("  the slots' zeros buffers by size, and the assign_add copies made before the measured step: "
          + ", ".join(f"{n / MIB:.2f} MiB: {zeros[n]} -> {copies[n]}" for n in sorted({*zeros, *copies}, reverse=True))
          + f"; assign_add copies in the measured step: {later}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("substring")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="whose kernels run the step (gpu: on a GPU machine, tools/gpu_tf)")
    parser.add_argument("--save")
    parser.add_argument("--layers", action="store_true", help="also list the layers that differ most")
    parser.add_argument("--table", nargs="+", metavar="SUBSTRING",
                        help="more cases, one line each: the step's requested bytes at its peak against the "
                             "walk's, and what whole chunks add")
    parser.add_argument("--history", action="store_true",
                        help="trace from the model's build on, and replay the real requests through the "
                             "simulated allocator after swapped histories")
    args = parser.parse_args()
    if args.history:
        history(args.substring, args.save)
        return
    if args.table:
        table([args.substring, *args.table])
        return
    spec, config = find_case(args.substring)
    config = replace(config, device=args.device)
    result = measure_once(spec, config, trace=True)
    events = result["allocations"]
    if args.save:
        with open(args.save, "w") as f:
            json.dump({"case": case_id(spec, config), "result": result}, f)
    profile = get_profile(spec)
    predicted = estimate_memory(profile, config)
    print(f"{case_id(spec, config)}")
    print(f"  measured peak {result['peak_bytes'] / MIB:.1f} MiB, resident before the step "
          f"{result['current_before_bytes'] / MIB:.1f}, step {(result['peak_bytes'] - result['current_before_bytes']) / MIB:.1f}")
    print(f"  engine {predicted.peak_bytes / MIB:.1f} MiB at {predicted.peak_phase}: "
          + ", ".join(f"{k} {v / MIB:.1f}" for k, v in predicted.components().items() if v))
    total, resident, phase = walk_requested(profile, config)
    print(f"  engine's walk in requested bytes (no chunk effects): peak {total / MIB:.1f} MiB at {phase}, "
          f"of which the step {(total - resident) / MIB:.1f} (weights and slots {resident / MIB:.1f})")
    if not events:
        print("  no allocator events were recorded")
        return
    index, live, ev = live_at_peak(events)
    firsts = {e[4].split("/", 1)[0] for e in events if e[0] == "a" and e[4] and not e[4].startswith("gradient_tape")}
    model_prefixes = {p for p in firsts if any(e[4].startswith(p + "/") and e[6] == "output" for e in events)
                      and not NOT_THE_MODEL.match(p)}
    print(f"  {len(events)} events; peak at event {index}: {ev[2] / MIB:.1f} MiB in use after "
          f"{ev[4]} {ev[5]} ({ev[1] / MIB:.2f} MiB, {ev[6]})")
    total = sum(e[1] for e in live)
    asked = sum(e[7] for e in live)
    print(f"  alive at the peak, made during the step: {total / MIB:.1f} MiB in {len(live)} allocations "
          f"(requested {asked / MIB:.1f}: whole chunks add {100 * (total / asked - 1) if asked else 0:.1f} %)")
    by_part: dict[str, int] = defaultdict(int)
    by_kind: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for e in live:
        part = part_of(e[4], model_prefixes)
        by_part[part] += e[1]
        k = by_kind[(part, kind_of(e[4]))]
        k[0] += e[1]
        k[1] += 1
    for part, nbytes in sorted(by_part.items(), key=lambda kv: -kv[1]):
        print(f"    {part:34s} {nbytes / MIB:9.1f} MiB")
    plan = plan_step(profile, config)
    types = {layer.name: layer.layer_type for layer in profile.layers}
    engine_kept = {layer.name: kept * config.per_replica_batch
                   for layer, kept in zip(profile.layers, plan.kept_per_sample)}
    measured_kept: dict[str, int] = defaultdict(int)
    layer_names = set(types)
    for e in live:
        if part_of(e[4], model_prefixes) == "forward":
            measured_kept[layer_of(e[4], layer_names)] += e[1]
    by_type: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for name in set(measured_kept) | {n for n, k in engine_kept.items() if k}:
        t = by_type[types.get(name, "(not a layer)")]
        t[0] += measured_kept.get(name, 0)
        t[1] += engine_kept.get(name, 0)
        t[2] += 1
    print("  forward allocations alive at the peak against what the engine's layers keep, by layer type:")
    for lt, (m, k, n) in sorted(by_type.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1])):
        print(f"    {lt:28s} measured {m / MIB:8.1f}  engine {k / MIB:8.1f}  ({n} layers)")
    print(f"  by op kind (top {args.top}):")
    for (part, kind), (nbytes, count) in sorted(by_kind.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"    {part[:8]:8s} {kind:46s} {nbytes / MIB:9.1f} MiB in {count}")
    if args.layers:
        print(f"  layers, measured minus engine (top {args.top}):")
        diffs = sorted(set(measured_kept) | set(engine_kept),
                       key=lambda n: -abs(measured_kept.get(n, 0) - engine_kept.get(n, 0)))
        for name in diffs[: args.top]:
            print(f"    {name:36s} {types.get(name, '?'):22s} measured {measured_kept.get(name, 0) / MIB:7.1f}  "
                  f"engine {engine_kept.get(name, 0) / MIB:7.1f}")


if __name__ == "__main__":
    main()
