"""What a page wants of the long work, as plain data: builds and XLA's plans, and where each stands.

A page says what it waits for (``Want``); each want names the one task it needs now (``next_task``),
read from what is known (the profiles on disk, the configuration's plans as a curve), so a search is
as many compiles as it takes, one at a time, and a want whose answer is known needs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Callable

from calc import xla
from calc.catalogue import ModelFile, ModelSpec
from calc.hub import HubSpec
from calc.types import TrainingConfig
from calc.xla.search import XlaMaxSequence, known_sequence_search


@dataclass(frozen=True)
class Setup:
    """One configuration on one card, at any batch: the curve a page reads, the compiles a want names."""

    spec: ModelSpec | ModelFile | HubSpec
    config: TrainingConfig  # one device's, at batch 1
    gpu_key: str
    remat: str = ""

    @classmethod
    def of(cls, spec: ModelSpec | ModelFile | HubSpec, config: TrainingConfig, gpu_key: str, remat: str = "") -> Setup:
        return cls(spec, config.at_replica_batch(1), gpu_key, remat)

    def known(self) -> xla.KnownPlans:
        """Every plan known at any batch (shipped or on disk); never compiles."""
        return xla.known_plans(self.spec, self.config, self.gpu_key, self.remat)

    @property
    def model(self) -> str:
        """The kind of model, as this host's compile times are kept by (``calc.service.times``)."""
        return model_kind(self.spec)


def model_kind(spec: ModelSpec | ModelFile | HubSpec) -> str:
    """A catalogue model's name, a KerasHub preset, or "file" for a saved file."""
    if isinstance(spec, HubSpec):
        return spec.preset
    return spec.name if isinstance(spec, ModelSpec) else "file"


@dataclass(frozen=True)
class PlanTask:
    """One XLA compile: a configuration's plan at one one-device batch."""

    setup: Setup
    batch: int

    work = "plan"

    @property
    def what(self) -> Setup:
        """What a page redraws when this ends."""
        return self.setup


@dataclass(frozen=True)
class BuildTask:
    """One Keras build: a catalogue model's ledger at one size."""

    spec: ModelSpec

    work = "build"

    @property
    def what(self) -> ModelSpec:
        return self.spec


Task = PlanTask | BuildTask


class Kind(IntEnum):
    """What a want is for; ``urgency`` orders the tasks (a first number before anything else)."""

    BUILD = 0  # a catalogue model's ledger at a size nobody has built yet (the walk, the Layers page)
    PLAN = 1  # the page's batch, which has no XLA number yet
    ANCHOR = 2  # a second plan, for the curve's line
    SEARCH = 3  # the search for the largest batch
    REFINE = 4  # the page's batch, drawn on the line: its own plan replaces the drawn point
    EXPLAIN = 5  # the page's batch, planned without what fills its peak (a shipped plan): compiled again to say it
    SEQUENCE = 6  # the search for the longest sequence at the page's batch (a KerasHub text model)

    @property
    def urgency(self) -> int:
        """0 for a page's first number (its model's ledger, its batch's plan), then curves, searches,
        refinements, explanations and sequences, in that order."""
        return max(0, int(self) - 1)


@dataclass(frozen=True)
class Want:
    """One thing a page waits for; ``next_task`` is the task it needs now."""

    kind: Kind
    setup: Setup | None = None  # every kind but BUILD
    batch: int = 0  # PLAN, REFINE, EXPLAIN, SEQUENCE
    budget_bytes: int = 0  # SEARCH, SEQUENCE: what the plan may take
    start: int = 1  # SEARCH: the first batch tried when the curve knows nothing
    spec: ModelSpec | None = None  # BUILD
    kept_per_sample: int = 0  # SEARCH: bytes kept free per sample beside the plan (``calc.xla.kept``)

    @classmethod
    def build(cls, spec: ModelSpec) -> Want:
        return cls(Kind.BUILD, spec=spec)

    @classmethod
    def of(cls, setup: Setup, kind: Kind, *, batch: int = 0, budget_bytes: int = 0, start: int = 1,
           kept_per_sample: int = 0) -> Want:
        return cls(kind, setup, batch=batch, budget_bytes=budget_bytes, start=start, kept_per_sample=kept_per_sample)

    @property
    def what(self) -> Setup | ModelSpec:
        """What a page redraws when one of this want's tasks ends."""
        thing = self.spec if self.kind is Kind.BUILD else self.setup
        assert thing is not None
        return thing

    def at_length(self, tokens: int) -> Setup:
        """The want's setup at another sequence length (a KerasHub text model's)."""
        assert self.setup is not None and isinstance(self.setup.spec, HubSpec)
        return replace(self.setup, spec=replace(self.setup.spec, sequence_length=tokens))

    def sequence(self, known_of: Callable[[Setup], xla.KnownPlans]) -> XlaMaxSequence | int:
        """SEQUENCE: the longest sequence that fits, or the next length to compile (``calc.xla.search``)."""
        assert self.setup is not None
        spec, setup = self.setup.spec, self.setup
        assert isinstance(spec, HubSpec)
        return known_sequence_search(spec, self.batch, self.budget_bytes,
                                     lambda at: known_of(replace(setup, spec=at)), setup.config)[0]

    def next_task(self, known_of: Callable[[Setup], xla.KnownPlans],
                  built: Callable[[ModelSpec], bool] = lambda spec: False) -> Task | None:
        """The task the want needs now; None when it needs none. ``built``: whether a model's ledger is known."""
        if self.kind is Kind.BUILD:
            assert self.spec is not None
            return None if built(self.spec) else BuildTask(self.spec)
        if self.kind is Kind.SEQUENCE:
            step = self.sequence(known_of)
            return None if isinstance(step, XlaMaxSequence) else PlanTask(self.at_length(step), self.batch)
        assert self.setup is not None
        batch = self.next_batch(known_of(self.setup))
        return None if batch is None else PlanTask(self.setup, batch)

    def next_batch(self, known: xla.KnownPlans) -> int | None:
        curve = known.curve.keeping(self.kept_per_sample)
        if self.kind is Kind.EXPLAIN:
            plan = known.plans.get(self.batch)
            return self.batch if plan is not None and plan.explained is None else None
        if self.kind in (Kind.PLAN, Kind.REFINE):
            return None if curve.compiled(self.batch) is not None else self.batch
        if self.kind is Kind.ANCHOR:
            return curve.second_anchor()
        answer = curve.max_batch(self.budget_bytes)
        if answer is not None and answer.settled:
            return None
        # A search starts from the line, which needs a second plan well inside the card's memory.
        return curve.second_anchor() or curve.next_search_batch(self.budget_bytes, self.start)


@dataclass(frozen=True)
class Progress:
    """Where a want stands, for the page."""

    state: str  # "done", "queued", "running", "failed", "refused", "off"
    batch: int | None = None  # the compile it waits for (a build's: None)
    seconds: float = 0.0  # running: how long its task has run
    ahead: int = 0  # queued: tasks of its kind to run before it, those running included
    eta_s: float = 0.0  # about when it ends, from this host's times (``calc.service.times``)
    usual_s: float = 0.0  # running: what such a task usually takes here; past it, ``eta_s`` is unknown (0)
    step: int = 0  # SEARCH, SEQUENCE: this compile's number in the search
    tokens: int = 0  # SEQUENCE: the sequence length this compile plans
    steps: int = 0  # SEARCH: about how many the search takes in all
    message: str = ""  # failed, refused: one line
    held_by: str = ""  # refused: "server" (every place taken) or "client" (this address's share taken)
    count: int = 0  # refused: the configurations holding those places
