"""Scores a holdout at the predictions committed before it was measured.

    python tools/score_holdout.py gpu_xla calc/data/gpu_tf_h100_xla.json   # XLA's plan, the H100 holdout
    python tools/score_holdout.py gpu calc/data/gpu_tf_h100.json           # the walk, the same steps, graph executor
    python tools/score_holdout.py gpu_xla calc/data/gpu_tf_h100_xla.json --seed 2612   # one holdout of the set
    python tools/score_holdout.py cpu calc/data/validation_cpu.json

Reads the set's cases and predictions from ``validation/planned.json``
(``tools/sample_holdout.py --save``) and their measured peaks from the data file, and
prints each case's error (predicted / measured - 1) and the summary. The predictions are
the ones on record, not recomputed: the engine may have changed since.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from calc.validation import ValidationRow, summarize
from calc.validation.data import measured_cases
from calc.validation.planned import PLANNED, planned_predictions

MIB = 1 << 20


def holdout_rows(validation_set: str, data: Path, planned: Path = PLANNED,
                 seed: int | None = None) -> tuple[list[ValidationRow], list[str]]:
    """The measured cases of the set (with ``seed``, of that draw) with their recorded predictions,
    and the ids not measured yet."""
    predicted = planned_predictions(validation_set, planned, seed)
    measured = {case["case"]: (case, spec, config) for case, spec, config in measured_cases(data)}
    rows = [ValidationRow(cid, spec, config, case["peak_bytes"], case.get("spread", 0.0) or 0.0, predicted[cid],
                          tuple(case.get("peaks_bytes", ())))
            for cid, (case, spec, config) in measured.items() if cid in predicted]
    return rows, sorted(set(predicted) - set(measured))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", help="the planned set: cpu, custom, gpu or gpu_xla")
    parser.add_argument("data", type=Path, help="the data file its measurements went into")
    parser.add_argument("--seed", type=int, help="only the holdout drawn with this seed")
    args = parser.parse_args()
    rows, missing = holdout_rows(args.set, args.data, seed=args.seed)
    for r in sorted(rows, key=lambda r: r.relative_error):
        print(f"{r.case:82s} predicted {r.predicted_bytes / MIB:8.1f}  measured {r.measured_bytes / MIB:8.1f} MiB"
              f"  {r.relative_error * 100:+6.1f} %")
    for cid in missing:
        print(f"{cid:82s} not measured")
    if not rows:
        print(f"no case of set {args.set!r} is measured in {args.data}", file=sys.stderr)
        return 1
    s = summarize(rows)
    print(f"{s.cases} cases: median |error| {s.median_abs * 100:.1f} %, 90th percentile {s.p90_abs * 100:.1f} %, "
          f"max {s.max_abs * 100:.1f} %, under-predicted {s.under_count} (worst {s.worst_under * 100:+.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
