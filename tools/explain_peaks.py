"""What fills XLA's plan at its peak, for a set of compiled steps: the table in docs/XLA_PEAK.md.

    python tools/explain_peaks.py            # the steps of validation/xla_peak_steps.json: compiles what the cache lacks
    python tools/explain_peaks.py --write    # and writes it into docs/XLA_PEAK.md

Each step is compiled for its card without a GPU (``calc.xla.compute_plan(..., explained=True)``),
and its peak is split by kind (``calc.xla.peak``). The table says, per step, the share of each
kind, whether the kinds sum to the plan's peak to the byte, and when the peak comes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from calc.catalogue import make_spec
from calc.types import Device, Optimizer, Precision, TrainingConfig, TrainMode

DOC = Path(__file__).resolve().parent.parent / "docs" / "XLA_PEAK.md"
BEGIN, END = "<!-- explain_peaks: begin -->", "<!-- explain_peaks: end -->"
STEPS = Path(__file__).resolve().parent.parent / "validation" / "xla_peak_steps.json"
COLUMNS = ("weights", "optimizer_state", "input_batch", "activations", "gradients", "optimizer", "workspace",
           "layout_copies", "other", "packing", "step_outputs")
HEADS = ("weights", "opt. state", "batch", "activations", "gradients", "opt. temp.", "workspace", "layout copies",
         "other", "packing", "outputs")


def row(step: dict) -> str:
    from calc.xla import compute_plan

    name, side, batch, gpu = step["model"], step["image_size"], step["batch_size"], step["gpu"]
    optimizer, precision, mode, last_n = step["optimizer"], step["precision"], step["train_mode"], step.get(
        "last_n_layers", 0)
    spec = make_spec(name, side, include_top=mode != "frozen_backbone")
    config = TrainingConfig(batch_size=batch, optimizer=Optimizer(optimizer), precision=Precision(precision),
                            device=Device.GPU, train_mode=TrainMode(mode), last_n_layers=last_n)
    plan = compute_plan(spec, config, gpu, explained=True)
    breakdown = plan.breakdown()
    what = f"{name} {side} b{batch} {optimizer} {precision} {mode}{f' {last_n}' if last_n else ''} on {gpu}"
    if breakdown is None or plan.explained is None:
        return f"| {what} | {plan.peak_bytes / 2**20:,.1f} | " + " | ".join("?" for _ in COLUMNS) + " | no | |"
    cells = [f"{100 * breakdown[k] / plan.peak_bytes:.1f}" if breakdown[k] else "0" for k in COLUMNS]
    exact = sum(breakdown.values()) == plan.peak_bytes
    ex = plan.explained
    moment = {"backward": "backward of", "forward": "forward of", "update": "update"}.get(ex.moment_phase, "XLA copy,")
    return (f"| {what} | {plan.peak_bytes / 2**20:,.1f} | " + " | ".join(cells)
            + f" | {'yes' if exact else 'NO'} | {moment} {ex.moment_layer if ex.moment_phase != 'update' else ''} |")


def table() -> str:
    lines = ["| step | peak MiB | " + " | ".join(f"{h} %" for h in HEADS) + " | sum = peak | the peak comes in |",
             "|---|---:|" + "---:|" * len(HEADS) + "---|---|"]
    for step in json.loads(STEPS.read_text())["steps"]:
        lines.append(row(step))
        print(lines[-1], flush=True)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the table into {DOC.name}")
    args = parser.parse_args(argv)
    text = table()
    if args.write:
        doc = DOC.read_text()
        start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
        DOC.write_text(doc[:start] + "\n" + text + "\n" + doc[end:])
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
