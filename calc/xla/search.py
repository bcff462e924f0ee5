"""The largest batch whose compiled plan fits a card: a search over XLA's plans, compiling few.

The search's steps are the curve's (``calc.xla.curve.PlanCurve.next_search_batch``): it
starts from every plan already known, tries where the line through them crosses the budget,
and brackets the answer until a batch that fits and one that does not are compiled within
``calc.xla.curve.settle_width`` of each other. The dashboard takes the same steps one compile
at a time in the background (``calc.service``); this runs them in a row (the command line).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from calc.catalogue import ModelFile, ModelSpec
from calc.hub import HubSpec
from calc.types import MAX_DEVICES_PER_HOST, TrainingConfig
from calc.xla.compute import KnownPlans, compute_plan, known_curve
from calc.xla.curve import CompiledPoint, MaxBatch, PlanCurve
from calc.xla.kept import kept_for


@dataclass(frozen=True)
class XlaMaxBatch:
    """The largest batch whose compiled plan fits, and how it was found."""

    max_batch: int  # 0: not even one sample fits
    compiled: tuple[tuple[int, int], ...]  # (per-device batch, needed bytes) of every plan compiled by the search
    known: int = 0  # plans of this configuration known before the search
    exceeds: int | None = None  # the smallest compiled batch above ``max_batch`` that does not fit
    fits_bytes: int | None = None  # the plan's bytes at ``max_batch``
    exceeds_bytes: int | None = None  # and at ``exceeds``

    @property
    def compiles(self) -> int:
        return len(self.compiled)


def search_curve(plan_at: Callable[[int], CompiledPoint], budget_bytes: int, start: int, curve: PlanCurve,
                 *, limit: int = 1 << 16) -> tuple[MaxBatch, PlanCurve, tuple[CompiledPoint, ...]]:
    """Compiles (``plan_at``) the curve's next search batch until the largest batch is settled.

    Returns the answer, the curve with every plan compiled, and those plans in order.
    """
    compiled: list[CompiledPoint] = []
    while (batch := curve.next_search_batch(budget_bytes, start, limit)) is not None:
        point = plan_at(batch)
        compiled.append(point)
        curve = curve.adding(point)
    answer = curve.max_batch(budget_bytes)
    assert answer is not None  # the loop compiled at least one plan
    return answer, curve, tuple(compiled)


def max_batch_xla(needed: Callable[[int], int], usable_bytes: int, start: int, *, limit: int = 1 << 16) -> XlaMaxBatch:
    """The largest per-device batch B with ``needed(B) <= usable_bytes`` (within ``settle_width``),
    ``needed`` compiling (or reading) the plan at a batch, ``start`` the first guess.

    No line is drawn: ``needed`` gives peaks alone, so every step is a bracket's."""
    answer, _, compiled = search_curve(lambda b: CompiledPoint(b, needed(b), needed(b)), usable_bytes, start,
                                       PlanCurve((), 0), limit=limit)
    return XlaMaxBatch(answer.batch, tuple(sorted((p.batch, p.peak_bytes) for p in compiled)), 0, answer.exceeds)


def plan_max_batch(spec: ModelSpec | ModelFile | HubSpec, config: TrainingConfig, gpu_key: str, usable_bytes: int,
                   start: int, remat: str = "", *, kept_per_sample: int = 0, **kwargs: Any) -> XlaMaxBatch:
    """The largest per-device batch whose plan, with ``kept_per_sample`` bytes free per sample beside it
    (``calc.xla.kept``), fits ``usable_bytes``, from the plans known of this configuration on this card and
    as few compiles more as the search needs."""
    curve = known_curve(spec, config, gpu_key, remat).keeping(kept_per_sample)

    def plan_at(per_device: int) -> CompiledPoint:
        one = config.at_replica_batch(per_device)
        plan = compute_plan(spec, one, gpu_key, remat, **kwargs)
        return CompiledPoint(per_device, plan.peak_bytes, plan.temporaries_bytes)

    answer, after, compiled = search_curve(plan_at, usable_bytes, start, curve)

    def peak(batch: int | None) -> int | None:
        point = None if batch is None else after.compiled(batch)
        return None if point is None else point.peak_bytes

    return XlaMaxBatch(answer.batch, tuple(sorted((p.batch, p.peak_bytes) for p in compiled)), len(curve.points),
                       answer.exceeds, peak(answer.batch), peak(answer.exceeds))


@dataclass(frozen=True)
class XlaMaxSequence:
    """The longest sequence whose compiled plan fits at one batch, and how it was found."""

    max_sequence: int  # 0: not even one token fits
    compiled: tuple[tuple[int, int], ...]  # (sequence length, plan bytes) of every plan the search read or compiled
    exceeds: int | None  # the shortest compiled sequence above ``max_sequence`` that does not fit; None: the model's limit
    limit: int  # the longest sequence the model takes

    @property
    def compiles(self) -> int:
        return len(self.compiled)


def sequence_settled(fits: int, exceeds: int) -> bool:
    """Whether the search may stop: the sequence that fits and the one that does not are within 1/64 of
    each other (a prompt or a chunk 1.5 % longer or shorter decides nothing), or next to each other."""
    return exceeds - fits <= max(1, fits // 64)


def longest_fitting(needed: Callable[[int], int], usable_bytes: int, start: int, limit: int) -> XlaMaxSequence:
    """The longest ``n`` in [1, ``limit``] with ``needed(n) <= usable_bytes``, ``needed`` growing with ``n``:
    doubled (or halved) from ``start`` until a length that fits and one that does not bracket it, then
    halved until ``sequence_settled``."""
    seen: dict[int, int] = {}

    def fits(n: int) -> bool:
        if n not in seen:
            seen[n] = needed(n)
        return seen[n] <= usable_bytes

    n = max(1, min(start, limit))
    if fits(n):
        low, high = n, None
        while high is None and low < limit:
            n = min(limit, 2 * low)
            low, high = (n, None) if fits(n) else (low, n)
    else:
        low, high = 0, n
        while low == 0 and high > 1:
            n = high // 2
            low, high = (n, high) if fits(n) else (0, n)
    while high is not None and low and not sequence_settled(low, high):
        n = (low + high) // 2
        low, high = (n, high) if fits(n) else (low, n)
    return XlaMaxSequence(low, tuple(sorted(seen.items())), high, limit)


class _Unknown(Exception):
    """A length whose plan is not known yet (``sequence_search``)."""


def sequence_search(peak_at: Callable[[int], int | None], usable_bytes: int, start: int,
                    limit: int) -> XlaMaxSequence | int:
    """``longest_fitting`` replayed over the plans known so far: its answer once every length it asks
    for is known, else the next length to compile. ``peak_at(n)`` is the plan's bytes at ``n``, None
    when that plan is not compiled yet. Each compile moves the search one step; the dashboard takes
    the steps in the background, the command line (``plan_max_sequence``) in a row."""
    def needed(n: int) -> int:
        peak = peak_at(n)
        if peak is None:
            raise _Unknown(n)
        return peak

    try:
        return longest_fitting(needed, usable_bytes, start, limit)
    except _Unknown as missing:
        return int(missing.args[0])


def kept_at_length(spec: HubSpec, batch: int, n: int, config: TrainingConfig | None = None) -> int:
    """The bytes a verdict keeps free beside the plan of ``spec`` at ``n`` tokens and one-device ``batch``
    (``calc.xla.kept``: a causal LM's logits grow with the sequence; ``config``: its mesh, where it has one)."""
    return kept_for(replace(spec, sequence_length=n), "", config).at(batch)


def known_sequence_search(spec: HubSpec, batch: int, usable_bytes: int, known_of: Callable[[HubSpec], KnownPlans],
                          config: TrainingConfig | None = None) -> tuple[XlaMaxSequence | int, dict[int, int]]:
    """``sequence_search`` for a KerasHub text model at one-device ``batch``, from the spec's length, over
    the plans ``known_of`` gives each length (nothing is compiled): its answer or the next length to
    compile, and what every length it read needs (its plan and the bytes kept free beside it)."""
    read: dict[int, int] = {}

    def peak_at(n: int) -> int | None:
        plan = known_of(replace(spec, sequence_length=n)).plans.get(batch)
        if plan is not None:
            read[n] = plan.peak_bytes + kept_at_length(spec, batch, n, config)
        return None if plan is None else read[n]

    return sequence_search(peak_at, usable_bytes, spec.sequence_length, spec.model.sequence_limit), read


def plan_max_sequence(spec: HubSpec, config: TrainingConfig, gpu_key: str, usable_bytes: int, remat: str = "",
                      **kwargs: Any) -> XlaMaxSequence:
    """The longest sequence a KerasHub text model trains at ``config``'s per-device batch within
    ``usable_bytes`` (its plan and the bytes kept free beside it, ``kept_at_length``), by compiling XLA's
    plan at each length the search tries (a length's plan is its own family: attention makes the plan grow
    faster than the sequence, so no line is drawn). ``compiled`` holds what each length needs."""
    return longest_fitting(lambda n: compute_plan(replace(spec, sequence_length=n), config, gpu_key, remat,
                                                  **kwargs).peak_bytes + kept_at_length(spec, config.per_replica_batch,
                                                                                        n, config),
                           usable_bytes, spec.sequence_length, spec.model.sequence_limit)


MODEL_AXES = (1, 2, 4, 8)  # the model axes the fewest-cards search tries: the cards of one host, halved down


@dataclass(frozen=True)
class FewestCards:
    """The smallest model axis whose mesh's card fits, at the setup's batch and data-parallel replicas."""

    model_parallel: int | None  # None: none of the axes tried fits
    tried: tuple[tuple[int, int], ...]  # (model axis, needed bytes of one card) of each axis planned, in order
    stopped: str = ""  # why the search stopped before an axis that fits (XLA's or Keras's refusal), or ""


def fewest_cards(spec: HubSpec, config: TrainingConfig, gpu_key: str, budget_bytes: int,
                 **kwargs: Any) -> FewestCards:
    """The fewest cards of ``gpu_key`` that train ``config`` (its batch, its data-parallel replicas): the model axis
    doubled from one card until one card's plan and the bytes kept free beside it on that mesh (``kept_on_axis``)
    fit ``budget_bytes``. A setup the preset's layout map cannot shard (no map; a refusal of XLA's partitioner)
    stops with the refusal."""
    from calc.xla.plan import PlanError

    def peak(axis: int) -> int | str:
        try:
            return compute_plan(spec, on_model_axis(config, axis), gpu_key, **kwargs).peak_bytes
        except PlanError as exc:
            return str(exc)

    return _doubled(peak, budget_bytes, lambda axis: kept_on_axis(spec, config, axis))


def kept_on_axis(spec: HubSpec, config: TrainingConfig, axis: int) -> int:
    """What one card keeps free beside its plan on a model axis of ``axis`` cards (``calc.xla.kept``)."""
    return kept_for(spec, "", on_model_axis(config, axis)).at(config.per_replica_batch)


def _doubled(peak_of: Callable[[int], int | str], budget_bytes: int, kept_of: Callable[[int], int]) -> FewestCards:
    """The model axis doubled (``MODEL_AXES``) until one card's peak (``peak_of``) and the bytes kept free beside
    it (``kept_of``) fit ``budget_bytes``; stopped where ``peak_of`` gives a reason instead of a peak."""
    tried: list[tuple[int, int]] = []
    for axis in MODEL_AXES:
        peak = peak_of(axis)
        if isinstance(peak, str):
            return FewestCards(None, tuple(tried), peak)
        tried.append((axis, peak + kept_of(axis)))
        if tried[-1][1] <= budget_bytes:
            return FewestCards(axis, tuple(tried))
    return FewestCards(None, tuple(tried))


def on_model_axis(config: TrainingConfig, axis: int) -> TrainingConfig:
    """``config`` on a model axis of ``axis`` cards, its hosts as few as hold them."""
    return replace(config, model_parallel=axis, hosts=max(1, -(-config.num_gpus * axis // MAX_DEVICES_PER_HOST)))


def known_fewest_cards(spec: HubSpec, config: TrainingConfig, gpu_key: str, budget_bytes: int) -> FewestCards | None:
    """``fewest_cards`` from the plans compiled already (shipped or on disk); never compiles. None where an axis
    before the first that fits has no plan compiled at the batch."""
    from calc.xla.compute import known_plans

    def peak(axis: int) -> int | str:
        plan = known_plans(spec, on_model_axis(config, axis), gpu_key).plans.get(config.per_replica_batch)
        return "not compiled" if plan is None else plan.peak_bytes

    found = _doubled(peak, budget_bytes, lambda axis: kept_on_axis(spec, config, axis))
    return None if found.stopped else found
