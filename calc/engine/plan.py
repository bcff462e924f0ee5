"""One walk per configuration: the plan every batch size of it shares."""

from __future__ import annotations

from functools import lru_cache

from calc.engine.ledger import StepPlan
from calc.engine.training import without_batch
from calc.engine.walk import simulate
from calc.types import ModelProfile, TrainingConfig


def plan_step(profile: ModelProfile, config: TrainingConfig) -> StepPlan:
    """Walks one training step for a profile and a config (the batch size is ignored).

    Cached: moving the batch size reuses the plan.
    """
    return cached_plan(profile, without_batch(config))


@lru_cache(maxsize=256)
def cached_plan(profile: ModelProfile, config: TrainingConfig) -> StepPlan:
    return simulate(profile, config).plan  # keyed without the batch, so every batch size hits
