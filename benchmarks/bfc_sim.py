"""Prototype: a BFC allocator simulation fed by the engine's walk (not used by the engine).

    python benchmarks/bfc_sim.py --selftest
    python benchmarks/bfc_sim.py cases            # validation cases, simulated vs measured vs engine
    python benchmarks/bfc_sim.py probe [--batch 16] [--size 112] [variant ...]

The allocator model follows tensorflow/tsl/framework/bfc_allocator.cc:
- requests rounded up to 256 bytes (kMinAllocationSize);
- 21 bins by size class (bin b holds free chunks of [256 * 2^b, 256 * 2^(b+1)), the last
  one everything larger); each bin ordered by (size, address);
- FindChunkPtr: from the request's bin upwards, the first (smallest, then lowest address)
  free chunk that fits; it is split only if it is at least twice the request or the
  remainder is at least 128 MiB (kMaxInternalFragmentation), else handed out whole;
- Extend when nothing fits: a new region of ``curr_region_allocation_bytes_`` (2 MiB at
  first with allow_growth; doubled until the request fits, else doubled after the
  allocation); regions are not coalesced (the CPU sub-allocator does not support it);
- Free: the chunk is merged with free neighbours in its region;
- ``bytes_in_use`` and its peak count whole chunk sizes.

With oneDNN on, TensorFlow's CPU allocator sends requests under 256 KiB to a separate
small-size allocator that the stats do not count: such requests are dropped here.

The allocation/free sequence of one step is recorded from the engine's own walk
(``calc.estimate._simulate``) by swapping in a recording ledger: every per-sample tensor
the walk adds or removes becomes an allocation or a free of ``size * batch`` bytes, the
moment transients (``extra_per_sample`` / ``extra_fixed`` of a snapshot) are allocated
and freed around the snapshot, and changes of the fixed components (gradients, early
optimizer temporaries, private fixed bytes) become blocks of their own. The measured
protocol is replayed: weights, then slots and a warm-up step, reset of the peak, the
measured step; the result is peak - current before the measured step, as the probes
report, plus the resident bytes for the validation cases.
"""

from __future__ import annotations

import bisect
import json
import os
import sys
from collections import defaultdict
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from probe_child import FROZEN_STAGE, FROZEN_STEP, FROZEN_VARIANTS, PREAMBLE  # noqa: E402

MIB = 1 << 20
K_MIN_ALLOCATION = 256
K_NUM_BINS = 21
K_MAX_INTERNAL_FRAGMENTATION = 128 << 20
UNTRACKED_BELOW = 262_144


# --------------------------------------------------------------------------- allocator


def _absorb(first, second) -> None:
    """Coalesces two adjacent free chunks: ``second`` (right after ``first``) joins it."""
    first.size += second.size
    first.next = second.next
    if second.next is not None:
        second.next.prev = first


@dataclass
class Chunk:
    ptr: int
    size: int
    region: int
    in_use: bool = False
    prev: "Chunk | None" = None
    next: "Chunk | None" = None
    requested: int = 0


def rounded(n: int) -> int:
    return -(-n // K_MIN_ALLOCATION) * K_MIN_ALLOCATION


def bin_for(size: int) -> int:
    v = size >> 8
    return min(K_NUM_BINS - 1, v.bit_length() - 1 if v else 0)


class BFC:
    def __init__(self, memory_limit: int = 1 << 40, allow_growth: bool = True,
                 initial_region: int = 2 << 20) -> None:
        self.memory_limit = memory_limit
        self.curr_region = rounded(min(memory_limit, initial_region)) if allow_growth else rounded(memory_limit)
        self.region_bytes = 0
        self.regions: list[int] = []  # sizes
        self.bins: list[list[tuple[int, int, Chunk]]] = [[] for _ in range(K_NUM_BINS)]
        self.next_ptr = 0
        self.in_use = 0
        self.peak = 0
        self.requested_in_use = 0

    # bins
    def _insert(self, c: Chunk) -> None:
        bisect.insort(self.bins[bin_for(c.size)], (c.size, c.ptr, c))

    def _remove(self, c: Chunk) -> None:
        b = self.bins[bin_for(c.size)]
        i = bisect.bisect_left(b, (c.size, c.ptr))
        assert b[i][2] is c
        del b[i]

    def _find(self, r: int) -> Chunk | None:
        for b in range(bin_for(r), K_NUM_BINS):
            entries = self.bins[b]
            i = bisect.bisect_left(entries, (r, -1))
            if i < len(entries):
                c = entries[i][2]
                del entries[i]
                if c.size >= 2 * r or c.size - r >= K_MAX_INTERNAL_FRAGMENTATION:
                    rest = Chunk(c.ptr + r, c.size - r, c.region, prev=c, next=c.next)
                    if c.next is not None:
                        c.next.prev = rest
                    c.next = rest
                    c.size = r
                    self._insert(rest)
                return c
        return None

    def _extend(self, r: int) -> bool:
        available = (self.memory_limit - self.region_bytes) // K_MIN_ALLOCATION * K_MIN_ALLOCATION
        if r > available:
            return False
        increased = False
        while r > self.curr_region:
            self.curr_region *= 2
            increased = True
        size = min(self.curr_region, available)
        if not increased:
            self.curr_region *= 2
        self.region_bytes += size
        self.regions.append(size)
        c = Chunk(self.next_ptr, size, len(self.regions) - 1)
        self.next_ptr += size + (1 << 30)  # regions are not adjacent
        self._insert(c)
        return True

    def alloc(self, nbytes: int) -> Chunk:
        r = rounded(max(1, nbytes))
        c = self._find(r)
        if c is None:
            if not self._extend(r):
                raise MemoryError(nbytes)
            c = self._find(r)
        c.in_use = True
        c.requested = nbytes
        self.in_use += c.size
        self.requested_in_use += nbytes
        self.peak = max(self.peak, self.in_use)
        return c

    def free(self, c: Chunk) -> None:
        assert c.in_use
        c.in_use = False
        self.in_use -= c.size
        self.requested_in_use -= c.requested
        n = c.next
        if n is not None and not n.in_use:
            self._remove(n)
            _absorb(c, n)
        p = c.prev
        if p is not None and not p.in_use:
            self._remove(p)
            _absorb(p, c)
            c = p
        self._insert(c)

    def reset_peak(self) -> None:
        self.peak = self.in_use


def selftest() -> None:
    a = BFC()
    x = a.alloc(1000)
    assert x.size == 1024 and a.regions == [2 << 20], (x.size, a.regions)  # 256-rounding, 2 MiB region, split
    a.free(x)
    assert a.in_use == 0 and len(a.bins[bin_for(2 << 20)]) == 1  # coalesced back to one chunk
    # a 75 MiB request: regions 2 MiB, then doubling to 128 MiB; 53 MiB left < 75 -> unsplit
    y = a.alloc(75 * MIB)
    assert a.regions == [2 << 20, 128 << 20] and y.size == 128 * MIB and a.peak == 128 * MIB
    a.free(y)
    # a 60 MiB request fits the 128 MiB chunk at >= 2x: split to 60 MiB
    z = a.alloc(60 * MIB)
    assert z.size == 60 * MIB
    w = a.alloc(60 * MIB)  # 68 MiB remainder < 120: handed out whole
    assert w.size == 68 * MIB and len(a.regions) == 2
    a.free(z); a.free(w)
    # remainder >= 128 MiB: split even below 2x
    b = BFC()
    big = b.alloc(600 * MIB)
    assert b.regions[-1] == 1024 * MIB and big.size == 600 * MIB  # 424 MiB left >= 128 MiB
    b.free(big)
    s = b.alloc(900 * MIB)
    assert s.size == 1024 * MIB  # 124 MiB left: neither 2x nor 128 MiB
    # best fit: the smallest chunk that fits, across bins upward
    c = BFC(initial_region=64 << 20)
    p = [c.alloc(8 * MIB) for _ in range(6)]
    c.free(p[1]); c.free(p[3]); c.free(p[4])  # holes: 8 MiB and 16 MiB (3+4 coalesced)
    q = c.alloc(7 * MIB)
    assert q.ptr == p[1].ptr and q.size == 8 * MIB  # 8 MiB hole, unsplit (< 2x)
    # the growth policy: region sizes after small requests double each time
    d = BFC()
    for _ in range(4):
        d.alloc(2 << 20)
    # 2 MiB region used whole; 4 MiB region split in two; then an 8 MiB region
    assert d.regions == [2 << 20, 4 << 20, 8 << 20], d.regions
    print("selftest ok")


# --------------------------------------------------------------------------- recording

# Override of the convolutions' forward scratch (the engine's rules say 0.5 of the
# output); None keeps the engine's value. ``--conv-scratch 0`` tests whether the
# measured "scratch" was the allocator's chunk waste all along.
CONV_SCRATCH: float | None = None
# Hypothesis test (not in the engine): an inference-mode Add whose first input dies at
# the Add writes into that input's buffer (TensorFlow's BinaryOp forwards an input
# buffer with no other reader). ``--inplace-add`` turns it on.
INPLACE_ADD = False


def record_step(profile, config, batch: int):
    """Events of one step from the engine's walk: [('a', key, bytes) | ('f', key) | ('m', phase)]."""
    import dataclasses

    import calc.estimate as E

    events: list[tuple] = []
    real_counted = E.counted_bytes

    def raw_counted(n: int) -> int:  # exact rounded sizes: the simulation does the rest
        return 0 if n < UNTRACKED_BELOW else rounded(n)

    class Recorder(E._Ledger):
        def __init__(self) -> None:
            super().__init__()
            self.seen = [0] * len(E.COMPONENTS)
            self.fixed_blocks: dict[int, list[tuple[int, int]]] = defaultdict(list)
            self.live_keys: dict[tuple, list[int]] = defaultdict(list)
            self.serial = 0
            self.initialised = False

        def _new(self) -> int:
            self.serial += 1
            return self.serial

        def _sync_fixed(self) -> None:
            for comp, value in enumerate(self.fixed):
                if comp in (E.W, E.OPT) and not self.initialised:
                    self.seen[comp] = value  # weights and slots: resident, modelled apart
                    continue
                delta = value - self.seen[comp]
                self.seen[comp] = value
                if delta > 0:
                    sid = self._new()
                    self.fixed_blocks[comp].append((sid, delta))
                    events.append(("a", sid, delta))
                elif delta < 0:
                    need = -delta
                    blocks = self.fixed_blocks[comp]
                    exact = next((b for b in blocks if b[1] == need), None)
                    if exact is not None:
                        blocks.remove(exact)
                        events.append(("f", exact[0]))
                        continue
                    while need > 0 and blocks:  # free the oldest, keep the remainder
                        sid, size = blocks.pop(0)
                        events.append(("f", sid))
                        if size > need:
                            nid = self._new()
                            blocks.insert(0, (nid, size - need))
                            events.append(("a", nid, size - need))
                        need -= size

        def add(self, component, per_sample_bytes, count=1):
            self._sync_fixed()
            self.initialised = True
            super().add(component, per_sample_bytes, count)
            if per_sample_bytes <= 0:
                return
            key = (component, per_sample_bytes)
            for _ in range(max(0, count)):
                sid = self._new()
                self.live_keys[key].append(sid)
                events.append(("a", sid, per_sample_bytes * batch))
            for _ in range(max(0, -count)):
                ids = self.live_keys[key]
                events.append(("f", ids.pop(0) if forward[0] else ids.pop()))

        def snapshot(self, phase, extra_fixed=0, extra_per_sample=()):
            if phase == "loss":
                forward[0] = False
            self._sync_fixed()
            self.initialised = True
            super().snapshot(phase, extra_fixed, extra_per_sample)
            tmp = []
            for size in [extra_fixed, *(s * batch for s in extra_per_sample)]:
                if size > 0:
                    sid = self._new()
                    tmp.append(sid)
                    events.append(("a", sid, size))
            for sid in tmp:
                events.append(("f", sid))
            events.append(("m", phase))

    real_rule_for = E.rule_for

    def rule_for(layer_type, activation):
        rule, act, known = real_rule_for(layer_type, activation)
        if CONV_SCRATCH is not None and rule.input_for_weights_only and rule.forward_scratch == 0.5:
            rule = dataclasses.replace(rule, forward_scratch=CONV_SCRATCH)
        return rule, act, known

    real_in_place = E._writes_in_place

    def writes_in_place(layer, inference, precision, alias, producer, last_forward_use, keepers, nbytes,
                        outputs, i):
        if INPLACE_ADD and inference and layer.layer_type == "Add" and len(layer.output_ids) == 1:
            source, target = alias[layer.input_ids[0]], layer.output_ids[0]
            return (alias[target] == target and producer[source] != -1 and last_forward_use[source] == i
                    and keepers[source] == 0 and source not in outputs and nbytes[source] == nbytes[target])
        return real_in_place(layer, inference, precision, alias, producer, last_forward_use, keepers, nbytes,
                             outputs, i)

    forward = [True]
    saved = E._Ledger, E.counted_bytes, E.rule_for, E._writes_in_place
    E._Ledger, E.counted_bytes, E.rule_for, E._writes_in_place = Recorder, raw_counted, rule_for, writes_in_place
    try:
        E._simulate(profile, config)
    finally:
        E._Ledger, E.counted_bytes, E.rule_for, E._writes_in_place = saved
    # Label every allocation with the moment it belongs to (the next marker).
    labelled, phase = [], "end"
    for ev in reversed(events):
        if ev[0] == "m":
            phase = ev[1]
        labelled.append(ev + (phase,) if ev[0] == "a" else ev)
    return labelled[::-1]


def resident_blocks(profile, config) -> tuple[list[int], list[int]]:
    """Weights (every variable) and optimizer slots (per trainable variable), in bytes."""
    from calc.estimate import _trainable_flags
    from calc.optimizers import slots_per_variable

    trained, _ = _trainable_flags(profile, config)
    weights = [4 * e for l in profile.layers for e in (*l.trainable_weight_elements, *l.non_trainable_weight_elements)]
    slots = slots_per_variable(config.optimizer, config.optimizer_options, config.gradient_accumulation_steps)
    trainable = [4 * e for t, l in zip(trained, profile.layers) if t and l.trainable_params > 0
                 for e in l.trainable_weight_elements]
    return weights, [s for s in trainable for _ in range(slots)]


def run_protocol(profile, config, batch: int, warmups: int = 1) -> dict:
    """Weights, slots, warm-up step(s), reset, measured step: the measurement protocol."""
    events = record_step(profile, config, batch)
    weights, slots = resident_blocks(profile, config)
    a = BFC()
    for w in weights:
        if w >= UNTRACKED_BELOW:
            a.alloc(w)
    for s in slots:
        if s >= UNTRACKED_BELOW:
            a.alloc(s)

    def replay() -> tuple[int, str]:
        live: dict[int, Chunk] = {}
        best, where = 0, ""
        for ev in events:
            if ev[0] == "a":
                if ev[2] >= UNTRACKED_BELOW:
                    live[ev[1]] = a.alloc(ev[2])
                    if a.in_use > best:
                        best, where = a.in_use, ev[3]
            elif ev[0] == "f":
                c = live.pop(ev[1], None)
                if c is not None:
                    a.free(c)
        for c in live.values():  # the step ends: everything it made goes
            a.free(c)
        return best, where

    for _ in range(warmups):
        replay()
    before = a.in_use
    a.reset_peak()
    _, peak_phase = replay()
    return {"resident": before, "step": a.peak - before, "peak": a.peak, "phase": peak_phase,
            "regions": list(a.regions)}


def exact_step(profile, config, batch: int) -> int:
    """The same walk with every request at its exact (256-rounded) size: no chunk effects."""
    events = record_step(profile, config, batch)
    live: dict[int, int] = {}
    cur = best = 0
    for ev in events:
        if ev[0] == "a" and ev[2] >= UNTRACKED_BELOW:
            live[ev[1]] = rounded(ev[2])
            cur += live[ev[1]]
            best = max(best, cur)
        elif ev[0] == "f" and ev[1] in live:
            cur -= live.pop(ev[1])
    return best


# --------------------------------------------------------------------------- cases

def validation_cases(names: list[str] | None = None) -> None:
    from calc.catalogue import make_spec
    from calc.estimate import estimate_memory
    from calc.profiles import get_profile
    from calc.types import OptimizerOptions, TrainingConfig

    data = json.load(open(os.path.join(ROOT, "calc", "data", "validation_cpu.json")))
    wanted = names or ["MobileNetV2-224x224x3-head1000 b16 adamw float32 frozen_backbone",
                       "DenseNet121-224x224x3-head1000 b32 sgd float32 frozen_backbone",
                       "ResNet50-224x224x3-top1000 b32 adam float32"]
    print(f"{'case':62s} {'measured':>9s} {'engine':>15s} {'bfc sim':>15s} {'exact':>7s}  resident(meas/sim)")
    for case in data["cases"]:
        if case["case"] not in wanted and not (names == ["all"]):
            continue
        if names == ["all"] and not _profile_available(case["spec"]):
            continue  # would need a TensorFlow build
        spec = make_spec(**{k: v for k, v in case["spec"].items()})
        cfgd = dict(case["config"])
        cfgd["optimizer_options"] = OptimizerOptions(**cfgd["optimizer_options"])
        config = TrainingConfig(**cfgd)
        try:
            profile = get_profile(spec)
        except Exception as exc:  # noqa: BLE001
            print(f"{case['case']}: no profile ({exc})")
            continue
        measured = case["peak_bytes"] / MIB
        eng = estimate_memory(profile, config).peak_bytes / MIB
        sim = run_protocol(profile, config, config.batch_size)
        sim_total = sim["peak"] / MIB
        weights, slots = resident_blocks(profile, config)
        exact = (exact_step(profile, config, config.batch_size)
                 + sum(rounded(x) for x in weights + slots if x >= UNTRACKED_BELOW)) / MIB
        res = [r for r in (case.get("resident_before_step_bytes") or []) if r]
        res_m = f"{sorted(res)[len(res) // 2] / MIB:.0f}" if res else "-"
        print(f"{case['case']:62s} {measured:9.1f} {eng:8.1f} ({(eng / measured - 1) * 100:+5.1f}%)"
              f" {sim_total:8.1f} ({(sim_total / measured - 1) * 100:+5.1f}%) {exact:7.1f}  {res_m}/{sim['resident'] / MIB:.0f}"
              f"  peak at {sim['phase']}", flush=True)


def _profile_available(spec: dict) -> bool:
    from calc.catalogue import make_spec
    from calc.profiles import SHIPPED_DIR, cache_dir

    key = make_spec(**spec).key
    return any(key in f for d in (SHIPPED_DIR, cache_dir()) if d.exists() for f in os.listdir(d))


PROBE_VARIANTS = FROZEN_VARIANTS


def probe_profiles(names: list[str], size: int) -> dict:
    """Profiles of benchmarks/probe_frozen.py's models (needs TensorFlow; cached as JSON)."""
    from calc.profiles import profile_from_dict, profile_to_dict

    cache = os.path.join("/tmp", f"bfc_sim_probe_profiles_{size}.json")
    stored = json.load(open(cache)) if os.path.exists(cache) else {}
    missing = [n for n in names if n not in stored]
    if missing:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import keras
        from keras import layers as L

        from calc.keras_adapter import profile_model
        for name in missing:
            ns = {"keras": keras, "L": L, "steps": PROBE_VARIANTS[name].split(), "size": size}
            exec(FROZEN_STAGE, ns)  # noqa: S102 (our own probe code, benchmarks/probe_child.py)
            stored[name] = profile_to_dict(profile_model(ns["model"], backbone=ns["backbone"]))
        json.dump(stored, open(cache, "w"))
    return {n: profile_from_dict(stored[n]) for n in names}


def probe(argv: list[str]) -> None:
    from calc.estimate import estimate_memory
    from calc.types import TrainingConfig

    batches = ([int(b) for b in argv[argv.index("--batches") + 1].split(",")] if "--batches" in argv
               else [int(argv[argv.index("--batch") + 1]) if "--batch" in argv else 16])
    size = int(argv[argv.index("--size") + 1]) if "--size" in argv else 112
    names = [a for a in argv if a in PROBE_VARIANTS] or list(PROBE_VARIANTS)
    profiles = probe_profiles(names, size)
    for batch in batches:
        config = TrainingConfig(batch_size=batch, optimizer="sgd", train_mode="frozen_backbone")
        print(f"batch {batch}, {size} px: step above resident, MiB")
        _probe_rows(names, profiles, config, batch)


def _probe_rows(names, profiles, config, batch) -> None:
    from calc.estimate import estimate_memory

    for name in names:
        p = profiles[name]
        est = estimate_memory(p, config)
        eng = (est.peak_bytes - est.weights_bytes - est.optimizer_state_bytes) / MIB
        sim = run_protocol(p, config, batch)
        exact = exact_step(p, config, batch) / MIB
        print(f"{name:22s} engine {eng:7.1f}  bfc sim {sim['step'] / MIB:7.1f}  exact {exact:7.1f}"
              f"  regions {[r // MIB for r in sim['regions']]}  peak at {sim['phase']}", flush=True)


MEASURE_CHILD = r'''
steps, batch, size = STEPS.split(), BATCH, SIZE
''' + FROZEN_STAGE + r'''''' + FROZEN_STEP + r'''print("RESULT", json.dumps({"measured": peak - before, "before": before}))
'''


def measure(argv: list[str]) -> None:
    """probe_frozen.py's measurement (same model and protocol), one fresh process per run."""
    import subprocess

    batches = [int(b) for b in argv[argv.index("--batches") + 1].split(",")] if "--batches" in argv else [16]
    size = int(argv[argv.index("--size") + 1]) if "--size" in argv else 112
    names = [a for a in argv if a in PROBE_VARIANTS] or list(PROBE_VARIANTS)
    for batch in batches:
        for name in names:
            code = ((PREAMBLE + MEASURE_CHILD).replace("ROOT", repr(ROOT)).replace("STEPS", repr(PROBE_VARIANTS[name]))
                    .replace("BATCH", str(batch)).replace("SIZE", str(size)))
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
            line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
            if line is None:
                print(f"{name} b{batch}: failed: {out.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
            r = json.loads(line[7:])
            print(f"MEASURED {name} b{batch} {size}px step {r['measured'] / MIB:.1f} MiB (resident {r['before'] / MIB:.1f})",
                  flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--conv-scratch" in args:
        i = args.index("--conv-scratch")
        CONV_SCRATCH = float(args[i + 1])
        del args[i:i + 2]
    if "--inplace-add" in args:
        INPLACE_ADD = True
        args.remove("--inplace-add")
    if not args or args[0] == "--selftest":
        selftest()
    elif args[0] == "cases":
        validation_cases(args[1:] or None)
    elif args[0] == "probe":
        probe(args[1:])
    elif args[0] == "measure":
        measure(args[1:])
    else:
        raise SystemExit(__doc__)
