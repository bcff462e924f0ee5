"""Whether XLA's line may be drawn below its first compiled plan: the shipped plans at batches under 32 against the
line through the two smallest plans of the line region at 32 or more, drawn on downwards.

Reads the shipped plans only (``calc/data/xla_plans.json.gz``); compiles nothing. Prints how many small-batch
plans there are, the median, p90 and largest distance from the line, and the worst cases.

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

from calc.xla.curve import PlanCurve, compiled_point  # noqa: E402
from calc.xla.targets import gpu_targets  # noqa: E402

SMALL = 32  # the first batch the shipped curves compile


def main() -> int:
    families = json.loads(gzip.decompress((ROOT / "calc" / "data" / "xla_plans.json.gz").read_bytes()))["families"]
    targets = gpu_targets()
    rows = []
    for family in families.values():
        card = family["label"].rsplit(" on ", 1)[1]
        if card not in targets:
            continue
        points = {int(b): compiled_point(int(b), raw) for b, raw in family["plans"].items()}
        anchors = PlanCurve.of([p for b, p in points.items() if b >= SMALL], targets[card].device_memory_size).anchors
        if len(anchors) < 2:
            continue
        a, b = anchors[0], anchors[1]
        for batch in (b for b in points if b < SMALL):
            line = a.peak_bytes + (b.peak_bytes - a.peak_bytes) * (batch - a.batch) / (b.batch - a.batch)
            rows.append((points[batch].peak_bytes / line - 1, batch, a.batch, b.batch, family["label"]))
    if not rows:
        print("no shipped plan under batch 32 with a line above it")
        return 0
    errors = sorted(abs(r[0]) for r in rows)
    print(f"{len(rows)} shipped plans under batch {SMALL}: from the line drawn on below its region, median "
          f"{statistics.median(errors):.2%}, p90 {errors[int(0.9 * len(errors))]:.2%}, max {errors[-1]:.2%}; "
          f"within 1 %: {sum(e <= 0.01 for e in errors)}; above the line: {sum(r[0] > 0 for r in rows)}")
    for error, batch, lo, hi, label in sorted(rows, key=lambda r: -abs(r[0]))[:8]:
        print(f"  {error:+.2%}  batch {batch}, line through {lo} and {hi}: {label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
