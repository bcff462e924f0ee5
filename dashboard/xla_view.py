"""What a page shows of XLA's plan: pure, no Streamlit.

Every page reads the same answer for the same link: the plans known for the configuration
(``calc.xla.known_plans``: shipped, or compiled by anyone on this server and kept on disk),
the card's budget with the margin the plan's measured record asks for (``calc.xla.plan_budget``),
and the largest batch those plans tell (``PlanCurve.max_batch``). What the plans cannot tell
yet is the walk's, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from calc.gpus import GpuPreset
from calc.hub import HubSpec, lora_counts
from calc.types import MemoryBreakdown, TrainingConfig
from calc.xla import KnownPlans, MaxBatch, PeakExplained, PlanBudget, XlaPlan
from calc.validation.report import walk_to_xla_range
from calc.xla.kept import LOGITS, WORKSPACE, share_text
from calc.xla.search import XlaMaxSequence, known_sequence_search
from dashboard.i18n import mark, tr
from dashboard.lesson import Term
from dashboard.state import Inputs
from dashboard.views import (CurveView, EstimateView, ShownStep, fmt, hub_frozen, remat_mode, settled_batch,
                             shown_walk, unit_divisor, walk_curve, walk_peak_column, x_axis_end)


@dataclass(frozen=True)
class XlaAnswer:
    """XLA's plan and largest batch for one configuration, as far as the known plans tell them."""

    plan: XlaPlan | None  # at the chosen one-device batch: compiled, drawn, or None
    max_batch: MaxBatch | None  # one device's; None before any plan is known
    budget: PlanBudget
    known: KnownPlans


def xla_answer(known: KnownPlans, batch: int, budget: PlanBudget) -> XlaAnswer:
    """The answer for one device's ``batch`` from ``known`` plans and the card's ``budget``."""
    return XlaAnswer(known.at(batch), known.curve.keeping(budget.kept.per_sample_bytes).max_batch(budget.plan_bytes),
                     budget, known)


@dataclass(frozen=True)
class CompareCell:
    """One model on one card on the Compare page: XLA's answer from the known plans, and where its compiles
    stand."""

    answer: XlaAnswer | None  # None where the model cannot take the setup (``error``)
    state: str = ""  # "waiting": a compile it needs is queued or running; "failed"; "off": compiles are off
    error: str = ""  # one line, for "failed" and a setup the model cannot take


def largest_batch_label(answer: MaxBatch | None, compiling: bool = True) -> str:
    """The metric's label; ``compiling``: the server compiles what the search still needs (else the plans
    known are all there is)."""
    if answer is None:
        return tr("Largest batch that fits (XLA, searching)") if compiling else tr(
            "Largest batch (walk, until XLA's plans)")
    if answer.settled:
        return tr("Largest batch that fits (XLA plans, compiled)")
    if not compiling:
        return tr("Largest batch that fits (XLA plans known, not settled)")
    return tr("Largest batch that fits (XLA, searching)")


# XLA's kinds (calc.xla.peak.KINDS) as the bar's parts (dashboard.figures.LABELS): the optimizer's
# temporaries are the walk's "other" part, the rest XLA's own.
XLA_PARTS = {"activations": "xla_activations", "gradients": "xla_gradients", "optimizer": "other",
             "workspace": "xla_workspace", "layout_copies": "xla_layout_copies", "other": "xla_other",
             "packing": "xla_packing"}


def plan_parts(plan: XlaPlan, split_weights: bool = False) -> dict[str, int]:
    """The plan's peak as the bar stacks it: by kind where the plan says what fills its temporaries
    (``XlaPlan.breakdown``), else with the temporaries as one block; sums to ``plan.peak_bytes``.
    ``split_weights``: the frozen weights and those that train as two parts (a KerasHub model's LoRA)."""
    breakdown = plan.breakdown()
    parts = plan.components() if breakdown is None else {XLA_PARTS.get(k, k): v for k, v in breakdown.items()}
    trainable = plan.trainable_weights_bytes
    if not split_weights or not 0 < trainable <= parts["weights"]:
        return parts
    weights = parts.pop("weights")
    return {"frozen_weights": weights - trainable, "trainable_weights": trainable, **parts}


def shown_xla(view: EstimateView, inputs: Inputs, answer: XlaAnswer, base_peak_bytes: int | None,
              compiling: bool = True) -> ShownStep:
    """XLA's plan in place of the walk: needed = plan peak + overhead, against the card less the margin
    (the user's, or the plan's measured one where larger). ``answer.plan`` must be known; ``compiling``:
    the server compiles what the search still needs."""
    plan = answer.plan
    assert plan is not None
    gpus, overhead = inputs.num_gpus, view.overhead_bytes
    remat = remat_mode(inputs)
    if not plan.compiled:
        label = tr("Planned peak (XLA, drawn from {a} and {b})", a=plan.drawn_through[0] * gpus,
                   b=plan.drawn_through[1] * gpus)
    elif remat:
        label = tr("Planned peak (XLA, remat {mode})", mode=remat)
    else:
        label = tr("Planned peak (XLA)")
    best = answer.max_batch
    max_batch = best.batch * gpus if best is not None else view.max_batch
    return ShownStep(
        step="xla", peak_label=label, components=plan_parts(plan, split_weights=inputs.source == "hub"),
        peak_bytes=plan.peak_bytes,
        overhead_bytes=overhead, capacity_bytes=view.capacity_bytes, usable_bytes=answer.budget.usable_bytes,
        max_batch=max_batch, max_batch_label=largest_batch_label(best, compiling), margin_fraction=answer.budget.margin,
        kept_bytes=answer.budget.kept_at(inputs.batch_size // gpus), searching=best is not None and not best.settled,
        below=None if best is None or best.exceeds is None else best.exceeds * gpus,
        curve=xla_curve(view, inputs, answer, plan.peak_bytes),
        remat_saving_bytes=None if base_peak_bytes is None or not remat else base_peak_bytes - plan.peak_bytes,
    )


def shown_pending(view: EstimateView, inputs: Inputs, answer: XlaAnswer, compiling: bool = True) -> ShownStep:
    """While the plan of the chosen batch is unknown: the walk's peak, labelled as standing in, against XLA's
    budget (one usable number throughout), XLA's largest batch where its plans tell one (else none yet, never
    the walk's), and a verdict where it is decided already: by a compiled plan (a batch as large that fits, or
    one as small that does not: plans grow with the batch), else, for a catalogue model, by the range XLA's step
    took of the walk's peak on the steps measured (``calc.validation.report.walk_to_xla_range``), where the
    whole range fits or none of it does."""
    walk = shown_walk(view, inputs, standing_in=True)
    gpus, batch = inputs.num_gpus, inputs.batch_size // inputs.num_gpus
    plans = answer.known.plans
    budget = answer.budget
    usable = budget.usable_bytes - view.overhead_bytes
    larger_fits = [b for b, p in plans.items() if b >= batch and p.peak_bytes + budget.kept_at(b) <= usable]
    smaller_fails = [b for b, p in plans.items() if b <= batch and p.peak_bytes + budget.kept_at(b) > usable]
    decided = (min(larger_fits) if larger_fits else max(smaller_fails) if smaller_fails else None)
    best = answer.max_batch
    decided_by = None if decided is None else (
        decided * gpus, plans[decided].peak_bytes + budget.kept_at(decided) + view.overhead_bytes)
    bounded = None  # XLA's step at the end of that range which decides the verdict
    if decided is None and inputs.source == "catalogue":  # the range was measured on catalogue models
        low, high, cases = walk_to_xla_range()
        xla_low, xla_high = round(view.breakdown.peak_bytes * low), round(view.breakdown.peak_bytes * high)
        bounded = None if not cases else xla_high if xla_high <= usable else xla_low if xla_low > usable else None
        if bounded is not None:
            decided_by = (inputs.batch_size, bounded + view.overhead_bytes)
    standing = replace(walk, peak_label=tr("Predicted peak (walk, until XLA's plan)"), usable_bytes=budget.usable_bytes,
                       margin_fraction=budget.margin, searching=True,
                       curve=replace(walk.curve, best=None) if best is None else xla_curve(
                           view, inputs, answer, view.breakdown.peak_bytes),
                       decided_by=decided_by, bound_by_walk=bounded is not None)
    if best is None and not compiling:  # no plan will come: the walk's largest batch, named so
        return replace(standing, searching=False, max_batch=walk.max_batch, max_batch_label=walk.max_batch_label,
                       curve=walk.curve)
    if best is None:  # the plans come: none of the walk's numbers in the meantime
        return replace(standing, max_batch=0, below=None, max_batch_label=largest_batch_label(None, compiling))
    return replace(standing, max_batch=best.batch * gpus, max_batch_label=largest_batch_label(best, compiling),
                   searching=not best.settled, below=None if best.exceeds is None else best.exceeds * gpus)


def xla_curve(view: EstimateView, inputs: Inputs, answer: XlaAnswer, peak_bytes: int) -> CurveView:
    """XLA's curve in global batches: compiled plans, the line drawn between them up to XLA's
    rematerialisation limit, the chosen batch and the largest that fits; the walk beside them."""
    gpus, known, kept = inputs.num_gpus, answer.known, answer.budget.kept_at
    best = answer.max_batch

    def overhead(batch: int) -> int:  # one device's batch: the framework's and the bytes kept free beside the plan
        return view.overhead_bytes + kept(batch)

    compiled = tuple((b * gpus, p.peak_bytes + overhead(b)) for b, p in sorted(known.plans.items()))
    end = known.curve.line_end()
    settled = best is not None and best.settled
    top = x_axis_end(inputs.batch_size, (best.batch if best else 0) * gpus, (end or 0) * gpus,
                     0 if settled else max([view.max_batch, *(b for b, _ in compiled)]))
    drawn = []
    if end is not None:
        per_device = sorted({b // gpus for b in view.curve_batches if b // gpus <= end} | {end, 1})
        for b in per_device:
            point = known.curve.drawn(b)
            if point is not None and b * gpus <= top:
                drawn.append((b * gpus, point.peak_bytes + overhead(b)))
    best_point = None
    if best is not None and best.batch and (plan := known.at(best.batch)) is not None:
        best_point = (best.batch * gpus, plan.peak_bytes + overhead(best.batch))
    return CurveView(walk=walk_curve(view, inputs, top), drawn=tuple(drawn),
                     compiled=tuple(c for c in compiled if c[0] <= top),
                     current=(inputs.batch_size, peak_bytes + overhead(inputs.batch_size // gpus)), best=best_point,
                     x_max=top)


def kept_line(answer: XlaAnswer, inputs: Inputs) -> str:
    """What XLA's verdict and largest batch keep free beside the plan, and why (``calc.xla.budget``)."""
    budget, batch = answer.budget, inputs.batch_size // inputs.num_gpus
    record = (tr("{cases} KerasHub steps measured on an H200 (XLA's autotuner on)", cases=budget.measured.cases)
              if budget.measured.record == "hub_h200" else
              tr("{cases} steps of TensorFlow's XLA step measured on an H100", cases=budget.measured.cases))
    share = "" if budget.kept.share == (1, 1) else tr(
        "on this mesh one card's share, {share} × a replica's logits, as the layout map splits the head tied "
        "to the token embedding (vocabulary on the model axis, hidden size on the data axis); ",
        share=share_text(budget.kept.share))
    mechanism = {
        LOGITS: tr("{bytes} for one buffer of the step's logits (batch × tokens × vocabulary × the compute dtype's "
                   "bytes), which XLA's autotuner kept beside the plan on the steps measured; ",
                   bytes=fmt(budget.kept_at(batch), inputs)) + share,
        WORKSPACE: tr("{bytes} for a cuDNN workspace as large as the largest convolution's input and output, which "
                      "bounded what TensorFlow's XLA step took beside the plan on the large steps measured; ",
                      bytes=fmt(budget.kept_at(batch), inputs)),
    }.get(budget.kept.mechanism, "")
    return tr("XLA's verdict and largest batch keep free, beside the plan: {mechanism}{residual:.1%} of the card, the "
              "most the {record} took beyond that (a flat share would have needed {flat:.1%}); and your {user}% margin "
              "on top.", mechanism=mechanism, residual=budget.measured.fraction, record=record,
              flat=budget.measured.flat, user=inputs.margin)


def remat_note(answer: XlaAnswer, inputs: Inputs) -> str | None:
    """When the largest batch fits only because XLA recomputes activations: how much, and that it is unmeasured."""
    best, curve = answer.max_batch, answer.known.curve
    if best is None or not best.batch or (plan := answer.known.plans.get(best.batch)) is None:
        return None
    line = curve.line_peak(best.batch)
    if line is None or (curve.line_end() or 0) >= best.batch or plan.peak_bytes >= line:
        return None
    return tr("XLA fits the largest batch by recomputing activations: its plan at batch {batch} is {plan}, {under:.0%} "
              "under the straight line through plans that keep them all ({line}). No training step has been measured "
              "at a card's limit yet.", batch=best.batch * inputs.num_gpus, plan=fmt(plan.peak_bytes, inputs),
              under=1 - plan.peak_bytes / line, line=fmt(line, inputs))


def largest_batch_cell(answer: XlaAnswer | None, walk_batch: int, gpus: int) -> str:
    """The Compare page's cell: XLA's largest batch where known (marked when still a lower bound),
    else the walk's, marked as such."""
    if answer is None or answer.max_batch is None:
        return tr("{batch:,} (walk)", batch=walk_batch)
    best = answer.max_batch
    if best.settled:
        return settled_batch(best.batch * gpus)
    return tr("≥ {batch:,}", batch=best.batch * gpus)


def xla_terms(plan: XlaPlan, walk_activations_bytes: int | None, inputs: Inputs) -> list[Term]:
    """XLA's plan as the Formula page teaches it: each kind a term, with what it holds; they add up
    to the plan's peak to the byte. [] without an explanation (``XlaPlan.explained``).
    ``walk_activations_bytes``: what the walk keeps of activations at its peak, said beside XLA's;
    None where no walk is made (a KerasHub model)."""
    breakdown, ex = plan.breakdown(), plan.explained
    if breakdown is None or ex is None:
        return []
    when = _peak_moment(ex)
    how = {
        "weights": (r"W", tr("weights"), tr("the model's variables, an argument of the compiled step")),
        "optimizer_state": (r"O", tr("optimizer state"), tr("the optimizer's variables, an argument too")),
        "input_batch": (r"X", tr("input batch"), tr("the images and labels of one step")),
        "quantized_weights": (r"W_q", tr("quantized frozen weights"), tr(
            "the frozen kernels in 8 or 4 bits, as model.quantize leaves them")),
        "quantization_scales": (r"S_q", tr("quantization scales"), tr("the scales (and int4's zero points) beside them, in the policy's dtype")),
        "activations": (r"A_{XLA}", tr("activations"), tr(
            "the forward values live when XLA's temporaries peak ({when}); the walk keeps {walk} of activations at "
            "its own peak: XLA fuses operations, so some layers' outputs are never stored, and frees each value as "
            "soon as nothing needs it", when=when, walk=fmt(walk_activations_bytes, inputs, 3))
            if walk_activations_bytes is not None else tr(
            "the forward values live when XLA's temporaries peak ({when}): XLA fuses operations, so some layers' "
            "outputs are never stored, and frees each value as soon as nothing needs it", when=when)),
        "gradients": (r"G_{XLA}", tr("gradients"), tr(
            "of the weights and of the activations, made by the backward pass and live then")),
        "optimizer": (r"U", tr("optimizer temporaries"), tr("values of the update live then")),
        "workspace": (r"K", tr("cuDNN and cuBLAS workspace"), tr(
            "scratch the convolution and matrix kernels ask for")),
        "layout_copies": (r"L", tr("layout copies"), tr(
            "weights and the batch copied into the layout a kernel wants, kept while they are needed")),
        "other": (r"R", tr("other XLA values"), tr("XLA's own copies and bookkeeping")),
        "packing": (r"H", tr("heap packing"), tr(
            "what the heap's layout could not pack: XLA's block of temporaries less the values live at its peak")),
        "step_outputs": (r"Y", tr("step outputs"), tr("the loss and the metrics the step returns")),
        "outside_step": (r"Z", tr("outside the step"), tr("what the runtime holds beside the step")),
    }
    return [Term(how[k][0], how[k][1], how[k][2], v) for k, v in breakdown.items() if v]


# The walk's parts (calc.types.MemoryBreakdown.components) beside XLA's kinds (XlaPlan.breakdown), row by
# row: what the two steps hold of the same thing at their peaks. Each part of either is in one row.
VERSUS = ((mark("weights"), ("weights",), ("weights",)),
          (mark("optimizer state"), ("optimizer_state",), ("optimizer_state",)),
          (mark("input batch"), ("input_batch",), ("input_batch",)),
          (mark("activations"), ("activations",), ("activations",)),
          (mark("gradients, and the backward's temporaries"), ("gradients", "backward_transient"), ("gradients",)),
          (mark("optimizer temporaries"), ("other",), ("optimizer",)),
          (mark("cuDNN and cuBLAS workspace"), (), ("workspace",)),
          (mark("layout copies"), (), ("layout_copies",)),
          (mark("other XLA values"), (), ("other", "step_outputs", "outside_step")),
          (mark("the allocator's chunks, the heap's packing"), ("allocator",), ("packing",)))


@dataclass(frozen=True)
class XlaLesson:
    """XLA's plan as the Formula page, its presentation and the handout teach it: its terms (summing to
    ``peak_bytes``), the walk's parts beside its own, and why the two differ, with the user's numbers."""

    terms: tuple[Term, ...]
    peak_bytes: int
    versus: tuple[dict[str, str], ...]
    why: str


def versus_rows(plan: XlaPlan, walk: MemoryBreakdown, inputs: Inputs) -> tuple[dict[str, str], ...]:
    """The walk's peak and XLA's plan part by part (``VERSUS``), then their totals: each column sums to
    its step's peak. Parts neither holds are left out."""
    ours, theirs = walk.components(), plan.breakdown() or {}
    part, walk_head, plan_head, diff_head = tr("part"), tr("graph-executor walk"), tr("XLA's plan"), tr("XLA − walk")

    def row(name: str, a: int, b: int) -> dict[str, str]:
        sign = "+" if b > a else "−" if b < a else ""
        return {part: name, walk_head: fmt(a, inputs, 3), plan_head: fmt(b, inputs, 3),
                diff_head: sign + fmt(abs(b - a), inputs, 3)}

    rows = []
    for label, walk_keys, plan_keys in VERSUS:
        a, b = sum(ours.get(k, 0) for k in walk_keys), sum(theirs.get(k, 0) for k in plan_keys)
        if a or b:
            rows.append(row(tr(label), a, b))
    rows.append(row(tr("peak"), walk.peak_bytes, plan.peak_bytes))
    return tuple(rows)


def why_less_than_the_walk(plan: XlaPlan, walk: MemoryBreakdown, inputs: Inputs) -> str:
    """Why XLA's plan differs from the walk, with the user's numbers: what XLA fuses away and frees early."""
    assert plan.explained is not None
    kinds = plan.breakdown() or {}
    added = sum(kinds.get(k, 0) for k in ("workspace", "layout_copies", "other", "step_outputs", "outside_step"))
    fused = walk.activations_bytes - kinds.get("activations", 0)
    if plan.peak_bytes <= walk.peak_bytes:
        total = tr("XLA's plan ({plan}) is {diff} less than the walk's peak ({walk}).", plan=fmt(plan.peak_bytes, inputs, 3),
                   walk=fmt(walk.peak_bytes, inputs, 3), diff=fmt(walk.peak_bytes - plan.peak_bytes, inputs, 3))
    else:
        total = tr("XLA's plan ({plan}) is {diff} more than the walk's peak ({walk}).", plan=fmt(plan.peak_bytes, inputs, 3),
                   walk=fmt(walk.peak_bytes, inputs, 3), diff=fmt(plan.peak_bytes - walk.peak_bytes, inputs, 3))
    if fused >= 0:
        kept = tr("At its peak ({phase}) the walk keeps {walk} of activations, every tensor a gradient will read; at "
                  "XLA's peak ({when}) {plan} are live, {fused} fewer: XLA fuses elementwise operations (a "
                  "BatchNormalization, its activation, an addition) into the kernel that feeds them, so their outputs "
                  "are never written unless a gradient reads them, and frees each value as soon as its last reader "
                  "has run.",
                  phase=walk.peak_phase, walk=fmt(walk.activations_bytes, inputs, 3), when=_peak_moment(plan.explained),
                  plan=fmt(kinds.get("activations", 0), inputs, 3), fused=fmt(fused, inputs, 3))
    else:
        kept = tr("At its peak ({phase}) the walk keeps {walk} of activations; at XLA's peak ({when}) {plan} are "
                  "live, {more} more: XLA's peak comes at another moment of the step than the walk's.",
                  phase=walk.peak_phase, walk=fmt(walk.activations_bytes, inputs, 3), when=_peak_moment(plan.explained),
                  plan=fmt(kinds.get("activations", 0), inputs, 3), more=fmt(-fused, inputs, 3))
    state = (walk.weights_bytes + walk.optimizer_state_bytes + walk.input_batch_bytes
             - sum(kinds.get(k, 0) for k in ("weights", "optimizer_state", "input_batch")))
    same = tr("The weights, the optimizer state and the batch are the same values in both steps; the walk counts "
              "them {state} larger, by TensorFlow's allocator rounding (term C of the walk's formula), which XLA's "
              "buffers do not have.", state=fmt(state, inputs, 3)) if state > 0 else ""
    extra = tr("XLA adds {added} the walk does not name (kernel workspace, copies in another layout, its own "
               "values), and its heap packs the rest into {packing} of gaps.", added=fmt(added, inputs, 3),
               packing=fmt(kinds.get("packing", 0), inputs, 3))
    return " ".join(x for x in (total, same, kept, extra) if x)


def xla_lesson(answer: XlaAnswer | None, walk: MemoryBreakdown, inputs: Inputs) -> XlaLesson | None:
    """XLA's plan as a lesson, where the plan says what fills its peak; else None. ``walk``: the walk's
    peak of the same configuration, which the lesson sets beside it."""
    if answer is None or answer.plan is None:
        return None
    terms = xla_terms(answer.plan, walk.activations_bytes, inputs)
    if not terms:
        return None
    return XlaLesson(tuple(terms), answer.plan.peak_bytes, versus_rows(answer.plan, walk, inputs),
                     why_less_than_the_walk(answer.plan, walk, inputs))


def xla_largest(answer: XlaAnswer | None, inputs: Inputs) -> str:
    """XLA's largest batch in words, global, as the Estimator's metric has it: settled, or the bound so far."""
    best = None if answer is None else answer.max_batch
    if best is None:
        return ""
    if best.settled:
        return settled_batch(best.batch * inputs.num_gpus)
    return tr("at least {batch:,} (not settled yet)", batch=best.batch * inputs.num_gpus)


def drawn_lesson(answer: XlaAnswer, inputs: Inputs) -> str:
    """How a drawn plan comes from the two compiled plans it is drawn between, with their numbers ("" where the
    plan is compiled or unknown): the line's bytes a sample, and the peak it gives at this batch."""
    plan = answer.plan
    if plan is None or plan.compiled or len(plan.drawn_through) != 2:
        return ""
    a, c = plan.drawn_through
    low, high = answer.known.plans.get(a), answer.known.plans.get(c)
    if low is None or high is None:
        return ""
    gpus = inputs.num_gpus
    per = (high.peak_bytes - low.peak_bytes) / ((c - a) * gpus)
    return tr("XLA's plan at batch {b} is drawn, not compiled, on the line through the plans compiled at batches {a} "
              "({pa}) and {c} ({pc}): each sample adds ({pc} − {pa}) ÷ ({c} − {a}) = {per}, so batch {b} plans "
              "{pa} + ({b} − {a}) × {per} = {peak}. What fills the peak, by kind and by layer, is in the compiled "
              "plans' own explanations, not in a drawn one.", b=inputs.batch_size, a=a * gpus, c=c * gpus,
              pa=fmt(low.peak_bytes, inputs, 3), pc=fmt(high.peak_bytes, inputs, 3), per=fmt(per, inputs, 4),
              peak=fmt(plan.peak_bytes, inputs, 3))


def lesson_line(answer: XlaAnswer, inputs: Inputs, gpu: GpuPreset, taught: bool = False) -> str:
    """The Formula page's line on the step the Estimator shows, when that step is XLA's; ``taught``: the
    page teaches XLA's plan first (it says what fills its peak)."""
    if answer.plan is None:
        return tr("The sidebar's step is XLA's (jit_compile=True), whose plan for this batch is not known on this "
                  "server yet: the Estimator compiles it. This page teaches the graph executor's step "
                  "(jit_compile=False), and every number here is the walk's.")
    largest = xla_largest(answer, inputs) or "-"
    shown = tr("The sidebar's step is XLA's (jit_compile=True): the Estimator shows XLA's own plan, {peak} at this "
               "batch ({how}), and its largest batch on {gpu}, {largest}, with {margin:.1%} of the card kept free.",
               peak=fmt(answer.plan.peak_bytes, inputs), gpu=gpu.name, largest=largest, margin=answer.budget.margin,
               how=tr("compiled") if answer.plan.compiled else tr("drawn between compiled plans"))
    if drawn := drawn_lesson(answer, inputs):
        shown += " " + drawn
    if taught:
        return shown + " " + tr("The first section teaches that plan; from section 1 on, the page teaches the graph "
                                "executor's step (jit_compile=False), whose formula XLA does not follow, and every "
                                "number there is the walk's.")
    return shown + " " + tr("This page teaches the graph executor's step (jit_compile=False), whose formula XLA does "
                            "not follow (it fuses operations and plans its own buffers): every number below is the "
                            "walk's.")


# The Layers page's columns of XLA's kinds (calc.xla.peak.KINDS): the optimizer's temporaries go with XLA's other values.
LAYER_COLUMNS = ((mark("activations"), ("activations",)), (mark("gradients"), ("gradients",)),
                 (mark("workspace"), ("workspace",)), (mark("layout copies"), ("layout_copies",)),
                 (mark("other"), ("optimizer", "other")))


def xla_layer_rows(plan: XlaPlan, inputs: Inputs) -> list[dict[str, object]]:
    """XLA's plan at its peak by layer: each layer's temporaries live then, by kind, then the rest of
    the peak (the state, the batch, the step's outputs, the heap's packing), each its own row; the
    totals sum to ``plan.peak_bytes``. [] without an explanation (``XlaPlan.explained``)."""
    if plan.explained is None:
        return []
    divisor, unit = unit_divisor(inputs), inputs.unit
    total = tr("total ({unit})", unit=unit)
    columns = [(tr(label) + f" ({unit})", kinds) for label, kinds in LAYER_COLUMNS]

    def row(name: str, per: dict[str, int]) -> dict[str, object]:
        out: dict[str, object] = {tr("layer"): name}
        out.update({title: round(sum(per.get(k, 0) for k in kinds) / divisor, 4) for title, kinds in columns})
        out[total] = round(sum(per.values()) / divisor, 4)
        return out

    rows = [row(name, dict(per)) for name, per in plan.explained.layers]
    rest = {k: v for k, v in (plan.breakdown() or {}).items() if k not in plan.explained.kind_bytes() or k == "packing"}
    names = {"weights": tr("(weights)"), "optimizer_state": tr("(optimizer state)"), "input_batch": tr("(input batch)"),
             "packing": tr("(heap packing)"), "step_outputs": tr("(step outputs)"), "outside_step": tr("(outside the step)")}
    rows += [{tr("layer"): names[k], **{title: 0.0 for title, _ in columns}, total: round(v / divisor, 4)}
             for k, v in rest.items() if v]
    return rows


def xla_layers_caption(plan: XlaPlan, inputs: Inputs) -> str:
    """What the XLA table on the Layers page is, with the moment of the peak."""
    assert plan.explained is not None
    return tr("XLA's plan peaks {when}. Each layer's row is what its values hold in XLA's temporaries then "
              "(activations, gradients, the cuDNN and cuBLAS workspace, copies in another layout); the rows in "
              "parentheses are the rest of the plan's peak. The totals sum to the plan's peak, {peak}.",
              when=_peak_moment(plan.explained), peak=fmt(plan.peak_bytes, inputs))


def _peak_moment(ex: PeakExplained) -> str:
    """When XLA's temporaries peak, in words: in which layer's pass, or the update, or XLA's own copies."""
    return {"backward": tr("in the backward pass of {layer}", layer=ex.moment_layer),
            "forward": tr("in the forward pass of {layer}", layer=ex.moment_layer),
            "update": tr("in the optimizer's update")}.get(ex.moment_phase, tr("while XLA copies values"))


def layers_line(answer: XlaAnswer, walk_peak_bytes: int, inputs: Inputs) -> str:
    """The Layers page's line on the step it shows, when the sidebar's step is XLA's."""
    if answer.plan is not None and answer.plan.explained is not None:
        return tr("The sidebar's step is XLA's: its plan for this batch is {plan}, the walk's peak {walk}. The first "
                  "table is XLA's plan by layer; the ledger and timeline below are the graph-executor walk's "
                  "(jit_compile=False).", plan=fmt(answer.plan.peak_bytes, inputs), walk=fmt(walk_peak_bytes, inputs))
    if answer.plan is None:
        return tr("The sidebar's step is XLA's, whose plan for this batch is not known on this server yet. This page "
                  "shows the graph-executor walk's ledger (jit_compile=False): XLA's plan is not broken down by "
                  "layer.")
    if drawn := drawn_lesson(answer, inputs):
        return drawn + " " + tr("This page shows the graph-executor walk's ledger and timeline (jit_compile=False).")
    return tr("The sidebar's step is XLA's: its plan for this batch is {plan}, the walk's peak {walk}. This page "
              "shows the graph-executor walk's ledger and timeline (jit_compile=False): XLA's plan is not broken "
              "down by layer.", plan=fmt(answer.plan.peak_bytes, inputs), walk=fmt(walk_peak_bytes, inputs))


def compare_table(rows: list[dict[str, object]], gpus: list[GpuPreset], inputs: Inputs,
                  answers: dict[tuple[str, str], XlaAnswer | None]) -> list[dict[str, object]]:
    """The Compare page's table (``views.compare_table``) with XLA's largest batches in place of the walk's,
    for the XLA step: ``answers`` (model, GPU key) -> that configuration's answer, None where XLA's plan
    does not apply. The cells become text (``largest_batch_cell``)."""
    model = tr("model")
    out = []
    for row in rows:
        row = {k: v for k, v in row.items() if k != walk_peak_column(inputs)}  # XLA's peaks are a table of their own
        for gpu in gpus:
            row[gpu.name] = largest_batch_cell(answers.get((str(row[model]), gpu.key)), int(row[gpu.name]),  # type: ignore[call-overload]
                                               inputs.num_gpus)
        out.append(row)
    return out


QUANTIZED_BITS = {"int8": mark("8-bit integers"), "int4": mark("4-bit integers packed two to a byte"),
                  "float8": mark("their own dtype, the products in 8-bit floats")}


def hub_line(spec: HubSpec, inputs: Inputs) -> str:
    """What a KerasHub model's step is, with its numbers: the preset, the sequence, what trains."""
    model = spec.model
    counts = lora_counts(model, spec.lora_rank) if spec.lora_rank else None
    shape = (tr("{tokens:,} tokens per example", tokens=spec.sequence_length) if model.text else
             tr("{size} px images", size="x".join(map(str, (model.image_shape or ())[:2]))))
    if hub_frozen(inputs):
        trains = tr("the backbone is frozen, in {dtype}", dtype=spec.dtype)
    elif not spec.lora_rank:
        trains = tr("every weight trains, in {dtype}", dtype=spec.dtype)
    elif counts is None:
        trains = tr("LoRA rank {rank} on every layer's query and value, the rest frozen in {dtype}",
                    rank=spec.lora_rank, dtype=spec.dtype)
    elif counts[1]:
        trains = tr("LoRA rank {rank} on every layer's query and value: {adapters:,} parameters train in float32 "
                    "(and {biases:,} of the projections' biases), the rest is frozen in {dtype}",
                    rank=spec.lora_rank, adapters=counts[0], biases=counts[1], dtype=spec.dtype)
    else:
        trains = tr("LoRA rank {rank} on every layer's query and value: {adapters:,} parameters train in float32, "
                    "the rest is frozen in {dtype}", rank=spec.lora_rank, adapters=counts[0], dtype=spec.dtype)
    if model.task != "causal_lm" and hub_frozen(inputs):
        trains = tr("{trains}; a new head of {classes} classes alone trains", trains=trains, classes=spec.classes)
    elif model.task != "causal_lm":
        trains = tr("{trains}; a new head of {classes} classes trains too", trains=trains, classes=spec.classes)
    if spec.quantize:
        trains = tr("{trains}; the backbone quantized first as model.quantize(\"{mode}\") quantizes it (its frozen "
                    "kernels in {bits} with their scales, shown apart in the bar)", trains=trains, mode=spec.quantize,
                    bits=tr(QUANTIZED_BITS[spec.quantize]))
    return tr("{preset}: {params:,} parameters ({family}); {shape}; {trains}. The step is Keras's on the JAX backend "
              "(jit_compile=True), planned by XLA for the card from the model's figures, without its weights.",
              preset=spec.preset, params=model.params, family=model.family, shape=shape, trains=trains)


@dataclass(frozen=True)
class SequenceView:
    """The longest sequence a KerasHub text model trains at the page's batch, as far as the plans
    compiled at that batch tell it (``calc.xla.search.sequence_search``): only compiled plans count,
    since attention can make a plan grow faster than the sequence."""

    batch: int  # one device's
    points: tuple[tuple[int, int], ...]  # (tokens, plan peak + framework overhead) the search read, ascending
    longest: int | None  # None while the search still needs a compile
    exceeds: int | None  # the shortest length read that does not fit; None at the model's limit
    limit: int  # the longest sequence the model takes
    current: int  # the page's sequence length
    capacity_bytes: int
    usable_bytes: int


def sequence_view(spec: HubSpec, batch: int, answer: XlaAnswer, known_of: Callable[[HubSpec], KnownPlans],
                  config: TrainingConfig | None = None) -> SequenceView:
    """The search for the longest sequence at one device's ``batch`` replayed over the plans known
    (``known_of`` gives a length's plans; ``config``: the mesh, where there is one); nothing is compiled here."""
    budget = answer.budget
    found, read = known_sequence_search(spec, batch, budget.plan_bytes, known_of, config)
    done = found if isinstance(found, XlaMaxSequence) else None
    return SequenceView(batch, tuple((n, b + budget.overhead_bytes) for n, b in sorted(read.items())),
                        None if done is None else done.max_sequence, None if done is None else done.exceeds,
                        spec.model.sequence_limit, spec.sequence_length, budget.memory_bytes, budget.usable_bytes)


def sequence_line(view: SequenceView) -> str:
    """One line: the longest sequence that fits at the batch, how it was found, or how far the search is."""
    if view.longest is None:
        return tr("Longest sequence at batch {batch}: searching over XLA plans (lengths compiled so far: {count}).",
                  batch=view.batch, count=len(view.points))
    if view.longest == 0:
        return tr("Not even one token fits at batch {batch} on this card.", batch=view.batch)
    if view.exceeds is None:
        return tr("Longest sequence at batch {batch}: {tokens:,} tokens, the longest the model takes, fits "
                  "(XLA plans, {count} lengths compiled).", batch=view.batch, tokens=view.longest,
                  count=len(view.points))
    return tr("Longest sequence at batch {batch}: {tokens:,} tokens fit and {exceeds:,} do not (XLA plans, {count} "
              "lengths compiled; the search stops where 1/64 more or less decides nothing).", batch=view.batch,
              tokens=view.longest, exceeds=view.exceeds, count=len(view.points))
