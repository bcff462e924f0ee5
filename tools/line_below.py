"""Whether XLA's line may be drawn below its first compiled plan at 32, two ways, from the shipped plans at
batches up to 32:

- on downward: each plan under 32 against the line through the two smallest plans of the line region at 32
  or more, drawn on below them;
- between small plans: each plan of the line region at 32 or less that has compiled neighbours in the line
  region on both sides, against the line through those two neighbours (what shipping a few small-batch plans a
  curve would give the batches between them).

Reads the shipped plans only (``calc/data/xla_plans.json.gz``); compiles nothing. Prints, for each way, how many
plans it could check, the median, p90 and largest distance from the line, how many are within 1 %, and the
worst cases.

    python tools/line_below.py
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calc.xla.curve import CompiledPoint, PlanCurve, compiled_point  # noqa: E402
from calc.xla.targets import gpu_targets  # noqa: E402

SMALL = 32  # the first batch the shipped curves compile

Row = tuple[float, int, int, int, str]  # (plan / line - 1, batch, the line's two batches, family)


def _on_line(a: CompiledPoint, b: CompiledPoint, batch: int) -> float:
    return a.peak_bytes + (b.peak_bytes - a.peak_bytes) * (batch - a.batch) / (b.batch - a.batch)


def checks(families: dict) -> tuple[list[Row], list[Row]]:
    """(the plans under 32 against the line drawn on downward, the small plans against their neighbours' line)."""
    targets = gpu_targets()
    downward: list[Row] = []
    between: list[Row] = []
    for family in families.values():
        card = family["label"].rsplit(" on ", 1)[1]
        if card not in targets:
            continue
        points = {int(b): compiled_point(int(b), raw) for b, raw in family["plans"].items()}
        memory = targets[card].device_memory_size
        anchors = PlanCurve.of([p for b, p in points.items() if b >= SMALL], memory).anchors
        if len(anchors) >= 2:
            a, b = anchors[0], anchors[1]
            downward += [(points[n].peak_bytes / _on_line(a, b, n) - 1, n, a.batch, b.batch, family["label"])
                         for n in points if n < SMALL]
        small = [p for p in PlanCurve.of(points.values(), memory).anchors if p.batch <= SMALL]
        between += [(m.peak_bytes / _on_line(a, c, m.batch) - 1, m.batch, a.batch, c.batch, family["label"])
                    for a, m, c in zip(small, small[1:], small[2:])]
    return downward, between


def report(title: str, rows: list[Row]) -> None:
    if not rows:
        print(f"{title}: no plan to check")
        return
    errors = sorted(abs(r[0]) for r in rows)
    print(f"{title}: {len(rows)} plans, median {statistics.median(errors):.2%}, p90 "
          f"{errors[int(0.9 * len(errors))]:.2%}, max {errors[-1]:.2%}; within 1 %: "
          f"{sum(e <= 0.01 for e in errors)}; above the line: {sum(r[0] > 0 for r in rows)}")
    for error, batch, lo, hi, label in sorted(rows, key=lambda r: -abs(r[0]))[:6]:
        print(f"  {error:+.2%}  batch {batch}, line through {lo} and {hi}: {label}")


def main() -> int:
    families = json.loads(gzip.decompress((ROOT / "calc" / "data" / "xla_plans.json.gz").read_bytes()))["families"]
    downward, between = checks(families)
    report(f"shipped plans under batch {SMALL}, from the line drawn on below its region", downward)
    report(f"shipped plans up to batch {SMALL}, from the line through their compiled neighbours", between)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
