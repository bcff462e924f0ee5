"""What a plan may take on a card: the card less what the verdict keeps free and the framework overhead.

A verdict from XLA's plan keeps free, beside the plan, the bytes of the mechanism its measured record
names for the step (``calc.xla.kept``: a causal LM's logits buffer, a convolution's workspace; growing
with the batch), then the residual share of the card that record still shows (``calc.validation.margins``),
then the user's own margin on top.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.catalogue import ModelFile, ModelSpec
from calc.gpus import GpuPreset
from calc.hub import HubSpec
from calc.types import TrainingConfig
from calc.validation.margins import PlanMargin, hub_plan_margin, plan_margin
from calc.xla.kept import LOGITS, WORKSPACE, Kept, kept_for, share_text


@dataclass(frozen=True)
class PlanBudget:
    """One card's bytes for one device's plan."""

    memory_bytes: int
    overhead_bytes: int  # the framework's, outside the allocator (``GpuPreset.overhead_bytes``)
    user_margin: float  # the share of the card the user keeps free
    measured: PlanMargin  # the record behind the residual share
    kept: Kept = Kept()  # the mechanism's bytes per sample

    @property
    def margin(self) -> float:
        """The share of the card kept free: the record's residual and the user's margin on top."""
        return min(0.99, self.measured.fraction + self.user_margin)

    @property
    def usable_bytes(self) -> int:
        """The card less the margin: what the plan, the mechanism's bytes and the framework overhead may take."""
        return int(self.memory_bytes * (1.0 - self.margin))

    @property
    def plan_bytes(self) -> int:
        """What the plan and the mechanism's bytes may take."""
        return self.usable_bytes - self.overhead_bytes

    def kept_at(self, batch: int) -> int:
        """The mechanism's bytes at one device's ``batch``."""
        return self.kept.at(batch)

    def fits(self, peak_bytes: int, batch: int) -> bool:
        """Whether a plan of ``peak_bytes`` at one device's ``batch`` fits, with the mechanism's bytes beside it."""
        return peak_bytes + self.kept_at(batch) <= self.plan_bytes


def plan_budget(gpu: GpuPreset, user_margin: float, hub: bool = False, kept: Kept = Kept()) -> PlanBudget:
    """The budget of one device's plan on ``gpu`` with the user's safety margin (a fraction); ``hub``: of a
    KerasHub model, whose measured record is its own; ``kept``: the step's mechanism (``calc.xla.kept.kept_for``)."""
    measured = hub_plan_margin() if hub else plan_margin()
    if not measured.cases:  # no KerasHub record here (the files absent): the other record rather than none
        measured = plan_margin()
    return PlanBudget(gpu.memory_bytes, gpu.overhead_bytes, user_margin, measured, kept)


def step_budget(gpu: GpuPreset, user_margin: float, spec: ModelSpec | ModelFile | HubSpec, precision: str,
                config: TrainingConfig | None = None) -> PlanBudget:
    """``plan_budget`` for one card of a step of ``spec``: its record (a KerasHub model's or the catalogue's) and
    its mechanism's bytes (``precision``: the catalogue's; a KerasHub model's dtype is its own; ``config``: its
    mesh, where it has one)."""
    return plan_budget(gpu, user_margin, hub=isinstance(spec, HubSpec), kept=kept_for(spec, precision, config))


MECHANISMS = {
    LOGITS: "one buffer of the step's logits (batch x tokens x vocabulary x the compute dtype's bytes), which "
            "XLA's autotuner kept beside the plan on the KerasHub steps measured on an H200",
    WORKSPACE: "a cuDNN workspace as large as the largest convolution's input and output, which bounded what "
               "TensorFlow's XLA step took beside the plan on the large steps measured on an H100",
}
RECORDS = {"tf_h100": "steps of TensorFlow's XLA step measured on an H100",
           "hub_h200": "KerasHub steps measured on an H200 (XLA's autotuner on)"}


def kept_lines(budget: PlanBudget, batch: int, gib: float = float(1 << 30)) -> list[str]:
    """What the verdict keeps free at one device's ``batch`` and why, in English lines (the command line's)."""
    kept = budget.kept_at(batch)
    lines = []
    if kept:
        share = (f" (on this mesh one card's share: {share_text(budget.kept.share)} x a replica's, as the layout map "
                 "splits the head tied to the token embedding)" if budget.kept.share != (1, 1) else "")
        lines.append(f"{kept / gib:.3f} GiB for {MECHANISMS[budget.kept.mechanism]}{share}")
    measured = budget.measured
    lines.append(f"{measured.fraction:.1%} of the card: the most the {measured.cases} {RECORDS[measured.record]} "
                 f"took beyond their plans{' and those bytes' if budget.kept.mechanism else ''} "
                 f"(a flat share would have needed {measured.flat:.1%})")
    if budget.user_margin:
        lines.append(f"{budget.user_margin:.1%} of the card: your margin, on top")
    return lines
