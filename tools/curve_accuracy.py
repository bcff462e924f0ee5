"""XLA's plan curve against plans compiled at the same batches, and the largest batch it finds.

    python tools/curve_accuracy.py [--only TEXT] [--save]

For each configuration of ``validation/curve_cases.json`` it does what the dashboard does
on a first visit: compiles the plan at the configuration's batch and the second plan the
curve asks for (``PlanCurve.second_anchor``), then draws the line through those two. It
then compiles plans at other batches where the line is drawn (from the smaller of the two
to the line's end, where XLA's temporaries would reach its rematerialisation limit) and sets each
against the drawn point; two more past the line's end show how far the plan bends under
the line near the card's memory. Last, it runs the search for the largest batch at the
dashboard's default margin, from every plan compiled so far.

Compiles go through the disk cache, so a second run compiles nothing. ``--save`` writes
``calc/data/xla_curve_accuracy.json``, which ``docs/ACCURACY.md`` tabulates
(``tools/accuracy_tables.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from calc.catalogue import CATALOGUE, make_spec
from calc.gpus import GPU_PRESETS
from calc.types import Optimizer, Precision, TrainingConfig, TrainMode
from calc.xla import CompiledPoint, PlanCurve, compute_plan, known_curve, plan_budget
from calc.xla.search import search_curve

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "validation" / "curve_cases.json"
REPORT = ROOT / "calc" / "data" / "xla_curve_accuracy.json"


def case_setup(case: dict, first_batch: int):
    """(label, spec, config, gpu key) of one case of the cases file."""
    entry = CATALOGUE[case["model"]]
    train_mode = TrainMode(case.get("train_mode", "all"))
    spec = make_spec(entry.name, entry.default_size, include_top=train_mode is not TrainMode.FROZEN_BACKBONE)
    config = TrainingConfig(batch_size=first_batch, optimizer=Optimizer(case["optimizer"]),
                            precision=Precision(case.get("precision", "float32")), train_mode=train_mode,
                            last_n_layers=case.get("last_n", 0))
    label = (f"{entry.name} {entry.default_size} {config.optimizer.value} {config.precision.value} "
             f"{train_mode.value}{' ' + str(config.last_n_layers) if config.last_n_layers else ''} on {case['gpu']}")
    return label, spec, config, case["gpu"]


def test_batches(start: int, end: int, anchors: set[int]) -> list[int]:
    """Batches to compile where the line is drawn: just above its start, and a spread up to its end."""
    picks = {start + max(1, start // 2), round(end * 0.25), round(end * 0.5), round(end * 0.75), end}
    return sorted(b for b in picks if start < b <= end and b not in anchors)


def run_case(case: dict, first_batch: int, margin: float) -> dict:
    label, spec, config, gpu = case_setup(case, first_batch)
    started = time.perf_counter()

    def plan_at(batch: int) -> CompiledPoint:
        plan = compute_plan(spec, replace(config, batch_size=batch), gpu)
        return CompiledPoint(batch, plan.peak_bytes, plan.temporaries_bytes)

    memory = known_curve(spec, config, gpu).device_memory_bytes
    anchors = [plan_at(first_batch)]
    while (second := PlanCurve.of(anchors, memory).second_anchor()) is not None:
        anchors.append(plan_at(second))
    line = PlanCurve.of(anchors, memory)
    end = line.line_end()
    rows = []
    if end is not None:
        for batch in test_batches(line.line_start() or 1, end, {p.batch for p in anchors}):
            compiled, drawn = plan_at(batch), line.at(batch)
            assert drawn is not None
            rows.append({"batch": batch, "compiled_bytes": compiled.peak_bytes, "drawn_bytes": drawn.peak_bytes,
                         "error": (drawn.peak_bytes - compiled.peak_bytes) / compiled.peak_bytes})
        beyond = []
        for batch in (round(end * 1.15), round(end * 1.3)):
            compiled = plan_at(batch)
            peak = line.line_peak(batch) or 1
            beyond.append({"batch": batch, "compiled_bytes": compiled.peak_bytes, "line_bytes": peak,
                           "under_line": (compiled.peak_bytes - peak) / peak})
    else:
        beyond = []
    budget = plan_budget(GPU_PRESETS[gpu], margin).plan_bytes
    curve = known_curve(spec, config, gpu)
    answer, _, searched = search_curve(plan_at, budget, first_batch, curve)
    return {"case": label, "gpu": gpu, "anchors": sorted(p.batch for p in anchors), "line_end": end,
            "points": rows, "beyond": beyond, "plan_budget_bytes": budget, "max_batch": answer.batch,
            "settled": answer.settled, "exceeds": answer.exceeds, "search_compiles": len(searched),
            "seconds": round(time.perf_counter() - started, 1)}


def summary(results: list[dict]) -> dict:
    errors = [abs(p["error"]) for r in results for p in r["points"]]
    return {"configurations": len(results), "drawn_points": len(errors),
            "median_abs_error": statistics.median(errors) if errors else None,
            "max_abs_error": max(errors) if errors else None,
            "settled": sum(r["settled"] for r in results),
            "search_compiles_median": statistics.median(r["search_compiles"] for r in results) if results else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="only the cases whose label contains this text")
    parser.add_argument("--save", action="store_true", help=f"write {REPORT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    data = json.loads(CASES.read_text())
    results = []
    for case in data["cases"]:
        label = case_setup(case, data["first_batch"])[0]
        if args.only and args.only not in label:
            continue
        result = run_case(case, data["first_batch"], data["margin"])
        results.append(result)
        worst = max((abs(p["error"]) for p in result["points"]), default=0.0)
        print(f"{label}: anchors {result['anchors']}, line to {result['line_end']}, {len(result['points'])} drawn "
              f"points, worst {worst:.2%}; largest batch {result['max_batch']}"
              f"{'' if result['settled'] else ' (not settled)'} after {result['search_compiles']} search compiles "
              f"({result['seconds']:.0f} s)", flush=True)
    s = summary(results)
    print(json.dumps(s, indent=1))
    if args.save:
        REPORT.write_text(json.dumps({"summary": s, "cases": results}, indent=1) + "\n")
        print(f"-> {REPORT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
