"""The BFC allocator simulation (calc.allocator, used by calc.estimate) against measurements.

    python benchmarks/bfc_sim.py cases [all | CASE ...]   # validation cases: measured / walk / engine / exact
    python benchmarks/bfc_sim.py sweep [--measure MODEL:SIZE:OPT:B1,B2 ...]   # frozen batch sweeps
    python benchmarks/bfc_sim.py probe [--batches 4,8,16] [--size 112] [variant ...]
    python benchmarks/bfc_sim.py measure [--batches 16] [--size 112] [variant ...]
    python benchmarks/bfc_sim.py variants [NAME ...]   # how the resident phase is replayed, on every frozen point

For steps that run part of the model in inference (frozen backbone, last N layers) the
engine reports max(walk, simulation): ``calc.estimate.allocator_peak`` replays the walk's
own allocation events through ``calc.allocator.BFC``. "walk" below is the walk alone
(``peak - allocator``), "exact" the simulation's live bytes without chunk effects.
``probe`` / ``measure`` simulate and measure probe_frozen's one-stage models.
"""

from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from probe_child import FROZEN_STAGE, FROZEN_STEP, FROZEN_VARIANTS, PREAMBLE, last_line, run_child  # noqa: E402

from calc.allocator import rounded  # noqa: E402

FLOAT = 4
MIB = 1 << 20

SWEEPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "frozen_sweeps_cpu.json")

class _ExactPool:
    """Every request at its 256-rounded size, no chunks: the live bytes."""

    def __init__(self, resident: int) -> None:
        self.in_use = self.peak = resident

    def alloc(self, nbytes: int) -> int:
        size = rounded(nbytes)
        self.in_use += size
        self.peak = max(self.peak, self.in_use)
        return size

    def free(self, size: int) -> None:
        self.in_use -= size

    def count(self, nbytes: int) -> None:
        """What ``calc.estimate.replay`` calls for an int handle (this pool's are all ints)."""
        self.in_use += nbytes
        self.peak = max(self.peak, self.in_use)


def exact_peak(profile, config) -> int:
    """The simulation's events with every request at its exact size: live bytes, no chunks."""
    from calc.estimate import UNTRACKED_BELOW, _allocator_events, _resident_requests, _without_batch, replay

    pool = _ExactPool(sum(rounded(n) for n in _resident_requests(profile, config) if n >= UNTRACKED_BELOW))
    replay(pool, _allocator_events(profile, _without_batch(config)), config.per_replica_batch)
    return pool.peak


def _row(label: str, measured_mib: float, profile, config) -> float:
    from calc.estimate import allocator_peak, estimate_memory

    b = estimate_memory(profile, config)
    walk = (b.peak_bytes - b.allocator_bytes) / MIB
    final = b.peak_bytes / MIB
    sim = allocator_peak(profile, config) / MIB
    exact = exact_peak(profile, config) / MIB
    err = (final / measured_mib - 1) * 100
    print(f"{label:66s} {measured_mib:8.1f} {walk:8.1f} ({(walk / measured_mib - 1) * 100:+6.1f}%)"
          f" {sim:8.1f} {final:8.1f} ({err:+6.1f}%) {exact:8.1f}", flush=True)
    return err


def _header() -> None:
    print(f"{'case':66s} {'measured':>8s} {'walk':>18s} {'sim':>8s} {'engine':>18s} {'exact':>8s}   MiB")


def _summary(errors: list[float]) -> None:
    a = sorted(abs(e) for e in errors)
    if a:
        print(f"{len(a)} points: engine median |error| {a[len(a) // 2]:.1f}%, max {a[-1]:.1f}%, "
              f"within 5 %: {sum(e <= 5 for e in a)}, under-predicted: {sum(e < 0 for e in errors)}")


def validation_cases(names: list[str]) -> None:
    from calc.profiles import get_profile
    from calc.validation import config_from_dict, spec_from_dict

    data = json.load(open(os.path.join(ROOT, "calc", "data", "validation_cpu.json")))
    _header()
    errors = []
    for raw in data["cases"]:
        everything = names == ["all"]
        if not (raw["case"] in names or everything or (not names and raw["config"]["train_mode"] != "all")):
            continue
        profile, config = get_profile(spec_from_dict(raw["spec"])), config_from_dict(raw["config"])
        errors.append(_row(raw["case"], raw["peak_bytes"] / MIB, profile, config))
    _summary(errors)


def sweep(argv: list[str]) -> None:
    """Engine vs the measured sweep points; ``--measure MODEL:SIZE:OPT:B1,B2 ...`` first adds runs."""
    from calc.catalogue import make_spec
    from calc.measure import measure_once
    from calc.profiles import get_profile
    from calc.types import TrainingConfig

    data = json.load(open(SWEEPS))
    for target in argv[argv.index("--measure") + 1:] if "--measure" in argv else []:
        name, size, optimizer, batches = target.split(":")
        for batch in (int(b) for b in batches.split(",")):
            config = TrainingConfig(batch_size=batch, optimizer=optimizer, train_mode="frozen_backbone")
            result = measure_once(make_spec(name, int(size), include_top=False), config)
            data["points"].append({"model": name, "image_size": int(size), "optimizer": optimizer, "batch_size": batch,
                                   "peak_mib": round(result["peak_bytes"] / MIB, 1), "source": "bfc_sim.py sweep --measure"})
            json.dump(data, open(SWEEPS, "w"), indent=1)
            print(f"measured {name} {size}px {optimizer} b{batch}: {result['peak_bytes'] / MIB:.1f} MiB", flush=True)
    _header()
    errors = []
    for p in sorted(data["points"], key=lambda p: (p["model"], p["image_size"], p["optimizer"], p["batch_size"])):
        profile = get_profile(make_spec(p["model"], p["image_size"], include_top=False))
        config = TrainingConfig(batch_size=p["batch_size"], optimizer=p["optimizer"], train_mode="frozen_backbone")
        label = f"{p['model']} {p['image_size']}px {p['optimizer']} frozen b{p['batch_size']}"
        errors.append(_row(label, p["peak_mib"], profile, config))
    _summary(errors)


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
    from calc.estimate import _resident_requests, allocator_peak, estimate_memory

    for name in names:
        p = profiles[name]
        est = estimate_memory(p, config)
        resident = est.weights_bytes + est.optimizer_state_bytes
        walk = (est.peak_bytes - est.allocator_bytes - resident) / MIB
        sim = (allocator_peak(p, config) - sum(_resident_requests(p, config))) / MIB
        exact = (exact_peak(p, config) - sum(_resident_requests(p, config))) / MIB
        print(f"{name:22s} walk {walk:7.1f}  bfc sim {sim:7.1f}  exact {exact:7.1f}  (step above resident, MiB)",
              flush=True)


MEASURE_CHILD = r'''
steps, batch, size = STEPS.split(), BATCH, SIZE
''' + FROZEN_STAGE + r'''''' + FROZEN_STEP + r'''print("RESULT", json.dumps({"measured": peak - before, "before": before}))
'''


def measure(argv: list[str]) -> None:
    """probe_frozen.py's measurement (same model and protocol), one fresh process per run."""

    batches = [int(b) for b in argv[argv.index("--batches") + 1].split(",")] if "--batches" in argv else [16]
    size = int(argv[argv.index("--size") + 1]) if "--size" in argv else 112
    names = [a for a in argv if a in PROBE_VARIANTS] or list(PROBE_VARIANTS)
    for batch in batches:
        for name in names:
            code = ((PREAMBLE + MEASURE_CHILD).replace("ROOT", repr(ROOT)).replace("STEPS", repr(PROBE_VARIANTS[name]))
                    .replace("BATCH", str(batch)).replace("SIZE", str(size)))
            try:
                r = run_child(code)
            except RuntimeError as exc:
                print(f"{name} b{batch}: failed: {last_line(exc)}", flush=True)
                continue
            print(f"MEASURED {name} b{batch} {size}px step {r['measured'] / MIB:.1f} MiB (resident {r['before'] / MIB:.1f})",
                  flush=True)


# How the resident phase (variables, then optimizer slots) is replayed before the step.
# "random_kernels_only" (a kernel's random draw and its scaled copy, then the variable;
# anything else allocated as it is) and "keras" (every variable and slot from one value
# of its size, freed once the variable holds its copy) are the engine's two histories
# (``calc.estimate._resident_pool``), each alone; the engine keeps the larger of their
# peaks ("engine"). The others were tried against the Xception 299 px frozen misses
# (docs/MEASUREMENTS.md, stop 8; "slot_moved_in_warm_up[_or_one_value]" at stop 9, from a
# traced history: docs/BFC_SIM.md).
RESIDENT_VARIANTS = ("engine", "keras", "two_temporaries", "slots_without_value", "slot_values_freed_together",
                     "all_values_freed_together", "warm_up_step", "slots_after_batch", "slots_after_batch_warm_up",
                     "random_kernels_only", "random_kernels_only_after_batch", "slot_moved_in_warm_up",
                     "slot_moved_in_warm_up_or_one_value", "warm_up_without_input")


def _variant_peak(profile, config, variant: str) -> int:
    from calc.allocator import BFC
    from calc.estimate import UNTRACKED_BELOW, _allocator_events, _randomly_initialized, _resident_pool, \
        _resident_requests, _trainable_flags, _variable_elements, _without_batch, replay

    events = _allocator_events(profile, _without_batch(config))
    if variant in ("keras", "random_kernels_only"):  # the engine's histories, one at a time
        bfc = _resident_pool(profile, config, drawn_kernels=variant == "random_kernels_only")
        bfc.reset_peak()
        replay(bfc, events, config.per_replica_batch)
        return bfc.peak
    if variant == "engine":  # the larger of the engine's two histories
        return max(_variant_peak(profile, config, "keras"), _variant_peak(profile, config, "random_kernels_only"))
    if variant == "warm_up_without_input":
        # Each of the engine's histories, then a warm-up step that does not allocate the
        # input batch, then the measured step (which does): traced on DenseNet121 224 px
        # b64 frozen, the real warm-up requested 36.8 MiB less, unnamed, than the measured
        # step, and the real requests replayed after it reach the measured peak.
        inputs = {FLOAT * profile.tensor_elements[t] for t in profile.input_ids}
        first = next(ev[1] for ev in events if ev[0] == "a" and ev[3] == 0 and ev[2] in inputs)
        warm_up = [ev for ev in events if ev[1] != first]
        peaks = []
        for drawn in (True, False):
            bfc = _resident_pool(profile, config, drawn_kernels=drawn)
            for chunk in replay(bfc, warm_up, config.per_replica_batch).values():
                bfc.free(chunk)
            bfc.reset_peak()
            replay(bfc, events, config.per_replica_batch)
            peaks.append(bfc.peak)
        return max(peaks)
    if variant in ("slot_moved_in_warm_up", "slot_moved_in_warm_up_or_one_value"):
        return _slot_moved_peak(profile, config, events,
                                also_one_value=variant == "slot_moved_in_warm_up_or_one_value")
    n_vars = len(_variable_elements(profile, _trainable_flags(profile, config)[0])[0])
    bfc, pending, batch_chunk = BFC(), [], None
    batch_bytes = sum(4 * profile.tensor_elements[t] for t in profile.input_ids) * config.per_replica_batch
    random_init = _randomly_initialized(profile)
    for k, nbytes in enumerate(_resident_requests(profile, config)):
        if nbytes < UNTRACKED_BELOW:
            continue
        slot = k >= n_vars
        if variant == "random_kernels_only_after_batch":
            if slot and batch_chunk is None:
                batch_chunk = bfc.alloc(batch_bytes)
            if not slot and random_init[k]:
                first = bfc.alloc(nbytes); second = bfc.alloc(nbytes); bfc.alloc(nbytes); bfc.free(first); bfc.free(second)
            else:
                bfc.alloc(nbytes)
            continue
        if slot and variant.startswith("slots_after_batch") and batch_chunk is None:
            # train_on_batch converts the batch to a tensor, then traces the step, which
            # builds the optimizer: its slots land after the batch.
            batch_chunk = bfc.alloc(batch_bytes)
        if variant == "two_temporaries" and not slot:
            first = bfc.alloc(nbytes); second = bfc.alloc(nbytes); bfc.free(first); bfc.alloc(nbytes); bfc.free(second)
        elif variant == "slots_without_value" and slot:
            bfc.alloc(nbytes)
        elif (variant == "slot_values_freed_together" and slot) or variant == "all_values_freed_together":
            pending.append(bfc.alloc(nbytes)); bfc.alloc(nbytes)
        else:
            value = bfc.alloc(nbytes); bfc.alloc(nbytes); bfc.free(value)
    for chunk in pending:
        bfc.free(chunk)
    if variant in ("warm_up_step", "slots_after_batch_warm_up"):
        replay(bfc, events, config.per_replica_batch)
    if batch_chunk is not None:
        bfc.free(batch_chunk)
    bfc.reset_peak()
    replay(bfc, events, config.per_replica_batch)
    return bfc.peak


def _slot_moved_peak(profile, config, events, also_one_value: bool = False) -> int:
    """The drawn-kernel history, then a warm-up step whose update gives one slot of each
    trained variable a new buffer (the old one freed), then the measured step.

    Traced (``measure_once(trace="history")``, Xception 299 px frozen Nadam): the head's
    slot is re-made by ``nadam/AssignAddVariableOp`` during the warm-up's update, while
    the head's gradient and update temporaries are alive, and stays there.
    """
    from calc.estimate import _resident_pool, _resident_requests, _trainable_flags, _variable_elements, replay

    trained = _trainable_flags(profile, config)[0]
    every, trainable = _variable_elements(profile, trained)
    n_slots = (len(_resident_requests(profile, config)) - len(every)) // len(trainable) if trainable else 0
    kept: list = []
    bfc = _resident_pool(profile, config, drawn_kernels=True, kept=kept)
    slot_chunks = {}  # the first slot of each trained variable, by its index in ``trainable``
    for k, chunk in kept:
        j = k - len(every)  # slots come per variable, ``n_slots`` in a row
        if n_slots and 0 <= j < n_slots * len(trainable) and j % n_slots == 0:
            slot_chunks[j // n_slots] = chunk
    marker = max(i for i, ev in enumerate(events) if ev[0] == "m" and ev[1] == "optimizer update")
    cut = marker - 1 if events[marker - 1][0] == "f" else marker
    batch = config.per_replica_batch
    live = replay(bfc, events[:cut], batch)  # the warm-up, up to its update's temporaries
    for j, old in slot_chunks.items():
        bfc.alloc(FLOAT * trainable[j])
        bfc.free(old)
    for chunk in replay(bfc, events[cut:], batch, live).values():
        bfc.free(chunk)
    bfc.reset_peak()
    replay(bfc, events, batch)
    if also_one_value:
        return max(bfc.peak, _variant_peak(profile, config, "keras"))
    return bfc.peak


def frozen_points() -> list[tuple]:
    """Every measured step with a frozen part: ``(source, label, profile, config, measured bytes)``.

    The frozen or last-N cases of the CPU validation set (source ``"validation"``), then the
    frozen batch-sweep points (``"sweep"``).
    """
    from calc.catalogue import make_spec
    from calc.profiles import get_profile
    from calc.types import TrainingConfig
    from calc.validation import config_from_dict, load_measurements, spec_from_dict

    points = []
    for raw in load_measurements()["cases"]:
        config = config_from_dict(raw["config"])
        if config.train_mode.value != "all":
            points.append(("validation", raw["case"], get_profile(spec_from_dict(raw["spec"])), config,
                           raw["peak_bytes"]))
    with open(SWEEPS, encoding="utf-8") as f:
        for p in json.load(f)["points"]:
            config = TrainingConfig(batch_size=p["batch_size"], optimizer=p["optimizer"], train_mode="frozen_backbone")
            points.append(("sweep", f"{p['model']} {p['image_size']}px {p['optimizer']} frozen b{p['batch_size']}",
                           get_profile(make_spec(p["model"], p["image_size"], include_top=False)), config,
                           p["peak_mib"] * MIB))
    return points


def variants(names: list[str]) -> None:
    """Each resident-phase variant as the engine's max(walk, simulation), on every frozen point."""
    from calc.estimate import estimate_memory

    points = frozen_points()
    for variant in names or RESIDENT_VARIANTS:
        errors = []
        for _, label, profile, config, measured in points:
            b = estimate_memory(profile, config)
            walk = b.peak_bytes - b.allocator_bytes
            errors.append(((max(walk, _variant_peak(profile, config, variant)) / measured - 1) * 100, label))
        a = sorted(abs(e) for e, _ in errors)
        xception = [f"{e:+.1f}" for e, label in errors if "Xception" in label and ("299" in label)]
        print(f"{variant:28s} {len(a)} points: median |error| {a[len(a) // 2]:.1f}%, max {a[-1]:.1f}%, "
              f"more than 5 % low: {sum(e < -5 for e, _ in errors)} (10 %: {sum(e < -10 for e, _ in errors)}), "
              f"worst {min(errors)[0]:+.1f}% ({min(errors)[1]}), highest {max(errors)[0]:+.1f}% ({max(errors)[1]}); "
              f"Xception 299 px: {' '.join(xception)}", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args:
        raise SystemExit(__doc__)
    if args[0] == "cases":
        validation_cases(args[1:])
    elif args[0] == "sweep":
        sweep(args[1:])
    elif args[0] == "probe":
        probe(args[1:])
    elif args[0] == "measure":
        measure(args[1:])
    elif args[0] == "variants":
        variants(args[1:])
    else:
        raise SystemExit(__doc__)
