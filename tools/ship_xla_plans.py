"""Writes calc/data/xla_plans.json.gz: the XLA plans shipped with the project.

    python tools/ship_xla_plans.py [--compile [--lines]] [--models A,B | --hub] [--gpus t4,l4]
        [--precisions mixed_float16] [--optimizers adam] [--minutes N]

Shipped are, by family (one configuration on one card, every batch known):

- every case of the XLA data files, so ``python -m calc validate --step xla`` answers in seconds;
- the curves of ``calc/data/xla_shipped_curves.json``: each catalogue model at its own size,
  for the precisions, optimizers and cards it names, from the dashboard's default batch: that
  plan, the second plan the curve asks for (``PlanCurve.second_anchor``) and the search for the
  largest batch at the dashboard's default margin, so that the landing page and a first model
  switch draw the curve and give the largest batch without a compile. The plan at the default
  batch keeps what fills its peak (``calc.xla.peak``, its largest layers) where its compile said.
- the KerasHub setups of that file's ``hub`` list (the first is the dashboard's first KerasHub
  page) the same way, and for a text model the plans the search for its longest sequence at
  that batch reads (``--hub``: these alone);
- the setups of its ``first_views`` list (meshes of several cards, quantized weights): their plan
  at the batch alone (``--first-views``: these alone).

``--compile`` first compiles what the disk cache lacks (hours for every curve on two cores; a
model's configuration is compiled for every card in a row, so the worker builds it once;
``--minutes`` stops starting new ones after that long; ``--lines`` compiles only the two plans
each curve's line needs, so that a first pass gives every curve its line and an approximate
largest batch, and a visitor's page searches the rest in the background). Without it, the file is written from
what the disk cache holds, and a curve nothing was compiled for is left out. The plans are
keyed to the installed jax, jaxlib, plugin and Keras versions: after a version change, run
this again with ``--compile``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from calc.catalogue import CATALOGUE, make_spec
from calc.gpus import GPU_PRESETS
from calc.hub import HubSpec
from calc.types import Device, Optimizer, Precision, TrainingConfig

CURVES = Path(__file__).resolve().parent.parent / "calc" / "data" / "xla_shipped_curves.json"


def validation_requests():
    """(spec, config, gpu key) of every measured XLA case."""
    from calc.requests import config_from_dict, spec_from_dict
    from calc.validation import XLA_DATA, XLA_TARGET, load_measurements

    seen = set()
    for path in XLA_DATA:
        for case in load_measurements(path)["cases"]:
            if case["case"] not in seen and "peak_bytes" in case:
                seen.add(case["case"])
                yield (spec_from_dict(case["spec"]), replace(config_from_dict(case["config"]), device=Device.GPU),
                       XLA_TARGET)


def curve_setups(models: list[str] | None = None, gpus: list[str] | None = None,
                 precisions: list[str] | None = None, optimizers: list[str] | None = None):
    """(spec, config at the first batch, [gpu keys], margin) of every shipped curve (or those of these
    models, cards, precisions and optimizers), in the order to compile: each precision and optimizer in
    turn, every model, every card."""
    data = json.loads(CURVES.read_text())
    cards = [g for g in data["gpus"] if not gpus or g in gpus]
    for precision in [p for p in data["precisions"] if not precisions or p in precisions]:
        for optimizer in [o for o in data["optimizers"] if not optimizers or o in optimizers]:
            for name in models or list(CATALOGUE):
                config = TrainingConfig(batch_size=data["batch"], optimizer=Optimizer(optimizer),
                                        precision=Precision(precision), device=Device.GPU)
                yield make_spec(name), config, cards, data["margin"]


def hub_setups(gpus: list[str] | None = None):
    """(spec, config, [gpu keys], margin) of every shipped KerasHub setup (``hub`` in the curves file):
    the dashboard's first KerasHub page, and the setups named beside it."""
    from calc.hub import make_hub_spec

    data = json.loads(CURVES.read_text())
    for entry in data.get("hub", []):
        spec = make_hub_spec(entry["preset"], entry.get("sequence_length"), entry.get("lora_rank", 0),
                             entry.get("dtype"), entry.get("classes", 2))
        config = TrainingConfig(batch_size=entry["batch"], optimizer=Optimizer(entry["optimizer"]), device=Device.GPU)
        yield spec, config, [g for g in entry["gpus"] if not gpus or g in gpus], data["margin"]


def first_views(gpus: list[str] | None = None):
    """(spec, config, [gpu keys]) of every ``first_views`` setup: a KerasHub setup on a mesh (``DATAxMODEL``) or
    quantized, shipped with its plan at the batch alone."""
    from calc.hub import make_hub_spec

    for entry in json.loads(CURVES.read_text()).get("first_views", []):
        spec = make_hub_spec(entry["preset"], entry.get("sequence_length"), entry.get("lora_rank", 0),
                             entry.get("dtype"), entry.get("classes", 2), entry.get("quantize", ""))
        data, model = (int(n) for n in entry.get("mesh", "1x1").split("x"))
        config = TrainingConfig(batch_size=entry["batch"], optimizer=Optimizer(entry["optimizer"]), device=Device.GPU,
                                num_gpus=data, model_parallel=model, hosts=entry.get("hosts", 1))
        yield spec, config, [g for g in entry["gpus"] if not gpus or g in gpus]


def sequence_families(spec, config, gpu: str, margin: float):
    """The specs at every length the longest-sequence search at ``config``'s batch reads (a text model's)."""
    from calc import xla
    from calc.xla.budget import step_budget
    from calc.xla.search import known_sequence_search

    if not spec.model.text:
        return []
    _, read = known_sequence_search(spec, config.batch_size,
                                    step_budget(GPU_PRESETS[gpu], margin, spec, "", config).plan_bytes,
                                    lambda at: xla.known_plans(at, config, gpu), config)
    return [replace(spec, sequence_length=n) for n in read]


def compile_curve(spec, config, gpu: str, margin: float, lines: bool = False) -> str:
    """Compiles what one shipped curve lacks (``lines``: only the two plans its line needs, no search
    for the largest batch); returns one line on what it holds."""
    from calc import xla
    from calc.xla import CompiledPoint, PlanCurve, compute_plan, known_curve
    from calc.xla.budget import step_budget
    from calc.xla.search import search_curve

    def plan_at(batch: int, explained: bool = False) -> CompiledPoint:
        plan = compute_plan(spec, replace(config, batch_size=batch), gpu, explained=explained)
        return CompiledPoint(batch, plan.peak_bytes, plan.temporaries_bytes)

    memory = xla.target_for(gpu).device_memory_size
    points = [plan_at(config.batch_size, explained=True)]  # the page a first visit shows says what fills it
    while (second := PlanCurve.of(points, memory).second_anchor()) is not None:
        points.append(plan_at(second))
    if lines:
        curve = PlanCurve.of(points, memory)
        return f"{len(curve.points)} plans, line to {curve.line_end()}"
    budget_of = step_budget(GPU_PRESETS[gpu], margin, spec, config.precision.value)
    budget = budget_of.plan_bytes  # the plan and what is kept free beside it, as every page's search
    answer, curve, _ = search_curve(plan_at, budget, config.batch_size,
                                    known_curve(spec, config, gpu).keeping(budget_of.kept.per_sample_bytes))
    line = f"{len(curve.points)} plans, line to {curve.line_end()}, largest batch {answer.batch}"
    if isinstance(spec, HubSpec) and spec.model.text:  # the longest sequence at the batch, as the Estimator shows it
        from calc.xla.search import plan_max_sequence

        longest = plan_max_sequence(spec, config, gpu, budget)
        line += f", longest sequence {longest.max_sequence} ({longest.compiles} lengths)"
    return line


def kept(raw: dict, explained: bool) -> dict:
    """What the shipped file keeps of a plan: ``KEPT_FIELDS``; what fills the peak only for a curve's
    first batch (``explained``: the page a first visit shows), with its largest layers."""
    from calc.xla import cache
    from calc.xla.peak import fold_layers

    out = {k: raw[k] for k in cache.KEPT_FIELDS if k in raw and k not in cache.NOT_SHIPPED}
    if explained and isinstance(raw.get("peak"), dict):
        out["peak"] = {**raw["peak"], "layers": fold_layers(raw["peak"].get("layers", []), cache.SHIPPED_LAYERS)}
    return out


def curve_state(plans: dict[int, dict], gpu: str, margin: float, spec, config) -> tuple[bool, bool]:
    """(whether a shipped curve's plans draw a line, whether they settle its largest batch as the pages search it)."""
    from calc import xla
    from calc.xla import PlanCurve
    from calc.xla.budget import step_budget
    from calc.xla.curve import compiled_point

    budget = step_budget(GPU_PRESETS[gpu], margin, spec, config.precision.value)
    curve = PlanCurve.of([compiled_point(b, raw) for b, raw in plans.items()], xla.target_for(gpu).device_memory_size,
                         kept_per_sample=budget.kept.per_sample_bytes)
    answer = curve.max_batch(budget.plan_bytes)
    return curve.line_end() is not None, answer is not None and answer.settled


def write(models: list[str] | None = None) -> None:
    from calc import xla
    from calc.xla import cache

    versions = xla.plan_versions()
    if versions is None:
        raise SystemExit(xla.unavailable_reason())
    families: dict[str, dict] = {}

    def add(spec, config, gpu, label: str, explained_at: int = 0) -> dict[int, dict] | None:
        """Ships the family's plans; returns them (None when none is known)."""
        request, key = xla.family_request(spec, config, gpu)
        plans = cache.read_family(key)
        if plans:
            families[key] = {"label": label, "plans": {str(b): kept(raw, b == explained_at)
                                                       for b, raw in sorted(plans.items())}}
        return plans or None

    for spec, config, gpu in validation_requests():
        add(spec, config, gpu, f"{spec.key} b{config.batch_size} {config.optimizer.value} {config.precision.value} "
                               f"{config.train_mode.value} on {gpu}")
    lines = settled = total = 0
    for spec, config, gpus, margin in curve_setups():
        for gpu in gpus:
            total += 1
            shipped = add(spec, config, gpu, f"{spec.key} {config.optimizer.value} {config.precision.value} on {gpu}",
                          explained_at=config.batch_size)
            if shipped is not None:
                line, done = curve_state(shipped, gpu, margin, spec, config)
                lines, settled = lines + line, settled + done
    for spec, config, gpus in first_views():
        for gpu in gpus:
            add(spec, config, gpu, f"{spec.key} {config.optimizer.value} mesh {config.mesh} on {gpu}",
                explained_at=config.per_replica_batch)
    for spec, config, gpus, margin in hub_setups():
        for gpu in gpus:
            add(spec, config, gpu, f"{spec.key} {config.optimizer.value} on {gpu}", explained_at=config.batch_size)
            for at in sequence_families(spec, config, gpu, margin):
                if at != spec:
                    add(at, config, gpu, f"{at.key} {config.optimizer.value} on {gpu}")
    text = json.dumps({"format": cache.PLAN_FORMAT, "versions": versions, "families": dict(sorted(families.items()))},
                      separators=(",", ":"), sort_keys=True)
    with gzip.GzipFile(cache.SHIPPED_PLANS, "wb", mtime=0) as f:  # the same plans give the same bytes
        f.write(text.encode())
    count = sum(len(f["plans"]) for f in families.values())
    print(f"{len(families)} families, {count} plans -> {cache.SHIPPED_PLANS} "
          f"({cache.SHIPPED_PLANS.stat().st_size:,} bytes)")
    print(f"catalogue curves: {lines} of {total} with a line, {settled} with the largest batch settled")


def _listed(text: str) -> list[str] | None:
    """A comma-separated option's items; None (every one) when it names none."""
    return [item for item in text.split(",") if item] or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true", help="compile what the disk cache lacks first")
    parser.add_argument("--models", default="", help="only these catalogue models (comma-separated)")
    parser.add_argument("--hub", action="store_true", help="only the KerasHub setups")
    parser.add_argument("--first-views", action="store_true", help="only the first views (meshes, quantized)")
    parser.add_argument("--gpus", default="", help="only these cards (comma-separated preset keys)")
    parser.add_argument("--precisions", default="", help="only these precisions (comma-separated)")
    parser.add_argument("--optimizers", default="", help="only these optimizers (comma-separated)")
    parser.add_argument("--lines", action="store_true",
                        help="with --compile: only the two plans each curve's line needs, no search")
    parser.add_argument("--minutes", type=float, default=0.0, help="start no compile after this long (0: no limit)")
    args = parser.parse_args(argv)
    models, gpus, precisions, optimizers = (_listed(text) for text in (args.models, args.gpus, args.precisions,
                                                                         args.optimizers))
    if args.compile:
        from calc import xla
        from calc.xla import PlanError

        started = time.monotonic()
        if args.first_views:
            for spec, config, cards in first_views(gpus):
                for gpu in cards:
                    try:
                        plan = xla.compute_plan(spec, config, gpu, explained=True)
                        line = f"{plan.peak_bytes / 2**30:.2f} GiB a card"
                    except PlanError as exc:
                        line = f"failed: {exc}"
                    print(f"{spec.key} mesh {config.mesh} on {gpu}: {line} ({time.monotonic() - started:.0f} s)",
                          flush=True)
            write()
            return 0
        for spec, config, gpu in validation_requests():
            xla.compute_plan(spec, config, gpu)
        curves = [] if args.hub else [(spec, config, gpu, margin)
                                      for spec, config, cards, margin in curve_setups(models, gpus, precisions, optimizers)
                                      for gpu in cards]
        if not models and not precisions and not optimizers:  # the KerasHub setups too, unless a slice of the curves is asked for
            curves += [(spec, config, gpu, margin) for spec, config, cards, margin in hub_setups(gpus) for gpu in cards]
        for spec, config, gpu, margin in curves:
            if args.minutes and time.monotonic() - started > 60 * args.minutes:
                print("time is up: writing what is compiled")
                break
            try:
                line = compile_curve(spec, config, gpu, margin, lines=args.lines)
            except PlanError as exc:
                line = f"failed: {exc}"
            print(f"{spec.key} {config.optimizer.value} {config.precision.value} on {gpu}: {line} "
                  f"({time.monotonic() - started:.0f} s)", flush=True)
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
