"""What a verdict from XLA's plan keeps free, from the plan's measured record: a mechanism's bytes, then a residual.

XLA's plan lies under what the card's own compile takes by what the card chooses on its own
(``calc.xla.kept``): a convolution's cuDNN workspace in TensorFlow's XLA step, one logits-sized buffer in
a KerasHub causal LM's step with XLA's autotuner on. A verdict keeps those bytes free for its step, and
on top of them the share of the card under which every measured step fits once its mechanism's bytes
are set beside its plan: the residual. Both come from the committed records, so new measurements move
them and no constant here does:

- ``plan_margin``: the catalogue's, the plan against TensorFlow's XLA step on an H100
  (``python -m calc validate --step xla --data calc/data/gpu_tf_h100_xla.json --save``);
- ``hub_plan_margin``: a KerasHub model's, its steps on an H200 against their plans on record
  (``validation/planned.json``, set ``hub_gpu``).

Each also says what a flat share alone would have had to keep (``flat``): the margin before the mechanism
was named.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from calc.validation.data import GPU_TF_XLA_DATA, HUB_GPU_DATA
from calc.validation.records import margin_for_runs


@dataclass(frozen=True)
class MarginCase:
    """One measured step: its plan, its measured peak, and the mechanism's bytes at its batch."""

    case: str
    plan_bytes: int
    measured_bytes: int  # the highest run's
    kept_bytes: int

    @property
    def residual(self) -> float:
        """The share of the step's peak beyond the plan and the mechanism's bytes (0 where they cover it)."""
        return margin_for_runs([self.measured_bytes - self.kept_bytes], self.plan_bytes)

    @property
    def flat(self) -> float:
        """The share a margin without the mechanism would have had to keep for this step."""
        return margin_for_runs([self.measured_bytes], self.plan_bytes)


@dataclass(frozen=True)
class PlanMargin:
    """The measured record behind a verdict's margin."""

    fraction: float  # the residual: the share of the card kept free beside the mechanism's bytes (0 without a record)
    cases: int  # measured steps behind it
    worst_under: float  # the plan's worst under-prediction, relative to the measured peak (<= 0)
    record: str = "tf_h100"  # whose steps: TensorFlow's XLA step on an H100, or "hub_h200": KerasHub's on an H200
    flat: float = 0.0  # the share a flat margin needed to cover every step, the mechanism unnamed
    steps: tuple[MarginCase, ...] = ()

    @property
    def worst_excess(self) -> float:
        """How much more than the plan the worst measured step took, relative to the plan (>= 0)."""
        return -self.worst_under / (1 + self.worst_under)


def _margin(steps: list[MarginCase], record: str) -> PlanMargin:
    if not steps:
        return PlanMargin(0.0, 0, 0.0, record)
    return PlanMargin(max(s.residual for s in steps), len(steps),
                      min(0.0, *(s.plan_bytes / s.measured_bytes - 1 for s in steps)), record,
                      max(s.flat for s in steps), tuple(steps))


@functools.cache
def plan_margin() -> PlanMargin:
    """The catalogue's record: TensorFlow's XLA step on an H100 against the plan (its saved report), each
    step's largest convolution kept (``calc.xla.kept``). Without the files, 0 and 0 cases."""
    from calc.requests import config_from_dict, spec_from_dict
    from calc.xla.kept import kept_for

    path = GPU_TF_XLA_DATA.with_name(GPU_TF_XLA_DATA.stem + "_plan_report.json")
    try:
        measured = {c["case"]: c for c in json.loads(GPU_TF_XLA_DATA.read_text())["cases"]}
        steps = []
        for c in json.loads(path.read_text())["cases"]:
            run = measured[c["case"]]
            config = config_from_dict(run["config"])
            kept = kept_for(spec_from_dict(run["spec"]), config.precision).at(config.per_replica_batch)
            steps.append(MarginCase(c["case"], int(c["predicted_bytes"]),
                                    max(c.get("runs_bytes") or [c["measured_bytes"]]), kept))
    except (OSError, ValueError, KeyError, TypeError):
        return PlanMargin(0.0, 0, 0.0)
    return _margin(steps, "tf_h100")


@functools.cache
def hub_plan_margin() -> PlanMargin:
    """A KerasHub model's record: each measured peak (the process's, XLA's autotuner on, ``HUB_GPU_DATA``)
    against the plan on record for it (``validation/planned.json``, set ``hub_gpu``), a causal LM's logits
    kept. Without them, 0 and 0 cases."""
    from calc.hub import HubSpec
    from calc.validation.planned import planned_predictions
    from calc.xla.kept import kept_for

    try:
        predicted = planned_predictions("hub_gpu")
        steps = [MarginCase(c["case"], predicted[c["case"]], int(c["peak_bytes"]),
                            kept_for(HubSpec(**c["spec"]["hub"]), "").at(int(c["config"]["batch_size"])))
                 for c in json.loads(HUB_GPU_DATA.read_text())["cases"]
                 if c.get("peak_bytes") and c["case"] in predicted]
    except (OSError, ValueError, KeyError, TypeError):
        return PlanMargin(0.0, 0, 0.0, "hub_h200")
    return _margin(steps, "hub_h200")

