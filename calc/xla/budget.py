"""What a plan may take on a card: the card less the safety margin and the framework overhead.

The margin of an XLA verdict is the user's, or the plan's measured one where that is larger
(``calc.validation.margins``): a batch said to fit keeps free at least what the plan fell
short of TensorFlow's XLA step on the measured steps, or, for a KerasHub model, of the
KerasHub steps measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.gpus import GpuPreset
from calc.validation.margins import PlanMargin, hub_plan_margin, plan_margin


@dataclass(frozen=True)
class PlanBudget:
    """One card's bytes for one device's plan."""

    memory_bytes: int
    overhead_bytes: int  # the framework's, outside the allocator (``GpuPreset.overhead_bytes``)
    user_margin: float  # the share of the card the user keeps free
    measured: PlanMargin  # what the plan's record asks for

    @property
    def margin(self) -> float:
        """The share kept free: the user's, or the measured one where larger."""
        return max(self.user_margin, self.measured.fraction)

    @property
    def margin_is_measured(self) -> bool:
        return self.measured.fraction > self.user_margin

    @property
    def usable_bytes(self) -> int:
        """The card less the margin: what the plan and the framework overhead may take."""
        return int(self.memory_bytes * (1.0 - self.margin))

    @property
    def plan_bytes(self) -> int:
        """What the plan itself may take."""
        return self.usable_bytes - self.overhead_bytes


def plan_budget(gpu: GpuPreset, user_margin: float, hub: bool = False) -> PlanBudget:
    """The budget of one device's plan on ``gpu`` with the user's safety margin (a fraction); ``hub``: of a
    KerasHub model, whose measured record is its own."""
    measured = hub_plan_margin() if hub else plan_margin()
    if not measured.cases:  # no KerasHub record here (the files absent): the other record rather than none
        measured = plan_margin()
    return PlanBudget(gpu.memory_bytes, gpu.overhead_bytes, user_margin, measured)
