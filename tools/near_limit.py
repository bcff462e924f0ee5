"""Predictions for a GPU measurement at the card's limit, made and committed before it runs.

    python tools/near_limit.py --gpu h100-80 --models ResNet50,MobileNetV2,VGG16 [--save]

Near the card's memory XLA rematerialises its plan to fit (``calc.xla.curve``), so the plan
and the graph-executor walk disagree most there, and nobody has measured a step there. For
each model (at its own size, batch on top of Keras's default float32 Adam, or SGD for VGG,
whose update then holds no slot) this searches XLA's plans for the card
itself: the largest batch whose plan fits the card less the framework overhead, with no
margin. It prints, for that batch B and for the batch just above it that does not fit, the
plan, the straight line through the plans below the rematerialisation limit (what the plan
would be if XLA kept every activation) and the walk; ``--save`` adds both steps to
``validation/planned.json`` as set ``gpu_xla_limit`` with the plan's prediction, to be
committed before a GPU measures them (``tools/gpu_tf/measure_limit.sh``). The question the
measurement answers: does TensorFlow's XLA step run at B and fail above it, and how far is
its peak from the plan where the plan has bent under the line?

On an 80 GB or 141 GB card B is in the thousands, and one such step took longer than a
15-minute lease of the GPU machine. ``--slop S`` asks the same question at small batches:
XLA is told to plan against S % of its usual limit (``xla_gpu_memory_limit_slop_factor``,
95 by default, in ``XLA_FLAGS``; ``measure_scaled.sh`` sets the same on the GPU machine), and
the step is given an allocator region of the card's memory scaled the same way (S / 95, less
the card's framework overhead scaled alike; ``--region-mib`` sets another), so the limit falls
where a card of that size would have it, and several steps share the GPU at once. A third
step per model lies inside the bend with room (``inside_bend``), so that a peak is read there
even if B itself does not run. XLA's scheduler subtracts the step's inputs and outputs before
it scales, so the scaled card is like, not equal to, a card of that size; the plan and the
step see the same limit. Saved as set ``gpu_xla_scaled``, the seed naming card and scale
(``SCALED_TAGS``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from calc.catalogue import CATALOGUE, make_spec
from calc.estimate import estimate_memory
from calc.gpus import GPU_PRESETS
from calc.profiles import get_profile
from calc.types import Device, Optimizer, TrainingConfig
from calc.validation.data import case_id
from calc.validation.planned import add_planned, planned_cases, planned_predictions
from calc.xla import CompiledPoint, compute_plan, known_curve
from calc.xla.curve import SLOP_PERCENT
from calc.xla.search import search_curve

GIB = 2**30
MIB = 2**20
SET = "gpu_xla_limit"
SCALED_SET = "gpu_xla_scaled"
# The --seed that names each card's draw in planned.json (calc.validation.planned.drawn_seed), so that a
# machine measures the steps predicted for its own card: measure_limit.sh OUT DEADLINE SEED.
TAGS = {"h100-80": 3701, "h200": 3702}
# The same at a scaled limit (--slop): one seed per card and scale, measure_scaled.sh OUT DEADLINE SEED.
SCALED_TAGS = {("h200", 8): 3712}


def setup(name: str) -> tuple:
    spec = make_spec(name, CATALOGUE[name].default_size)
    optimizer = Optimizer.SGD if name.startswith("VGG") else Optimizer.ADAM
    return spec, TrainingConfig(batch_size=32, optimizer=optimizer, device=Device.GPU)


def scaled_region_mib(gpu: str, slop: int) -> int:
    """The allocator region of a card scaled as XLA's limit is at ``slop``: its memory less its framework
    overhead, times slop / 95, in whole MiB."""
    card = GPU_PRESETS[gpu]
    return (card.memory_bytes - card.overhead_bytes) * slop // SLOP_PERCENT // MIB


def predict(name: str, gpu: str, budget: int, inside: bool = False) -> list[tuple]:
    """(spec, config, plan bytes, line bytes or None, walk bytes, fits) at B and above it, B the largest
    batch whose plan fits ``budget`` bytes; with ``inside``, first at a batch inside the bend with room
    (``inside_bend``)."""
    spec, config = setup(name)

    def plan_at(batch: int) -> CompiledPoint:
        plan = compute_plan(spec, replace(config, batch_size=batch), gpu)
        return CompiledPoint(batch, plan.peak_bytes, plan.temporaries_bytes)

    answer, curve, _ = search_curve(plan_at, budget, config.batch_size, known_curve(spec, config, gpu))
    while len(curve.anchors) < 2 and (second := curve.second_anchor()) is not None:
        curve = curve.adding(plan_at(second))
    profile = get_profile(spec)
    rows = []
    for batch in (inside_bend(curve, answer.batch, budget) if inside else None, answer.batch, answer.exceeds):
        if batch is None:
            continue
        one = replace(config, batch_size=batch)
        rows.append((spec, one, curve.compiled(batch).peak_bytes, curve.line_peak(batch),
                     estimate_memory(profile, one).peak_bytes, batch <= answer.batch))
    return rows


def inside_bend(curve, largest: int, budget: int) -> int | None:
    """The largest batch below ``largest`` compiled past the line region (XLA rematerialising) whose plan
    leaves 5 % of ``budget`` free: a step whose peak is read even if the card's compile adds a little
    (cuDNN's autotuned workspaces), where B itself may not run."""
    bent = [p.batch for p in curve.points if p.batch < largest and p.peak_bytes <= budget * 0.95
            and not curve.below_limit(p.peak_bytes, p.temp_bytes)]
    return max(bent, default=None)


def failure_reason(message: str) -> str:
    """A failed run's message in a few words: out of memory, stopped at its time limit, or its last line."""
    if any(mark in message for mark in ("RESOURCE_EXHAUSTED", "ResourceExhausted", "Out of memory", "OOM")):
        return "out of memory"
    if "ran past" in message:
        return "stopped at its time limit"
    return message.split(" | ")[-1].strip()[-100:] or "failed"  # the child's last line of output


def report(out_dir: Path, validation_set: str, seed: int, gpu: str) -> list[dict]:
    """The steps on record (``validation_set``, ``seed``) against what a GPU machine wrote into ``out_dir``
    (``measure_limit.sh`` / ``measure_scaled.sh``): per step the prediction on record, the measured peak or
    why the run failed, the plan's temporaries and, where XLA dumped the step on the card
    (``xla_dumps.py``), the card's temporaries, its cuDNN workspaces at their peak and how many
    instructions it rematerialised."""
    from measure_gpu_tf import dump_folder

    def read(name: str) -> dict:
        path = out_dir / name
        return json.loads(path.read_text()) if path.exists() else {}

    measured = {c["case"]: c for c in read(f"{validation_set}.json").get("cases", [])}
    failed = read(f"{validation_set}_failed.json")
    dumps = read(f"xla_dumps_{validation_set.removeprefix('gpu_xla_')}.json")
    predicted = planned_predictions(validation_set, seed=seed)
    rows = []
    for spec, config in planned_cases(validation_set, seed=seed):
        cid = case_id(spec, config)
        plan = compute_plan(spec, config, gpu)  # known (compiled for the prediction) or compiled again
        card = dumps.get(dump_folder(spec, config), {})
        rows.append({"case": cid, "predicted_bytes": predicted[cid], "plan_temp_bytes": plan.temporaries_bytes,
                     "measured_bytes": measured.get(cid, {}).get("peak_bytes"),
                     "failure": failure_reason(failed[cid]) if cid in failed else None,
                     "card_temp_bytes": card.get("temporaries_bytes"),
                     "card_workspace_bytes": card.get("workspace_at_peak_bytes"),
                     "card_remat": card.get("rematerialised_instructions")})
    return rows


def print_report(rows: list[dict]) -> None:
    def gib(value: int | None) -> str:
        return f"{value / GIB:8.2f}" if value is not None else "       -"

    print(f"{'step':52s} {'plan':>8s} {'measured':>8s} {'error':>7s} {'plan tmp':>8s} {'card tmp':>8s} "
          f"{'cuDNN ws':>8s} {'remat':>5s}  outcome")
    for r in rows:
        error = (f"{(r['predicted_bytes'] / r['measured_bytes'] - 1) * 100:+6.1f}%" if r["measured_bytes"]
                 else "      -")
        outcome = r["failure"] or ("ran" if r["measured_bytes"] else "not run")
        remat = str(r["card_remat"]) if r["card_remat"] is not None else "-"
        print(f"{r['case'][:52]:52s} {gib(r['predicted_bytes'])} {gib(r['measured_bytes'])} {error} "
              f"{gib(r['plan_temp_bytes'])} {gib(r['card_temp_bytes'])} {gib(r['card_workspace_bytes'])} "
              f"{remat:>5s}  {outcome}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100-80", choices=sorted(TAGS), help="the card the measurement runs on")
    parser.add_argument("--models", default="ResNet50,MobileNetV2,VGG16")
    parser.add_argument("--slop", type=int, default=0,
                        help="XLA plans against this %% of its usual limit (xla_gpu_memory_limit_slop_factor)")
    parser.add_argument("--region-mib", type=int, default=0,
                        help="with --slop: the allocator region the step gets (default: the card scaled alike)")
    parser.add_argument("--save", action="store_true", help="add the steps to validation/planned.json")
    parser.add_argument("--report", type=Path, metavar="DIR",
                        help="the steps on record against what a GPU machine wrote into DIR (GiB)")
    args = parser.parse_args(argv)
    card = GPU_PRESETS[args.gpu]
    if args.slop:
        if (args.gpu, args.slop) not in SCALED_TAGS:
            parser.error(f"--slop {args.slop} on {args.gpu} has no seed in SCALED_TAGS: add one")
        # Before any compile: the plan's child inherits the flag, and the plan's key names it.
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_gpu_memory_limit_slop_factor={args.slop}"
        region_mib = args.region_mib or scaled_region_mib(args.gpu, args.slop)
        budget, validation_set = region_mib * MIB, SCALED_SET
        seed = SCALED_TAGS[args.gpu, args.slop]
        drawn_by = f"near_limit.py --gpu {args.gpu} --slop {args.slop} --region-mib {region_mib} --seed {seed}"
        print(f"{card.name}, XLA's limit at {args.slop} % instead of {SLOP_PERCENT} %: plans must fit an allocator "
              f"region of {region_mib} MiB ({budget / GIB:.2f} GiB, no margin)")
    else:
        budget, validation_set, seed = card.memory_bytes - card.overhead_bytes, SET, TAGS[args.gpu]
        drawn_by = f"near_limit.py --gpu {args.gpu} --seed {seed}"
        print(f"{card.name}: plans must fit {budget / GIB:.2f} GiB "
              f"(the card less {card.overhead_bytes / GIB:.2f} GiB of framework overhead, no margin)")
    if args.report:
        print_report(report(args.report, validation_set, seed, args.gpu))
        return 0
    print(f"{'step':58s} {'XLA plan':>10s} {'line':>10s} {'walk':>10s}  plan says")
    planned = []
    for name in args.models.split(","):
        for spec, config, plan, line, walk, fits in predict(name, args.gpu, budget, inside=bool(args.slop)):
            line_text = f"{line / GIB:9.2f}G" if line is not None else "         -"
            print(f"{spec.key + ' b' + str(config.batch_size) + ' ' + config.optimizer.value:58s} "
                  f"{plan / GIB:9.2f}G {line_text} {walk / GIB:9.2f}G  {'fits' if fits else 'does not fit'}")
            planned.append((spec, config, plan, drawn_by))
    if args.save:
        add_planned(planned, validation_set)
        print(f"{len(planned)} steps -> validation/planned.json (set {validation_set})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
