"""The moments of a step (phases) and the allocation events a walk records.

A phase's text (``str(phase)``) is what reaches the output: ``MemoryBreakdown.peak_phase``
and ``step_timeline``'s labels, e.g. "forward conv1", "forward block_1_sepconv
(depthwise)", "loss", "backward conv1", "optimizer update".
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Step(str, enum.Enum):
    """The parts of one training step, in the order they run."""

    FORWARD = "forward"
    LOSS = "loss"
    BACKWARD = "backward"
    UPDATE = "optimizer update"  # the last moment: the optimizer applies the gradients still pending


@dataclass(frozen=True, order=True)
class Phase:
    """One moment of the walk: a layer's forward or backward (``stage``: a first step of its
    forward, such as a separable conv's depthwise output), the loss, or the update."""

    step: Step
    layer: str = ""
    stage: str = ""

    def __str__(self) -> str:
        if not self.layer:
            return self.step.value
        text = f"{self.step.value} {self.layer}"
        return f"{text} ({self.stage})" if self.stage else text

    @classmethod
    def parse(cls, text: str) -> Phase:
        """The phase whose ``str`` is ``text``."""
        for step in (Step.LOSS, Step.UPDATE):
            if text == step.value:
                return cls(step)
        direction, _, rest = text.partition(" ")
        layer, _, stage = rest.partition(" (")
        return cls(Step(direction), layer, stage[:-1])


LOSS = Phase(Step.LOSS)
UPDATE = Phase(Step.UPDATE)
UPDATE_PHASE = str(UPDATE)


# Allocation events, batch-independent: an allocation's bytes are ``per_sample * batch +
# fixed``; ``calc.engine.floors.replay`` places them in a simulated pool at one batch.
@dataclass(frozen=True, slots=True)
class Alloc:
    id: int
    per_sample: int
    fixed: int


@dataclass(frozen=True, slots=True)
class Free:
    id: int


@dataclass(frozen=True, slots=True)
class Mark:
    """A moment of the walk ends here."""

    phase: Phase


Event = Alloc | Free | Mark
