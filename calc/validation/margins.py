"""The safety margin XLA's plan needs, from its measured record.

XLA's plan lies a little under TensorFlow's XLA step (cuDNN's autotuned workspaces are
not in it, and TensorFlow's runtime holds a few MiB beside the program): a verdict from the
plan keeps at least the share of the card under which every measured step would have fit.
That share is read from the committed report of the plan against TensorFlow's XLA step on
an H100 (``python -m calc validate --step xla --data calc/data/gpu_tf_h100_xla.json --save``),
so new measurements move it, and no constant here does. A KerasHub model's verdict reads the
KerasHub steps run on an H200 against their plans on record instead (``hub_plan_margin``):
there XLA's autotuner, which the plan leaves out, raised the process's peak by up to a quarter.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from calc.validation.data import GPU_TF_XLA_DATA, HUB_GPU_DATA
from calc.validation.records import margin_for_runs


@dataclass(frozen=True)
class PlanMargin:
    """The measured share of the card a plan's verdict keeps free, and what it comes from."""

    fraction: float  # the safety margin under which every measured step fits (0 without a report)
    cases: int  # measured steps behind it
    worst_under: float  # the plan's worst under-prediction, relative to the measured peak (<= 0)
    record: str = "tf_h100"  # whose steps: TensorFlow's XLA step on an H100, or "hub_h200": KerasHub's on an H200

    @property
    def worst_excess(self) -> float:
        """How much more than the plan the worst measured step took, relative to the plan (>= 0)."""
        return -self.worst_under / (1 + self.worst_under)


@functools.cache
def plan_margin() -> PlanMargin:
    """The margin the plan's measured record asks for: ``margin_for_every_run`` over every case of
    the plan report (``calc.validation.records.margin_for_runs``). Without a report, 0 and 0 cases."""
    path = GPU_TF_XLA_DATA.with_name(GPU_TF_XLA_DATA.stem + "_plan_report.json")
    try:
        cases = json.loads(path.read_text())["cases"]
        runs = [(c.get("runs_bytes") or [c["measured_bytes"]], int(c["predicted_bytes"])) for c in cases]
        errors = [float(c["relative_error"]) for c in cases]
    except (OSError, ValueError, KeyError, TypeError):
        return PlanMargin(0.0, 0, 0.0)
    if not runs:
        return PlanMargin(0.0, 0, 0.0)
    return PlanMargin(max(margin_for_runs(r, p) for r, p in runs), len(runs), min(0.0, *errors))


@functools.cache
def hub_plan_margin() -> PlanMargin:
    """The margin the KerasHub steps measured on an H200 ask for: each measured peak (the process's,
    XLA's autotuner on, ``HUB_GPU_DATA``) against the plan on record for it (``validation/planned.json``,
    set ``hub_gpu``). Without them, 0 and 0 cases."""
    from calc.validation.planned import planned_predictions

    try:
        measured = {c["case"]: int(c["peak_bytes"]) for c in json.loads(HUB_GPU_DATA.read_text())["cases"]
                    if c.get("peak_bytes")}
        predicted = planned_predictions("hub_gpu")
    except (OSError, ValueError, KeyError, TypeError):
        return PlanMargin(0.0, 0, 0.0, "hub_h200")
    pairs = [(measured[case], predicted[case]) for case in measured if case in predicted]
    if not pairs:
        return PlanMargin(0.0, 0, 0.0, "hub_h200")
    return PlanMargin(max(margin_for_runs([m], p) for m, p in pairs), len(pairs),
                      min(0.0, *(p / m - 1 for m, p in pairs)), "hub_h200")
