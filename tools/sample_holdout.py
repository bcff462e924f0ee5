"""Draws a random holdout of validation cases, so that a holdout is not chosen by hand.

    python tools/sample_holdout.py --seed 12 --count 14 [--models A,B] [--min-peak-gib 0] [--max-peak-gib 2.5] [--precision mixed_float16] [--ema] [--trained | --frozen]

Every earlier holdout was picked by a person (new families, new optimizers, hard
layouts), which tests what that person thought of. This draws configurations the way
the issue describes the set (every catalogue model, batch 1-64, every optimizer family
and its options, the three precisions, full training, a frozen backbone or the last N
layers, sometimes gradient accumulation, a non-square image or one channel), keeps those
this 2-core machine measures in a few minutes (predicted peak and activations under the
limits), and prints them with the engine's prediction beside each; ``--save`` adds them to
``validation/planned.json``, to be committed before ``tools/measure_validation.py`` measures them.
``--precision`` sets every drawn case's precision (the rest is drawn as before), for a
holdout aimed at one precision's mechanisms; ``--trained`` keeps only the drawn steps
that train the backbone (full training or the last N layers); ``--frozen`` keeps only the
drawn steps with a frozen part (a frozen backbone or the last N layers), for a holdout aimed
at the allocator's pool history, which decides those steps' peaks. ``--min-peak-gib`` keeps
only the drawn steps predicted at least that large, for a holdout of the larger steps that
a GPU user meets (most random draws under the time limit peak below 1 GiB). ``--models``
draws from the named catalogue models only, for a holdout aimed at one family's mechanism;
``--ema`` sets use_ema=True on every draw, for one aimed at the EMA's update.

``--gpu`` draws a holdout for a lent GPU machine (``tools/measure_gpu_tf.py measure --planned``):
each kept step is predicted twice, by the walk of TensorFlow's graph executor on a GPU
(set ``gpu``) and by XLA's plan for the H100 (set ``gpu_xla``, compiled here: about a
minute a step); the walk's prediction must lie within the limits, and the plan's under
``--max-peak-gib`` too.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import replace

from calc.catalogue import CATALOGUE
from calc.estimate import estimate_memory
from calc.profiles import get_profile
from calc.types import Device
from calc.validation import XLA_TARGET, case_id
from calc.validation.planned import PLANNED, add_planned, make_case

SIDES = (64, 96, 128, 160, 192, 224, 256, 299, 331, 380)
BATCHES = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)
OPTIONS = {  # optimizer -> options it may take, each drawn with probability 1/3
    "sgd": ("momentum",), "rmsprop": ("momentum", "centered"), "adam": ("amsgrad",), "adamw": ("amsgrad",),
    "nadam": (), "adamax": (), "adagrad": (), "adadelta": (), "ftrl": (), "lion": (), "lamb": (),
    "adafactor": (),
}


def draw(rng: random.Random, models: tuple[str, ...] = ()) -> tuple[tuple, dict]:
    """One configuration: (``make_case`` positional arguments, keyword arguments)."""
    entry = CATALOGUE[rng.choice(sorted(models or CATALOGUE))]
    sides = [s for s in SIDES if entry.min_size <= s <= max(entry.default_size, 224)]
    size = rng.choice(sides)
    if rng.random() < 0.15:
        other = rng.choice(sides)
        size = (size, other) if other != size else size
    optimizer = rng.choice(sorted(OPTIONS))
    options = {o: True for o in OPTIONS[optimizer] if rng.random() < 1 / 3}
    if options.get("momentum") and options.get("centered"):
        del options["centered"]
    if rng.random() < 0.1:
        options["use_ema"] = True
    mode = rng.choices(("all", "frozen_backbone", "last_n"), weights=(6, 3, 1))[0]
    kwargs = {"precision": rng.choice(("float32", "mixed_float16", "mixed_bfloat16")), "mode": mode, **options}
    if mode == "last_n":
        kwargs["last_n"] = rng.choice((10, 20, 30, 40, 60))
    if mode == "all" and rng.random() < 0.1:
        kwargs["accum"] = rng.choice((2, 4))
    if rng.random() < 0.1:
        kwargs["channels"] = 1
    if rng.random() < 0.2:
        kwargs["classes"] = 10
    return (entry.name, size, rng.choice(BATCHES), optimizer), kwargs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=14)
    parser.add_argument("--min-peak-gib", type=float, default=0.0)
    parser.add_argument("--models", default="", help="comma-separated catalogue names to draw from (default: all)")
    parser.add_argument("--max-peak-gib", type=float, default=2.5)
    parser.add_argument("--max-activations-gib", type=float, default=1.5)
    parser.add_argument("--precision", choices=("float32", "mixed_float16", "mixed_bfloat16"))
    parser.add_argument("--ema", action="store_true", help="every draw with use_ema=True")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--trained", action="store_true")
    group.add_argument("--frozen", action="store_true")
    parser.add_argument("--gpu", action="store_true",
                        help="a GPU holdout: the walk on a GPU (set gpu) and XLA's plan for the H100 (set gpu_xla)")
    parser.add_argument("--save", action="store_true",
                        help="add the kept cases with their predictions to validation/planned.json (commit it before measuring)")
    args = parser.parse_args()
    models = tuple(m for m in args.models.split(",") if m)
    unknown = [m for m in models if m not in CATALOGUE]
    if unknown:
        parser.error(f"not catalogue models: {', '.join(unknown)}")
    rng = random.Random(args.seed)
    kept, drawn, planned, planned_xla = 0, 0, [], []
    while kept < args.count:
        drawn += 1
        case_args, kwargs = draw(rng, models)
        if args.precision:
            kwargs["precision"] = args.precision
        if args.ema:
            kwargs["use_ema"] = True
        if args.trained and kwargs["mode"] == "frozen_backbone":
            continue
        if args.frozen and kwargs["mode"] == "all":
            continue
        try:
            spec, config = make_case(*case_args, **kwargs)
            if args.gpu:
                config = replace(config, device=Device.GPU)
            estimate = estimate_memory(get_profile(spec), config)
        except ValueError as exc:  # a size the model refuses, say
            print(f"# skipped {case_args} {kwargs}: {exc}", file=sys.stderr)
            continue
        if not args.min_peak_gib * 2**30 <= estimate.peak_bytes <= args.max_peak_gib * 2**30:
            continue
        if estimate.activations_bytes > args.max_activations_gib * 2**30:
            continue
        planned_peak = 0
        if args.gpu:
            from calc.xla import PlanError, compute_plan

            try:
                planned_peak = compute_plan(spec, config, XLA_TARGET).peak_bytes
            except PlanError as exc:
                print(f"# skipped {case_id(spec, config)}: {exc}", file=sys.stderr)
                continue
            if planned_peak > args.max_peak_gib * 2**30:
                continue
            planned_xla.append((spec, config, planned_peak, " ".join(sys.argv[1:])))
        kept += 1
        planned.append((spec, config, estimate.peak_bytes, " ".join(sys.argv[1:])))
        xla = f"  XLA's plan {planned_peak / 2**20:9.1f} MiB" if args.gpu else ""
        print(f"{case_id(spec, config):80s} predicted {estimate.peak_bytes / 2**20:9.1f} MiB{xla}", flush=True)
    print(f"# {kept} kept of {drawn} drawn (seed {args.seed})", file=sys.stderr)
    if args.save:
        add_planned(planned, "gpu" if args.gpu else "cpu")
        if args.gpu:
            add_planned(planned_xla, "gpu_xla")
        print(f"# added to {PLANNED}", file=sys.stderr)


if __name__ == "__main__":
    main()
