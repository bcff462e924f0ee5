"""A KerasHub model's step as the Formula page teaches it: pure, no Streamlit.

The terms are the compiled plan's own parts, so they add up to its peak to the byte. Where the
parameter counts give a part (LoRA's adapters and the biases that train with them, the frozen
backbone, the optimizer's slots), the term shows that arithmetic with the user's numbers, and
names what the plan holds beyond it (a classifier's new head, the dropout layers' seeds, the
metrics' variables). What the step keeps while it runs is XLA's: by kind where the plan says what
fills its peak, else as one block.
"""

from __future__ import annotations

from calc.facts.optimizers import slots_per_variable
from calc.hub import DTYPE_BYTES, LORA_BYTES, OPTIMIZER_SCALAR_BYTES, HubSpec, lora_counts
from calc.types import TrainingConfig
from calc.xla import XlaPlan
from dashboard.i18n import tr
from dashboard.lesson import Term, handout_page, terms_html
from dashboard.state import Inputs
from dashboard.views import fmt, hub_frozen
from dashboard.xla_view import XlaAnswer, XlaLesson, xla_terms

STATE = ("weights", "optimizer_state", "input_batch")


def _beyond(formula: int, held: int, what: str, inputs: Inputs) -> str:
    """The arithmetic's result, and what the plan holds beyond it (``what``), where it holds more."""
    if held == formula:
        return fmt(formula, inputs, 3)
    return tr("{formula}, and {rest} of {what}", formula=fmt(formula, inputs, 3), rest=fmt(held - formula, inputs, 3),
              what=what)


def weight_terms(plan: XlaPlan, spec: HubSpec, inputs: Inputs) -> list[Term]:
    """The frozen weights and those that train, from the parameter counts where they give them."""
    model, d = spec.model, DTYPE_BYTES[spec.dtype]
    trainable, frozen = plan.trainable_weights_bytes, plan.weights_bytes - plan.trainable_weights_bytes
    counts = lora_counts(model, spec.lora_rank) if spec.lora_rank else None
    head = tr("the new head of {classes} classes", classes=spec.classes)
    seeds = tr("other non-trainable variables (each dropout layer's seed, two uint32)")
    params = f"{model.params:,}"
    if counts is not None:
        adapters, biases = counts
        lora = LORA_BYTES * adapters + d * biases
        frozen_formula = d * (model.params - biases)
        if frozen_formula <= frozen and lora <= trainable:
            trains = tr("LoRA's A and B on every layer's query and value, {adapters:,} parameters in float32 (Keras keeps "
                        "them so whatever the policy), and the projections' {biases:,} biases in {dtype}: {adapters:,} x "
                        "4 B + {biases:,} x {d} B = {total}", adapters=adapters, biases=biases, dtype=spec.dtype, d=d,
                        total=_beyond(lora, trainable, head, inputs))
            keeps = tr("the backbone's {params} parameters less the biases that train, in {dtype}: ({params} - "
                       "{biases:,}) x {d} B = {total}", params=params, biases=biases, dtype=spec.dtype, d=d,
                       total=_beyond(frozen_formula, frozen, seeds, inputs))
            return [Term(r"W_{frozen}", tr("frozen weights"), keeps, frozen),
                    Term(r"W_{train}", tr("weights that train"), trains, trainable)]
    if hub_frozen(inputs) and d * model.params <= frozen:
        keeps = tr("the backbone's {params} parameters in {dtype}: {params} x {d} B = {total}", params=params,
                   dtype=spec.dtype, d=d, total=_beyond(d * model.params, frozen, seeds, inputs))
        return [Term(r"W_{frozen}", tr("frozen weights"), keeps, frozen),
                Term(r"W_{train}", tr("weights that train"), tr("{head} alone", head=head), trainable)]
    if not spec.lora_rank and not hub_frozen(inputs) and d * model.params <= plan.weights_bytes:
        every = tr("the backbone's {params} parameters in {dtype}: {params} x {d} B = {total}", params=params,
                   dtype=spec.dtype, d=d, total=_beyond(d * model.params, plan.weights_bytes, seeds if model.task ==
                                                        "causal_lm" else tr("{head} and {seeds}", head=head,
                                                                            seeds=seeds), inputs))
        return [Term(r"W", tr("weights"), tr("every weight trains: {every}", every=every), plan.weights_bytes)]
    return [Term(r"W", tr("weights"), tr("the model's variables, an argument of the compiled step"), plan.weights_bytes)]


def quantized_terms(plan: XlaPlan, spec: HubSpec) -> list[Term]:
    """A quantized model's weights: its quantized kernels, their scales, and the rest (what trains, the norms)."""
    quantized, scales = plan.quantized_weights_bytes, plan.quantization_scales_bytes
    bits = {"int8": tr("one byte a weight"), "int4": tr("half a byte a weight, two packed in a byte")}.get(
        spec.quantize, spec.quantize)
    return [Term(r"W_q", tr("quantized frozen weights"), tr(
                "the kernels model.quantize(\"{mode}\") quantizes (the embedding, attention's and the feed-forward "
                "layers'), {bits}", mode=spec.quantize, bits=bits), quantized),
            Term(r"S_q", tr("quantization scales"), tr(
                "a scale for each output of those kernels (and int4's zero points), in {dtype}", dtype=spec.dtype),
                scales),
            Term(r"W", tr("other weights"), tr(
                "what quantization leaves in its dtype: the weights that train (LoRA's, in float32), the norms"),
                plan.weights_bytes - quantized - scales)]


def optimizer_term(plan: XlaPlan, config: TrainingConfig) -> Term:
    """The optimizer's variables: a slot per trainable weight and slot kind, and its two scalars."""
    slots = slots_per_variable(config.optimizer, config.optimizer_options, config.gradient_accumulation_steps)
    trainable = plan.trainable_weights_bytes
    formula = slots * trainable + OPTIMIZER_SCALAR_BYTES
    if trainable and formula <= plan.optimizer_state_bytes:
        how = tr("{slots} slots the size of the weights that train, and the iteration count (int32) and learning rate "
                 "(float32): {slots} x W_train + 8 B = {formula:,} B; the metrics' variables add {metrics:,} B",
                 slots=slots, formula=formula, metrics=plan.optimizer_state_bytes - formula)
    else:
        how = tr("the optimizer's variables, an argument too")
    return Term(r"O", tr("optimizer state"), how, plan.optimizer_state_bytes)


def batch_term(plan: XlaPlan, spec: HubSpec, batch: int) -> Term:
    """One step's batch as the step takes it: per token for a text model."""
    tokens = batch * spec.sequence_length
    if spec.model.text and tokens and plan.input_batch_bytes % tokens == 0:
        how = tr("batch {batch} x {tokens:,} tokens x {each} B a token (the token ids and masks, and for a causal "
                 "LM its labels and sample weights) = {total:,} B", batch=batch, tokens=spec.sequence_length,
                 each=plan.input_batch_bytes // tokens, total=plan.input_batch_bytes)
    elif spec.model.text:
        how = tr("the token ids and masks of {batch} examples of {tokens:,} tokens, and their labels", batch=batch,
                 tokens=spec.sequence_length)
    else:
        how = tr("the images and labels of one step")
    return Term(r"X", tr("input batch"), how, plan.input_batch_bytes)


def hub_lesson(answer: XlaAnswer | None, spec: HubSpec, config: TrainingConfig, inputs: Inputs) -> XlaLesson | None:
    """A KerasHub step as a lesson, from its compiled plan at the page's batch; None before that plan is known."""
    if answer is None or answer.plan is None or not answer.plan.compiled:
        return None
    plan = answer.plan
    quantized = plan.quantized_weights_bytes + plan.quantization_scales_bytes
    weights = quantized_terms(plan, spec) if quantized else weight_terms(plan, spec, inputs)
    terms = [*weights, optimizer_term(plan, config), batch_term(plan, spec, config.per_replica_batch)]
    state_symbols = (r"W", r"O", r"X", r"W_q", r"S_q")
    kept = [t for t in xla_terms(plan, None, inputs) if t.symbol not in state_symbols] if plan.explained else []
    if not kept:
        kept = [Term(r"T", tr("XLA's temporaries"), tr(
            "what the step keeps while it runs (activations, gradients, the update's scratch), as XLA's buffer "
            "assignment packs them; what fills them at their peak is not known on this server yet"),
            plan.temporaries_bytes)]
        kept += [Term(s, n, h, b) for s, n, h, b in ((r"Y", tr("step outputs"), tr(
            "the loss and the metrics the step returns"), plan.outputs_bytes), (r"Z", tr("outside the step"), tr(
                "what the runtime holds beside the step"), plan.outside_step_bytes)) if b]
    terms += kept
    state = plan.weights_bytes + plan.optimizer_state_bytes
    why = tr("Of the plan's {peak}, {state} is the state: the weights and the optimizer's variables, which follow from "
             "the parameter counts and do not change with the batch or the sequence. The other {rest} is what one step "
             "at batch {batch} keeps: it grows with the batch, and with the sequence length, faster than linearly "
             "where attention keeps its score matrices for the backward pass (a card without cuDNN's flash "
             "attention, or a model with dropout in attention).", peak=fmt(plan.peak_bytes, inputs, 3),
             state=fmt(state, inputs, 3), rest=fmt(plan.peak_bytes - state, inputs, 3),
             batch=config.per_replica_batch)
    if config.model_parallel > 1:
        why += " " + tr("On this {mesh} mesh every number is one card's: the preset's layout map splits the kernels it "
                        "names (the embedding, attention's and the feed-forward layers') over the {model} cards of the "
                        "model axis, and the data axis splits the batch over its {data} replica(s); LoRA's adapters, "
                        "their optimizer slots and the norms stay whole on every card, and so do the activations a "
                        "model axis does not split.", mesh=config.mesh, model=config.model_parallel,
                        data=config.num_gpus)
    elif config.num_gpus > 1:
        why += " " + tr("On this {mesh} mesh every card holds the whole model and its {per} examples of the batch: "
                        "the numbers are one card's.", mesh=config.mesh, per=config.per_replica_batch)
    return XlaLesson(tuple(terms), plan.peak_bytes, (), why)


def hub_handout_html(taught: XlaLesson, inputs: Inputs, setup: str, step: str, *, link: str = "", made: str = "",
                     version: str = "") -> str:
    """The KerasHub lesson as a printable page: ``setup`` (the step's line), ``step`` (what it teaches), its
    terms with their arithmetic and the sum, and what the state and the rest are."""
    from html import escape

    heading = tr("XLA's plan, with your numbers")
    body = (f"<h2>{escape(heading)}</h2>"
            f"{terms_html(list(taught.terms), taught.peak_bytes, inputs)}<p>{escape(taught.why)}</p>")
    return handout_page(inputs, setup, step, body, link=link, made=made, version=version)
