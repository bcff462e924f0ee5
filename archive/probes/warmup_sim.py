"""A simulated first step with the optimizer's slot copies, then the measured step (a study).

    python benchmarks/warmup_sim.py [SUBSTRING]
    python benchmarks/warmup_sim.py --frozen-policies

The engine's allocator simulation (``calc.estimate._allocator_peak``) replays the measured
step after a pool holding every variable and every optimizer slot. The real pool holds,
before the first step, one zeros buffer per distinct slot shape, shared by all slots of
that shape; the first step's updates then give each slot its own buffer among that
step's tensors (``assign_add``: a copy of the shared buffer, except for its last holder;
``assign``: the update's result), and only then is the step measured
(``docs/MEASUREMENTS.md``, stop 10). This replays that: the variables as the engine makes
them (drawn kernels), one zeros buffer per distinct slot size, the walk's step with each
layer's slot buffers made at its update (the ``("u", layer)`` events), then the step again,
measured. It prints, per validation case, the engine's error, the simulation's as the
engine runs it, and this one's; then the summaries, for full training and for the rest.

``--frozen-policies`` compares ways of estimating a step with a frozen part (the engine's
larger of the walk and its two histories, and with this warmed pool) over the frozen or
last-N validation cases and the frozen batch-sweep points (``archive/probes/frozen_sweeps_cpu.json``).
"""

from __future__ import annotations

import os
import statistics
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calc import estimate as E  # noqa: E402
from calc.optimizers import slots_per_variable  # noqa: E402
from calc.profiles import get_profile  # noqa: E402
from calc.validation import VALIDATION_CASES, case_id, load_measurements  # noqa: E402

# Slots whose update is an assign_add (copies a shared buffer), per optimizer, in
# ``build()`` order; the others are assigned the update's result. From keras/src/optimizers.
ASSIGN_ADD = {"adam": (True, True), "adamw": (True, True), "nadam": (True, True), "adamax": (True, False),
              "adagrad": (True,)}


def warmed_peak(profile, config, batch: int) -> int:
    base = E._without_batch(config)
    events = E._allocator_events(profile, base)
    trained = E._trainable_flags(profile, base)[0]
    every, _ = E._variable_elements(profile, trained)
    slots = slots_per_variable(base.optimizer, base.optimizer_options, base.gradient_accumulation_steps)
    adds = ASSIGN_ADD.get(base.optimizer.value, ()) + (False,) * slots
    pool = E._resident_pool(profile, base, True, requests=[E.FLOAT32 * e for e in every])  # the variables
    # One zeros buffer per distinct slot size, and how many slots still hold it.
    holders: Counter = Counter()
    for t, layer in zip(trained, profile.layers):
        if t:
            for e in layer.trainable_weight_elements:
                holders[E.FLOAT32 * e] += slots
    zeros = {n: pool.alloc(n) for n in holders if n >= E.UNTRACKED_BELOW}
    live: dict = {}
    for ev in events:  # the first step: the walk's requests, and each layer's slots made at its update
        if ev[0] == "u":
            for e in profile.layers[ev[1]].trainable_weight_elements:
                n = E.FLOAT32 * e
                for s in range(slots):
                    holders[n] -= 1
                    if n < E.UNTRACKED_BELOW:
                        continue
                    if adds[s] and holders[n] == 0:
                        continue  # the last holder updates the shared buffer in place
                    pool.alloc(n)
                    if holders[n] == 0:
                        pool.free(zeros.pop(n))
        else:
            E.replay(pool, (ev,), batch, live)
    for handle in live.values():
        pool.free(handle)
    pool.reset_peak()
    E.replay(pool, events, batch)
    return pool.peak


def main(substring: str) -> None:
    measured = {c["case"]: c["peak_bytes"] for c in load_measurements()["cases"]}
    rows = {"all": [], "frozen": []}
    for spec, config in VALIDATION_CASES:
        cid = case_id(spec, config)
        if cid not in measured or substring not in cid:
            continue
        m, profile = measured[cid], get_profile(spec)
        engine = E.estimate_memory(profile, config).peak_bytes
        sim = E._allocator_peak(profile, E._without_batch(config), config.per_replica_batch)
        warm = warmed_peak(profile, config, config.per_replica_batch)
        walk = engine if config.train_mode.value == "all" else engine - E.estimate_memory(profile, config).allocator_bytes
        errs = [(x - m) / m * 100 for x in (engine, sim, warm, max(walk, warm))]
        rows["all" if config.train_mode.value == "all" else "frozen"].append(errs)
        print(f"{cid:78s} engine {errs[0]:+6.1f}  sim {errs[1]:+6.1f}  warmed {errs[2]:+6.1f}  "
              f"max(walk, warmed) {errs[3]:+6.1f}", flush=True)
    for group, errs in rows.items():
        if not errs:
            continue
        for j, label in enumerate(("engine", "sim", "warmed", "max(walk, warmed)")):
            v = [e[j] for e in errs]
            a = sorted(map(abs, v))
            print(f"{group:6s} {label:18s} {len(v)} cases: median |error| {statistics.median(a):.2f} %, "
                  f"max {a[-1]:.1f} %, beyond 10 %: {sum(x > 10 for x in a)}, under {sum(x < 0 for x in v)} "
                  f"(more than 5 %: {sum(x < -5 for x in v)}), median signed {statistics.median(v):+.2f} %")


def frozen_policies() -> None:
    from bfc_sim import frozen_points

    rows = []
    for source, _, profile, config, measured in frozen_points():
        estimate = E.estimate_memory(profile, config)
        walk = estimate.peak_bytes - estimate.allocator_bytes
        base, batch = E._without_batch(config), config.per_replica_batch
        drawn, one = E._history_peak(profile, base, batch, True), E._history_peak(profile, base, batch, False)
        rows.append((source, measured, walk, drawn, one, warmed_peak(profile, config, batch)))
    policies = {
        "max(walk, drawn, one value) (the engine)": lambda w, d, o, x: max(w, d, o),
        "max(walk, warmed)": lambda w, d, o, x: max(w, x),
        "max(walk, warmed, drawn)": lambda w, d, o, x: max(w, x, d),
        "max(walk, drawn, one value, warmed)": lambda w, d, o, x: max(w, d, o, x),
    }
    for source in ("validation", "sweep"):
        picked = [r for r in rows if r[0] == source]
        print(f"{source}: {len(picked)} points")
        for label, policy in policies.items():
            v = [(policy(*r[2:]) - r[1]) / r[1] * 100 for r in picked]
            a = sorted(map(abs, v))
            print(f"  {label:42s} median {statistics.median(a):5.2f} %  p90 {a[int(len(a) * 0.9)]:5.1f} %  "
                  f"max {a[-1]:5.1f} %  under {sum(x < 0 for x in v):3d}  more than 5 % low {sum(x < -5 for x in v):3d}  "
                  f"more than 10 % low {sum(x < -10 for x in v):3d}  beyond 10 % {sum(x > 10 for x in a):3d}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--frozen-policies"]:
        frozen_policies()
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "")
