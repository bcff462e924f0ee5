"""The state one walk of the step carries through its phases."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from calc.engine.graph import TensorGraph
from calc.engine.half_kernels import Scratch
from calc.engine.keeps import Keeps
from calc.engine.ledger import ACT, Ledger
from calc.engine.training import Flow
from calc.types import ModelProfile, TrainingConfig


@dataclass(frozen=True)
class PendingUpdate:
    """A gradient the optimizer has not applied yet.

    ``gradient_bytes``: its batch-independent bytes (0 for a sparse gradient, whose values
    are per sample); ``largest``: the layer's largest variable, counted; ``early``: the early
    optimizer temporaries its update consumes; ``layer``: its layer's index.
    """

    gradient_bytes: int
    largest: int
    early: int
    layer: int


@dataclass
class WalkState:
    """One walk of the step: what its phases read and what they change.

    Read by every phase: the step's ``flow`` (what trains), ``graph`` (its tensors),
    ``keeps`` (what the backward pass holds), the executor's ``order`` of the forward pass
    (``pos``: each layer's place in it; ``last_forward_use``: per buffer, the place of its
    last reader), the float16 kernels' buffers per layer (``half_forward`` /
    ``half_backward``), ``early_bytes`` (per layer, the early optimizer temporaries its
    update consumes), ``kernel_casts`` (per layer, the 16-bit kernel copy a frozen layer
    holds until it has run) and ``sparse_values`` (per layer, the per-sample bytes of a
    sparse gradient's values). ``count`` counts a batch-independent request as this walk
    does (with the fitted fragmentation, or raw when recording events for the allocator
    simulation).

    Changed as the walk goes: the ``ledger``; ``keepers`` (per tensor, the backward layers
    still to read it); ``live`` (per buffer, its activation is allocated); ``grad_live``
    and ``held`` (per buffer, its gradient is allocated, and kept to the step's end);
    ``pending`` (gradients not yet applied); ``lazy_release`` (per layer, gradients freed
    when its backward starts).
    """

    profile: ModelProfile
    config: TrainingConfig
    count: Callable[[int], int]
    flow: Flow
    graph: TensorGraph
    keeps: Keeps
    order: list[int]
    pos: list[int]
    last_forward_use: list[int]
    half_forward: list[Scratch]
    half_backward: list[Scratch]
    early_bytes: list[int]
    kernel_casts: list[int]
    sparse_values: list[int]
    ledger: Ledger
    keepers: list[int]
    live: list[bool]
    grad_live: list[bool]
    held: list[bool]
    pending: list[PendingUpdate] = field(default_factory=list)
    lazy_release: dict[int, list[int]] = field(default_factory=dict)

    def release(self, t: int) -> None:
        """Frees an activation if it is still allocated."""
        if self.live[t]:
            self.ledger.remove(ACT, self.graph.nbytes[t], key=t)
            self.live[t] = False

    def free_dead(self, at: int, buffers) -> None:
        """Frees the activations no later forward reader, no backward layer and no loss reads."""
        for t in buffers:
            if self.last_forward_use[t] <= at and self.keepers[t] == 0 and t not in self.graph.outputs:
                self.release(t)

    def can_take_buffer(self, source: int, target: int, at: int) -> bool:
        """Whether ``target`` (made at ``at``) can be written into ``source``'s buffer: its own
        buffer, and ``source`` a made tensor of its size that nothing reads after."""
        g = self.graph
        return (g.alias[target] == target and g.producer[source] != -1 and self.last_forward_use[source] == at
                and self.keepers[source] == 0 and source not in g.outputs and g.nbytes[source] == g.nbytes[target])
