"""``validate``: the estimate or XLA's plan against every measured case; ``--rebuild-ledgers``."""

from __future__ import annotations

import argparse
import sys
from typing import Any
from calc.cli.options import print_out
from calc.validation.ledgers import fresh_profile


def cmd_validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from calc.validation import CPU_DATA, caveat_records, records_as_json, reproducibility_json, summarize

    if args.rebuild_ledgers:
        return _rebuild_ledgers(args)
    if args.step == "xla":
        return _validate_plan(args)
    data = Path(args.data) if args.data else CPU_DATA
    if not data.is_file():
        raise ValueError(f"no validation data at {data}")
    from calc.validation.data import measured_cases
    from calc.validation.ledgers import read_ledgers
    from calc.validation.report import validate_committed

    measured_cases(data)  # a file of another shape is said in one line before any ledger is read
    # Absent ledgers (a package without the repository) are built, as they always were.
    if (ledgers := read_ledgers()) is not None and (why := ledgers.why_unusable()) is not None:
        print(why, file=sys.stderr)
    rows = validate_committed(data, args.jobs)
    s = summarize(rows)
    if args.save:
        from calc.validation import report_path, save_report

        save_report(rows, report_path(data))
    out = _rows_json(rows, s)
    lines = [f"{'case':72s} {'measured':>10s} {'predicted':>10s} {'error':>8s}"]
    lines += [f"{r.case:72s} {r.measured_bytes / 2**20:8.1f}Mi {r.predicted_bytes / 2**20:8.1f}Mi {r.relative_error * 100:+7.1f}%"
              for r in rows]
    lines.append(f"{s.cases} cases: median |error| {s.median_abs * 100:.1f}%, 90th percentile {s.p90_abs * 100:.1f}%, "
                 f"max {s.max_abs * 100:.1f}%; under-predicted {s.under_count} cases, worst {s.worst_under * 100:+.1f}%")
    lines.append(f"measurement noise: {s.within_runs} of {s.cases} predictions lie within their case's measured runs; "
                 f"off the nearest run: median {s.median_from_runs * 100:.1f}%, max {s.max_from_runs * 100:.1f}%")
    out.update(within_measured_runs=s.within_runs, median_abs_error_from_nearest_run=s.median_from_runs,
               max_abs_error_from_nearest_run=s.max_from_runs)
    repro, single = reproducibility_json(rows), reproducibility_json(rows, against_prediction=True)
    out.update(reproducibility=repro, estimate_against_runs=single)
    if repro is not None and single is not None:
        for what, r in (("TensorFlow against itself, each run against the median of its case's other runs", repro),
                        ("the estimate against the same single runs", single)):
            lines.append(f"{what}: median {r['median_deviation'] * 100:.1f}%; {r['runs_beyond']} of {r['runs']} runs "
                         f"({r['runs_beyond'] / r['runs'] * 100:.1f}%) more than {r['threshold'] * 100:.0f}% off, in "
                         f"{r['cases_with_run_beyond']} of {r['cases']} cases")
    records = caveat_records(rows)
    lines.append("by what makes runs of a step differ (calc.estimate.spread_caveats; a case with two kinds counts in both):")
    out["caveats"] = records_as_json(records)
    for kind, record in records.items():
        lines.append(f"  {kind:20s} {record.cases:4d} cases: {record.lowest_error * 100:+.1f}% to "
                     f"{record.highest_error * 100:+.1f}%, a margin of {record.margin_for_every_run * 100:.1f}% "
                     "covers every run")
    seed = _rule_of_thumb_error(rows)
    out["nnc_rule_median_abs_error"] = seed
    lines.append(f"for scale, the Neural Network Console blog post's rule ((neurons x batch + params) x 8 bytes) on the same cases: "
                 f"median |error| {seed * 100:.0f}%")
    print_out(out, args.json, lines)
    return 0


def _rows_json(rows, s) -> dict[str, Any]:
    """The cases and the summary of one validation, as ``--json`` prints them."""
    return {
        "cases": [{"case": r.case, "measured_bytes": r.measured_bytes, "predicted_bytes": r.predicted_bytes,
                   "relative_error": round(r.relative_error, 4), "measured_spread": r.spread} for r in rows],
        "median_abs_error": s.median_abs, "p90_abs_error": s.p90_abs, "max_abs_error": s.max_abs,
        "under_predicted": s.under_count, "worst_under_prediction": s.worst_under,
    }


def _validate_plan(args: argparse.Namespace) -> int:
    """XLA's plan against every XLA data file (or --data): the step Keras compiles on a GPU."""
    from pathlib import Path

    from calc.validation import XLA_DATA, XLA_TARGET, plan_report_path, save_report, summarize, validate_plan

    paths = [Path(args.data)] if args.data else list(XLA_DATA)
    lines: list[str] = []
    out: dict[str, Any] = {"step": "xla", "target": XLA_TARGET, "files": []}
    for path in paths:
        if not path.is_file():
            raise ValueError(f"no validation data at {path}")
        rows = validate_plan(path)
        s = summarize(rows)
        if args.save:
            save_report(rows, plan_report_path(path))
        lines.append(f"{path.name}: XLA's plan for {XLA_TARGET} (jit_compile=True, autotuning off) against what was measured")
        lines += [f"  {r.case:72s} {r.measured_bytes / 2**20:8.1f}Mi {r.predicted_bytes / 2**20:8.1f}Mi "
                  f"{r.relative_error * 100:+7.1f}%" for r in rows]
        lines.append(f"  {s.cases} cases: median |error| {s.median_abs * 100:.1f}%, 90th percentile {s.p90_abs * 100:.1f}%, "
                     f"max {s.max_abs * 100:.1f}%; under-predicted {s.under_count} cases, worst {s.worst_under * 100:+.1f}%")
        out["files"].append({"data": path.name, **_rows_json(rows, s)})
    print_out(out, args.json, lines)
    return 0


def _rule_of_thumb_error(rows) -> float:
    """The median |error| of the Neural Network Console blog post's rule on the same cases."""
    import statistics

    return statistics.median(abs(r.rule_of_thumb_bytes - r.measured_bytes) / r.measured_bytes for r in rows)


def _rebuild_ledgers(args: argparse.Namespace) -> int:
    """Builds every validation spec's ledger with this Keras and compares them with the committed ones."""
    from calc.validation.ledgers import LEDGERS, rebuild, validation_specs, write_ledgers

    def progress(done: int, total: int, key: str) -> None:
        print(f"[{done}/{total}] {key}", file=sys.stderr, flush=True)

    built, differ, missing = rebuild(fresh_profile, progress, only_missing=args.missing_only)
    same = len(built) - len(differ) - len(missing)
    lines = [f"{len(missing)} ledgers built, {same} committed ones kept" if args.missing_only else
             f"{len(built)} ledgers built: {same} equal the committed ones, "
             f"{len(differ)} differ, {len(missing)} are not committed"]
    lines += [f"  differs: {key}" for key in differ] + [f"  not committed: {key}" for key in missing]
    if args.save:
        write_ledgers(built, validation_specs())
        lines.append(f"wrote {LEDGERS}")
    print_out({"built": len(built), "differ": differ, "missing": missing}, args.json, lines)
    return 1 if (differ or missing) and not args.save else 0


