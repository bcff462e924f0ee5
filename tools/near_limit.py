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
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from calc.catalogue import CATALOGUE, make_spec
from calc.estimate import estimate_memory
from calc.gpus import GPU_PRESETS
from calc.profiles import get_profile
from calc.types import Device, Optimizer, TrainingConfig
from calc.validation.planned import add_planned
from calc.xla import CompiledPoint, compute_plan, known_curve
from calc.xla.search import search_curve

GIB = 2**30
SET = "gpu_xla_limit"
# The --seed that names each card's draw in planned.json (calc.validation.planned.drawn_seed), so that a
# machine measures the steps predicted for its own card: measure_limit.sh OUT DEADLINE SEED.
TAGS = {"h100-80": 3701, "h200": 3702}


def setup(name: str) -> tuple:
    spec = make_spec(name, CATALOGUE[name].default_size)
    optimizer = Optimizer.SGD if name.startswith("VGG") else Optimizer.ADAM
    return spec, TrainingConfig(batch_size=32, optimizer=optimizer, device=Device.GPU)


def predict(name: str, gpu: str) -> list[tuple]:
    """(spec, config, plan bytes, line bytes or None, walk bytes, fits) at B and above it."""
    spec, config = setup(name)
    card = GPU_PRESETS[gpu]
    budget = card.memory_bytes - card.overhead_bytes

    def plan_at(batch: int) -> CompiledPoint:
        plan = compute_plan(spec, replace(config, batch_size=batch), gpu)
        return CompiledPoint(batch, plan.peak_bytes, plan.temporaries_bytes)

    answer, curve, _ = search_curve(plan_at, budget, config.batch_size, known_curve(spec, config, gpu))
    while len(curve.anchors) < 2 and (second := curve.second_anchor()) is not None:
        curve = type(curve).of((*curve.points, plan_at(second)), curve.device_memory_bytes)
    profile = get_profile(spec)
    rows = []
    for batch in (answer.batch, answer.exceeds):
        if batch is None:
            continue
        one = replace(config, batch_size=batch)
        rows.append((spec, one, curve.compiled(batch).peak_bytes, curve.line_peak(batch),
                     estimate_memory(profile, one).peak_bytes, batch == answer.batch))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100-80", choices=sorted(TAGS), help="the card the measurement runs on")
    parser.add_argument("--models", default="ResNet50,MobileNetV2,VGG16")
    parser.add_argument("--save", action="store_true", help=f"add the steps to validation/planned.json (set {SET})")
    args = parser.parse_args(argv)
    card = GPU_PRESETS[args.gpu]
    print(f"{card.name}: plans must fit {(card.memory_bytes - card.overhead_bytes) / GIB:.2f} GiB "
          f"(the card less {card.overhead_bytes / GIB:.2f} GiB of framework overhead, no margin)")
    print(f"{'step':58s} {'XLA plan':>10s} {'line':>10s} {'walk':>10s}  plan says")
    planned = []
    for name in args.models.split(","):
        for spec, config, plan, line, walk, fits in predict(name, args.gpu):
            line_text = f"{line / GIB:9.2f}G" if line is not None else "         -"
            print(f"{spec.key + ' b' + str(config.batch_size) + ' ' + config.optimizer.value:58s} "
                  f"{plan / GIB:9.2f}G {line_text} {walk / GIB:9.2f}G  {'fits' if fits else 'does not fit'}")
            planned.append((spec, config, plan, f"near_limit.py --gpu {args.gpu} --seed {TAGS[args.gpu]}"))
    if args.save:
        add_planned(planned, SET)
        print(f"{len(planned)} steps -> validation/planned.json (set {SET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
