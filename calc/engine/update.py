"""The optimizer's updates: each gradient applied a few layers after it appears, and the
last moment of the step, where the optimizer applies the gradients still pending."""

from __future__ import annotations

from calc.engine.counting import granules
from calc.engine.events import UPDATE
from calc.engine.ledger import OTHER, G
from calc.engine.state import PendingUpdate, WalkState
from calc.engine.training import early_temporaries_per_variable, update_scratch_per_variable, waits_for_all_gradients
from calc.facts.dtypes import FLOAT32
from calc.facts.optimizers import GRADIENT_LAG, branch_temporaries, densifies_sparse_gradients


def gradient_ready(state: WalkState, i: int) -> None:
    """Layer ``i``'s weight gradient exists: counted under gradients until its update.

    A sparse gradient (``sparse_gradient``: an Embedding's looked-up rows) is per sample.
    """
    layer, ledger = state.profile.layers[i], state.ledger
    if state.sparse_values[i]:
        gradient_bytes = 0
        ledger.add(G, state.sparse_values[i])
    else:
        gradient_bytes = sum(state.count(FLOAT32 * e) for e in layer.trainable_weight_elements)
        ledger.grow_fixed(G, gradient_bytes)
    largest = max((state.count(FLOAT32 * e) for e in layer.trainable_weight_elements), default=0)
    state.pending.append(PendingUpdate(gradient_bytes, largest, state.early_bytes[i], i))


def apply_lagging_updates(state: WalkState, extra: list[int]) -> int:
    """Applies the gradients more than the lag behind (``GRADIENT_LAG`` layers; every layer
    when the updates wait for all gradients). Returns the batch-independent scratch of the
    largest update applied (the update's buffers, its gradient and early temporaries
    included); a densified sparse gradient's values go to ``extra``."""
    config, ledger = state.config, state.ledger
    lag = len(state.profile.layers) if waits_for_all_gradients(config) else GRADIENT_LAG
    per_update = update_scratch_per_variable(config)
    densifies = densifies_sparse_gradients(config.optimizer, config.optimizer_options)
    scratch = 0
    while len(state.pending) > lag:
        update = state.pending.pop(0)
        sparse = state.sparse_values[update.layer]
        ledger.grow_fixed(G, -update.gradient_bytes)
        ledger.grow_fixed(OTHER, -update.early)  # consumed by the update (its scratch counts them)
        scratch = max(scratch, (per_update if densifies or not sparse else 0) * update.largest)
        if sparse:
            ledger.remove(G, sparse)
            extra.append(sparse)
    return scratch


def run_update(state: WalkState) -> None:
    """The step's last moment: the optimizer applies the gradients still pending.

    The early temporaries of the variables still pending are in the ledger already, and
    so is each pending gradient (under gradients): the update's scratch, which counts its
    gradient, adds only the rest. Under mixed_float16 the update reads the unscaled copy
    of every gradient that the loss scale's cond makes, a buffer beyond the pending one
    (counted twice, an MLP whose first kernel dominates was +45 %: mlp.keras b64 sgd).
    """
    config, ledger, pending, sparse = state.config, state.ledger, state.pending, state.sparse_values
    waits_for_all = waits_for_all_gradients(config)
    per_update, early = update_scratch_per_variable(config), early_temporaries_per_variable(config)
    largest = max((u.largest for u in pending if not sparse[u.layer]), default=0)
    largest_sparse = max((u.largest for u in pending if sparse[u.layer]), default=0)
    sparse_now = tuple(sparse[u.layer] for u in pending if sparse[u.layer])[:1]
    scratch_fixed = max(0, per_update - early - (0 if waits_for_all else 1)) * largest
    # A sparse gradient's dense form is made by the update itself: not counted yet.
    densifies = densifies_sparse_gradients(config.optimizer, config.optimizer_options)
    scratch_fixed = max(scratch_fixed, max(0, per_update - early) * largest_sparse if densifies else 0)
    if waits_for_all:
        # mixed_float16: every update starts together inside the loss scale's cond, and
        # the peak holds temporaries of many variables at once (``branch_temporaries`` in
        # calc.facts.optimizers); the larger of that and one update's scratch is counted.
        together = granules(branch_temporaries(config.optimizer, config.optimizer_options)
                            * sum(u.gradient_bytes for u in pending))
        ledger.add_fixed(OTHER, together)
        scratch_fixed = max(0, scratch_fixed - together)
    ledger.snapshot(UPDATE, extra_fixed=scratch_fixed, extra_per_sample=sparse_now)
