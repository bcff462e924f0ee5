"""Every measured GPU step against the margin a verdict keeps: flat, as before, and from the mechanism.

For each step of the two records behind XLA's verdicts (``calc.validation.margins``: TensorFlow's XLA step on
an H100, KerasHub steps on an H200) it takes the card on which the verdict would just say "fits" (the plan,
with what the verdict keeps free, filling the card less the margin exactly) and asks whether the measured
step fitted that card. The framework overhead stands outside the measured peaks and the plans alike, so it
is left out. Prints the Markdown table of docs/ACCURACY.md ("Margins") and the summary lines.

    python tools/margin_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calc.validation.margins import MarginCase, PlanMargin, hub_plan_margin, plan_margin  # noqa: E402

MIB = float(1 << 20)
GIB = float(1 << 30)


def edge_card(needed: int, share: float) -> float:
    """The card's bytes on which ``needed`` fills the card less ``share`` exactly."""
    return needed / (1 - share)


def row(step: MarginCase, record: PlanMargin) -> tuple[str, ...]:
    old_card = edge_card(step.plan_bytes, record.flat)
    new_card = edge_card(step.plan_bytes + step.kept_bytes, record.fraction)
    old_free, new_free = old_card - step.plan_bytes, new_card - step.plan_bytes
    return (step.case, f"{step.plan_bytes / GIB:.3f}", f"{step.measured_bytes / GIB:.3f}",
            f"{(step.measured_bytes - step.plan_bytes) / MIB:+,.0f}",
            f"{record.flat:.1%} = {old_free / MIB:,.0f}", "yes" if step.measured_bytes <= old_card else "NO",
            f"{step.kept_bytes / MIB:,.0f} + {record.fraction:.1%} = {new_free / MIB:,.0f}",
            "yes" if step.measured_bytes <= new_card else "NO")


def main() -> int:
    head = ("step", "plan GiB", "measured GiB", "over the plan MiB", "flat margin: share = MiB kept", "fits",
            "mechanism: MiB + residual = MiB kept", "fits")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    summary = []
    for record, what in ((plan_margin(), "TensorFlow's XLA step, H100 (cuDNN workspace)"),
                         (hub_plan_margin(), "KerasHub on JAX, H200, autotuner on (logits buffer)")):
        lines.append(f"| **{what}** |" + " |" * (len(head) - 1))
        rows = [row(s, record) for s in record.steps]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        kept_less = sum(1 for s in record.steps
                        if edge_card(s.plan_bytes + s.kept_bytes, record.fraction) < edge_card(s.plan_bytes, record.flat))
        summary.append(f"{what}: {record.cases} steps; flat share {record.flat:.1%}, residual {record.fraction:.1%}; "
                       f"every step fits under the mechanism's margin: "
                       f"{all(r[-1] == 'yes' for r in rows)}; the mechanism keeps less than the flat share for "
                       f"{kept_less} of {record.cases}")
    print("\n".join(lines))
    print()
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
