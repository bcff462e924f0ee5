"""The Formula page's numbers: each term of the engine's sum and each rule of thumb, for the inputs."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from calc.estimate import GpuFit, accumulator_reset_parameters, early_temporaries_per_variable, plan_step
from calc.facts.dtypes import FLOAT32, LABEL_BYTES
from calc.gpus import GpuPreset
from calc.types import Device, MemoryBreakdown, ModelProfile
from calc.facts.allocator import ALLOCATION_GRANULE, FRAGMENTATION, UNTRACKED_BELOW
from dashboard.i18n import tr
from dashboard.state import Inputs
from dashboard.views import config_of, fit_of, fmt, layer_rows

if TYPE_CHECKING:  # dashboard.xla_view imports this module
    from dashboard.xla_view import XlaLesson


@dataclass(frozen=True)
class Measurement:
    """TensorFlow's allocator peak of one device's step (the validation set), and where it ran."""

    peak_bytes: int
    device: Device  # whose kernels: an H100's (``gpu``) or a CPU's
    batch: int  # the batch that device ran


@dataclass(frozen=True)
class FormulaNumbers:
    batch: int
    weights_params: int
    trainable_params: int
    slots: int
    reset_constant_params: int  # zeros constants that reset gradient accumulators (0 without accumulation)
    early_per_param: int  # optimizer temporaries made before the gradient, per trainable parameter
    early_alive: float  # the share of them the peak holds (calc.facts.optimizers.EARLY_TEMPORARIES_ALIVE)
    waits_for_all: bool  # mixed_float16: every update waits for every gradient (the loss scale's cond)
    branch_per_param: float  # then: update temporaries per parameter held together (BRANCH_TEMPORARIES)
    fit: GpuFit  # the walk's breakdown on the card, with the usable memory (views.fit_of)
    half_kernel_bytes: int  # mixed_float16: the float16 CPU kernels' buffers of the layer at the peak (calc.facts.kernels)
    kept_per_sample: int
    neurons: int
    input_elements: int
    nnc_bytes: int
    cs231n_mb: float
    cs231n_bytes: int
    rule_max_batch: int
    engine_max_batch: int  # global, with the safety margin: the walk's (the step this page teaches)
    measured: Measurement | None
    label_elements: int  # per sample

    @property
    def breakdown(self) -> MemoryBreakdown:
        return self.fit.breakdown

    @property
    def weights_term_bytes(self) -> int:
        """W as printed: every parameter at 4 bytes."""
        return self.weights_params * FLOAT32

    @property
    def state_term_bytes(self) -> int:
        """S as printed: the slots of every trainable parameter (and the accumulators' reset zeros) at 4 bytes."""
        return (self.slots * self.trainable_params + self.reset_constant_params) * FLOAT32

    @property
    def input_term_bytes(self) -> int:
        """X as printed: the batch's inputs at 4 bytes and its integer labels at 8."""
        return self.batch * (self.input_elements * FLOAT32 + self.label_elements * LABEL_BYTES)

    @property
    def rounding_bytes(self) -> int:
        """What the allocator adds to W, S and X beyond their sizes (whole granules, the chunk margin; on a CPU
        small tensors are served outside the counted pool): the walk's W + S + X less the three printed terms."""
        b = self.breakdown
        exact = self.weights_term_bytes + self.state_term_bytes + self.input_term_bytes
        return b.weights_bytes + b.optimizer_state_bytes + b.input_batch_bytes - exact

    @property
    def measured_bytes(self) -> int | None:
        return None if self.measured is None else self.measured.peak_bytes


def formula_numbers(profile: ModelProfile, inputs: Inputs, gpu: GpuPreset, measured: Measurement | None,
                    fit: GpuFit, largest_batch: int) -> FormulaNumbers:
    """``fit``: the walk's fit on ``gpu`` (``views.fit_of``); ``largest_batch``: the walk's largest batch,
    the step this page teaches (the Estimator's answer for the graph-executor step)."""
    from calc import classic
    from calc.estimate import kernel_bytes_at, waits_for_all_gradients
    from calc.facts.optimizers import EARLY_TEMPORARIES_ALIVE, branch_temporaries, slots_per_variable

    config = config_of(inputs)
    b = fit.breakdown
    plan = plan_step(profile, config)
    neurons = classic.count_neurons(profile)
    input_elements = sum(profile.tensor_elements[t] for t in profile.input_ids)
    batch = config.per_replica_batch
    cs = classic.cs231n_answer(neurons, profile.total_params, input_elements, batch, as_printed=False)
    return FormulaNumbers(
        batch=batch,
        weights_params=profile.total_params,
        trainable_params=profile.trainable_params,
        slots=slots_per_variable(config.optimizer, config.optimizer_options, config.gradient_accumulation_steps),
        reset_constant_params=accumulator_reset_parameters(profile, config),
        early_per_param=early_temporaries_per_variable(config),
        early_alive=EARLY_TEMPORARIES_ALIVE,
        waits_for_all=waits_for_all_gradients(config),
        branch_per_param=branch_temporaries(config.optimizer, config.optimizer_options),
        fit=fit,
        half_kernel_bytes=kernel_bytes_at(profile, config, b.peak_phase),
        kept_per_sample=sum(plan.kept_per_sample),
        neurons=neurons,
        input_elements=input_elements,
        nnc_bytes=classic.nnc_bytes(neurons, profile.total_params, batch),
        cs231n_mb=cs.total_mb,
        cs231n_bytes=int(cs.total_mb * classic.MB),
        rule_max_batch=classic.max_batch_rule(gpu.memory_bytes, neurons, profile.trainable_params),
        engine_max_batch=largest_batch,
        measured=measured,
        label_elements=profile.label_elements,
    )


@dataclass(frozen=True)
class Term:
    """One term of the engine's sum, as the Formula page, the presentation and the handout show it."""

    symbol: str  # LaTeX
    name: str
    how: str  # Markdown: what it counts, with the user's numbers; ends with the arithmetic where it is one
    nbytes: int


def terms(n: FormulaNumbers, inputs: Inputs) -> list[Term]:
    """The terms of M_peak in order; they add up to the walk's peak to the byte."""
    b, opt = n.breakdown, inputs.optimizer
    accumulation = resets = ""
    if n.reset_constant_params:
        accumulation = tr(", one of them the gradient accumulator; TensorFlow also keeps the zeros that reset the "
                          "accumulators as constants, one per distinct variable shape")
        resets = f" + {n.reset_constant_params:,}"
    if n.waits_for_all:
        gradients = tr("under mixed_float16 the loss scale checks that every gradient is finite before any update "
                       "(one `ops.cond` over all of them), so at the update all gradients are alive")
        update = tr("when that branch starts, the updates of all variables are ready at once, and the peak holds "
                    "update temporaries of many of them together: measured on Dense chains, about {per:g} per "
                    "trainable parameter for `{opt}` beyond the gradient (`branch_temporaries` in "
                    "`calc.facts.optimizers`; the runs scatter): at most {per:g} × {params:,} × 4 B, or one "
                    "update's scratch if that is larger, counted when the update is the peak",
                    per=n.branch_per_param, opt=opt, params=n.trainable_params)
    else:
        gradients = tr("Keras applies each gradient soon after it is computed, so only a few are alive at once")
        if n.early_per_param:
            update = tr("`{opt}` computes {k} products of its slots alone per trainable parameter (SGD momentum's "
                        "m·momentum, RMSprop's ρ·v, ...); nothing waits for the gradient, so they can run at the "
                        "start of the step and live until the variable's update. Measured, the peak holds about "
                        "{alive:.0%} of them on average (the executor runs some late). At most {alive:g} × {k} × "
                        "{params:,} × 4 B; those of the variables not yet updated at the peak",
                        opt=opt, k=n.early_per_param, alive=n.early_alive, params=n.trainable_params)
        else:
            update = tr("`{opt}` computes nothing from its slots alone before the gradient arrives, so no update "
                        "temporary waits at the peak beyond the running update's", opt=opt)
    half = ""
    if n.half_kernel_bytes:
        half = tr("; {size} of it are buffers of TensorFlow's own float16 CPU kernels, which run because oneDNN has "
                  "no float16 path: a convolution's gradient im2cols a shard of the batch into one buffer of "
                  "[⌈15 Mi / unit⌉, output pixels, filter size] float16 elements (about 30 MiB whatever the batch), "
                  "and a Dense layer's MatMul copies its operands and result to float32 (`calc.facts.kernels`)",
                  size=fmt(n.half_kernel_bytes, inputs, 3))
    below = tr(" On a CPU, requests under {below:,} B come from a separate allocator and are not counted.",
               below=UNTRACKED_BELOW) if inputs.device != "gpu" else ""
    return [
        Term("W", tr("weights"), tr("every variable, 4 bytes each (float32 even under mixed precision): "
                                    "{params:,} × 4 B", params=n.weights_params), n.weights_term_bytes),
        Term("S", tr("optimizer state"), tr("slots per trainable parameter for `{opt}` (Keras 3 `build()`"
                                            "{accumulation}): {slots}; {slots} × {params:,}{resets} × 4 B",
                                            opt=opt, accumulation=accumulation, slots=n.slots,
                                            params=n.trainable_params, resets=resets), n.state_term_bytes),
        Term("G", tr("gradients alive at the peak"), gradients, b.gradients_bytes),
        Term("U", tr("optimizer update temporaries"), update, b.other_bytes),
        Term(r"B \cdot a", tr("activations kept for the backward pass"),
             tr("what each layer's gradient reads (a Conv keeps its input, a ReLU its output, BatchNormalization its "
                "input, Add nothing), alive at the peak ({phase}): batch {batch}, at most {per:,} bytes per sample "
                "over the whole model", phase=b.peak_phase, batch=n.batch, per=n.kept_per_sample), b.activations_bytes),
        Term("T", tr("backward transients"), tr("gradients of activations and scratch of the layer running at the "
                                                "peak{half}", half=half), b.backward_transient_bytes),
        Term("X", tr("the input batch"), tr("{batch} × {elements:,} × 4 B, and the integer labels {batch} × "
                                           "{labels:,} × 8 B", batch=n.batch, elements=n.input_elements,
                                           labels=n.label_elements), n.input_term_bytes),
        Term("C", tr("the allocator's rounding of W, S and X"),
             tr("TensorFlow's BFC allocator hands out whole units of {granule} B, and a free chunk whole unless it is "
                "at least twice the request, so a tensor can hold up to about twice its size. The engine counts "
                "every tensor at its size rounded up plus a measured {frag:.0%} (G, U, B · a and T above include it); "
                "for W, S and X this is what it adds to the three products (with part of the model in inference, "
                "W and S as the chunks the simulated pool gives the variables and slots).{below}",
                granule=ALLOCATION_GRANULE, frag=FRAGMENTATION, below=below), n.rounding_bytes),
        Term("R", tr("allocator chunks beyond the sum"),
             tr("the estimate also replays this step's allocations through a simulation of the allocator at batch "
                "{batch}, after modelled histories of the pool (the variables' kernels drawn, or made from one value "
                "each), and adds what it finds beyond the sum above (with part of the model in inference, the "
                "larger of the two histories; in full training, only what every history agrees on, so 0 wherever "
                "any stays within the {frag:.0%})", batch=n.batch, frag=FRAGMENTATION), b.allocator_bytes),
    ]


def measured_label(m: Measurement) -> str:
    if m.device is Device.GPU:
        return tr("Measured on an H100 (TensorFlow's allocator peak, one GPU at batch {batch}, jit_compile=False)",
                  batch=m.batch)
    return tr("Measured on a CPU (TensorFlow's allocator peak, batch {batch})", batch=m.batch)


def rule_comparison(n: FormulaNumbers) -> list[dict[str, object]]:
    """Each rule's figure beside the engine (and the measurement where one exists), all of one device's step."""
    ref = n.measured_bytes or n.breakdown.peak_bytes
    rows = [
        (tr("Engine (this tool)"), n.breakdown.peak_bytes),
        (tr("Neural Network Console blog post's rule"), n.nnc_bytes),
        (tr("Stack Exchange answer (cs231n-style)"), n.cs231n_bytes),
    ]
    if n.measured is not None:
        rows.insert(0, (measured_label(n.measured), n.measured.peak_bytes))
    against = tr("vs measured") if n.measured is not None else tr("vs engine")
    return [{tr("rule"): name, tr("bytes"): v, against: (v - ref) / ref} for name, v in rows]


def measured_for(inputs: Inputs) -> Measurement | None:
    """TensorFlow's measured peak of one device's share of this step, on the chosen kernels, when the
    validation set has it: the graph executor (``jit_compile=False``) on an H100 for GPU kernels, on a CPU
    for CPU kernels, at the per-device batch."""
    from calc.validation.data import CPU_DATA, FP16_DATA, GPU_TF_DATA, case_id
    from dashboard.loaders import measured_peaks, spec_for

    if inputs.source != "catalogue":
        return None
    try:
        spec = spec_for(inputs.model, inputs.image_size, inputs.train_mode == "frozen_backbone")
        config = config_of(inputs)
    except ValueError:
        return None
    one_device = replace(config, batch_size=config.per_replica_batch, num_gpus=1)
    wanted = (case_id(spec, one_device), config.device.value)
    for path in (GPU_TF_DATA,) if config.device is Device.GPU else (CPU_DATA, FP16_DATA):
        if (peak := measured_peaks(path).get(wanted)) is not None:
            return Measurement(peak, config.device, one_device.batch_size)
    return None


def _plain_symbol(symbol: str) -> str:
    """A LaTeX symbol as plain text: ``B \\cdot a`` as "B · a", ``A_{XLA}`` as "A_XLA"."""
    return re.sub(r"_\{([^}]*)\}", r"_\1", symbol.replace(r"\cdot", "·")).replace("  ", " ")


def symbols_latex(terms: list[Term]) -> str:
    return r"M_{peak} = " + " + ".join(t.symbol for t in terms)


def _shown(nbytes: int, inputs: Inputs | None) -> str:
    """In the chosen unit; ``inputs`` None: in bytes, every digit (the hand-worked example)."""
    return f"{nbytes:,} B" if inputs is None else fmt(nbytes, inputs, 3)


def term_markdown(term: Term, inputs: Inputs | None) -> str:
    return f"- **{_plain_symbol(term.symbol)}, {term.name}**: {term.how} → **{_shown(term.nbytes, inputs)}**."


def _latex_value(nbytes: int, inputs: Inputs | None) -> str:
    return (_shown(abs(nbytes), inputs).replace(",", "{,}").replace(" GiB", r"\,\mathrm{GiB}")
            .replace(" GB", r"\,\mathrm{GB}").replace(" B", r"\,\mathrm{B}"))


def sum_latex(terms: list[Term], total_bytes: int | None, inputs: Inputs | None, per_line: int = 3) -> str:
    """The sum with the user's numbers, ``per_line`` terms a line so that it fits a projected page;
    ``total_bytes`` None: the terms revealed so far, the rest to come."""
    parts = []
    for i, t in enumerate(terms):
        sign = "-" if t.nbytes < 0 else ("+" if i else "")
        parts.append(f"{sign} {_latex_value(t.nbytes, inputs)}".strip())
    lines = [" ".join(parts[i:i + per_line]) for i in range(0, len(parts), per_line)]
    if total_bytes is None:
        lines.append(r"+ \dots")
    else:
        lines.append(r"= " + _latex_value(total_bytes, inputs))
    body = r" \\ & ".join(lines[:-1]) + (r" \\ &" + lines[-1] if total_bytes is not None else " " + lines[-1])
    return r"\begin{aligned} M_{peak} &= " + body + r"\end{aligned}"


def needed_markdown(n: FormulaNumbers, inputs: Inputs, gpu: GpuPreset) -> str:
    """From the peak to what the card must hold: the framework overhead, the usable memory."""
    return tr("M_peak is the allocator's peak of one GPU's step. `nvidia-smi` shows about **{overhead}** more (the "
              "CUDA context and libraries; plus whatever TensorFlow reserves beyond the peak unless memory growth is "
              "on): **{peak} + {overhead} = {needed}** needed on each GPU, against {usable} usable on {gpu} "
              "({memory} less the {margin}% safety margin).",
              overhead=fmt(gpu.overhead_bytes, inputs, 3), peak=fmt(n.fit.breakdown.peak_bytes, inputs, 3),
              needed=fmt(n.fit.needed_bytes, inputs, 3), usable=fmt(n.fit.usable_bytes, inputs, 3), gpu=gpu.name,
              memory=fmt(gpu.memory_bytes, inputs, 3), margin=inputs.margin)


def per_gpu_note(n: FormulaNumbers, inputs: Inputs) -> str:
    return tr("Data parallel on {gpus} GPUs: each GPU holds the whole model and trains batch {per} of the global "
              "batch {batch}. Every term, peak and measurement on this page is one GPU's; the largest batch is "
              "global.", gpus=inputs.num_gpus, per=n.batch, batch=inputs.batch_size)


def no_measurement_caption(inputs: Inputs) -> str:
    if inputs.device == "gpu":
        return tr("No H100 measurement of exactly this configuration (one GPU's batch, jit_compile=False) in the "
                  "validation set; the rules are compared with the engine.")
    return tr("No CPU measurement of exactly this configuration in the validation set; the rules are compared with "
              "the engine. The Validation page can measure one.")


def largest_markdown(n: FormulaNumbers, inputs: Inputs, gpu_name: str, xla_largest: str = "") -> str:
    """The largest batch of the taught step; ``xla_largest``: XLA's, as the Estimator shows it, where the
    sidebar's step is XLA's (``dashboard.xla_view.xla_largest``)."""
    if inputs.step == "xla":
        return tr("**Largest batch that fits {gpu} by this formula** (the graph executor's step, global, with the "
                  "{margin}% safety margin): **{batch:,}**. XLA's own, for the step Keras compiles by default, as "
                  "the Estimator shows it: **{xla}**.", gpu=gpu_name, margin=inputs.margin, batch=n.engine_max_batch,
                  xla=xla_largest or tr("not known on this server yet"))
    return tr("**Largest batch that fits {gpu}** (global, with the {margin}% safety margin, as on the Estimator): "
              "**{batch:,}**.", gpu=gpu_name, margin=inputs.margin, batch=n.engine_max_batch)


def why_rules_are_off() -> str:
    return tr(
        "- **Every layer output counted as kept.** Add, pooling, padding and Flatten outputs are not read by any "
        "gradient; BatchNormalization + ReLU keep one tensor each, not \"value and gradient\" of every output. "
        "BatchNorm-heavy networks are over-estimated most.\n"
        "- **Gradients of activations are not all alive at once.** The backward pass frees each layer's kept "
        "tensors as it goes.\n"
        "- **Optimizer state ignored (the blog post) or guessed as 1× (the Stack Exchange answer).** Adam keeps two "
        "slots per parameter; for weight-heavy models (VGG with its top) this is the largest part and the rules "
        "*under*-estimate.\n"
        "- **Parameters multiplied as if they grew with the batch** (the max-batch rule from the Stack Overflow "
        "question on choosing a batch size divides all memory by activations + parameters per sample).\n"
        "- **1000 vs 1024.** These sources mix MB = 10⁶ and MB = 1024²; GPU cards are sold in GB but `nvidia-smi` "
        "counts MiB.\n"
        "- **What `nvidia-smi` adds**: the CUDA context and library handles, and TensorFlow's reservation.\n"
        "- **A frozen backbone** keeps almost nothing for the backward pass; the rules still count every activation.")


def _html(markdown: str) -> str:
    """A term's Markdown (code and bold alone) as HTML, escaped."""
    from html import escape

    out = escape(markdown)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def terms_html(terms: list[Term], peak_bytes: int, inputs: Inputs) -> str:
    """The sum's symbols, then each term with its arithmetic and value, and the peak, as a handout shows them."""
    from html import escape

    rows = "".join(f"<tr><td><b>{escape(_plain_symbol(t.symbol))}</b></td><td>{escape(t.name)}</td>"
                   f"<td>{_html(t.how)}</td><td class=n>{escape(fmt(t.nbytes, inputs, 3))}</td></tr>" for t in terms)
    return (f"<p><b>M<sub>peak</sub> = {escape(' + '.join(_plain_symbol(t.symbol) for t in terms))}</b></p>"
            f"<table>{rows}<tr><td><b>M<sub>peak</sub></b></td><td></td><td></td>"
            f"<td class=n><b>{escape(fmt(peak_bytes, inputs, 3))}</b></td></tr></table>")


def handout_page(inputs: Inputs, setup: str, step: str, body: str, *, link: str = "", made: str = "",
                 version: str = "") -> str:
    """A printable page: the title, the setup, which step it teaches (Markdown), where it comes from (``link``
    reproduces it, ``made`` is the date, ``version`` the tool's), then ``body`` (HTML)."""
    from html import escape

    source = " · ".join(escape(x) for x in (made, f"keras-memory-calc {version}" if version else "") if x)
    if link:
        source += (" · " if source else "") + f'<a href="{escape(link, quote=True)}">{escape(link)}</a>'
    return (
        f"<!doctype html><html lang={escape(inputs.lang)}><meta charset=utf-8>"
        f"<title>{escape(tr('The formula, with your numbers'))}</title>"
        "<style>body{font:14px/1.5 sans-serif;max-width:60em;margin:2em auto}td,th{border-top:1px solid #ccc;"
        "padding:.3em .6em;vertical-align:top;text-align:left}.n{text-align:right;white-space:nowrap}"
        "code{font-size:90%}.src{color:#555;font-size:90%;word-break:break-all}</style>"
        f"<h1>{escape(tr('The formula, with your numbers'))}</h1><p>{escape(setup)}</p><p>{_html(step)}</p>"
        + (f"<p class=src>{source}</p>" if source else "") + f"{body}</html>")


def handout_html(n: FormulaNumbers, inputs: Inputs, terms: list[Term], gpu_name: str, *, link: str = "",
                 made: str = "", version: str = "", xla: XlaLesson | None = None, xla_largest: str = "") -> str:
    """A printable page of the same lesson: which step it teaches, the setup, every term with its
    arithmetic, the sum, the rules; ``link`` reproduces it, ``made`` is the date, ``version`` the tool's;
    ``xla``: XLA's plan as a lesson (``dashboard.xla_view.xla_lesson``), a section of its own."""
    from html import escape

    setup = tr("{model} at {size} px, batch {batch} ({per} per GPU on {gpus}), {opt}, {precision}, {gpu}",
               model=inputs.model if inputs.source == "catalogue" else tr("your model"), size=inputs.image_size,
               batch=inputs.batch_size, per=n.batch, gpus=inputs.num_gpus, opt=inputs.optimizer,
               precision=inputs.precision, gpu=gpu_name)
    comparison = rule_comparison(n)
    head = "<tr>" + "".join(f"<th>{escape(str(k))}</th>" for k in (comparison[0] if comparison else {})) + "</tr>"
    rules = head + "".join("<tr>" + "".join(f"<td>{escape(_cell(v, inputs))}</td>" for v in row.values()) + "</tr>"
                           for row in comparison)
    step = tr("This handout teaches the step TensorFlow's graph executor runs (`jit_compile=False`). Keras compiles "
              "the step with XLA on a GPU by default; the dashboard's Estimator and Formula pages show XLA's own plan.")
    if xla is not None:
        step = tr("Sections 1 and 2 teach the step TensorFlow's graph executor runs (`jit_compile=False`); section 3 "
                  "is XLA's own plan of the step Keras compiles on a GPU by default (`jit_compile=True`).")
    xla_section = ""
    if xla is not None:
        heading = tr("3. XLA's plan, with your numbers")
        versus = xla.versus
        versus_head = "<tr>" + "".join(f"<th>{escape(k)}</th>" for k in (versus[0] if versus else {})) + "</tr>"
        versus_rows = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row.values()) + "</tr>"
                              for row in versus)
        xla_section = (
            f"<h2>{escape(heading)}</h2>{terms_html(list(xla.terms), xla.peak_bytes, inputs)}"
            f"<h3>{escape(tr('Why it differs from the walk'))}</h3><table>{versus_head}{versus_rows}</table>"
            f"<p>{_html(xla.why)}</p>")
    body = (f"<h2>{escape(tr('1. What this tool computes'))}</h2>{terms_html(terms, n.breakdown.peak_bytes, inputs)}"
            f"<h2>{escape(tr('2. The rules of thumb people use, for the same configuration'))}</h2><table>{rules}</table>"
            f"<p>{_html(largest_markdown(n, inputs, gpu_name, xla_largest))}</p>{xla_section}")
    return handout_page(inputs, setup, step, body, link=link, made=made, version=version)


def handout_source(inputs: Inputs) -> dict[str, str]:
    """Where a handout comes from: the link that reproduces it (this page's address with the inputs),
    today's date and the tool's version."""
    import datetime
    from urllib.parse import urlencode, urlsplit

    import streamlit as st

    try:
        page = urlsplit(st.context.url or "")
        base = f"{page.scheme}://{page.netloc}{page.path}" if page.netloc else ""
    except Exception:  # noqa: BLE001 - no request (AppTest, a script): the link is relative
        base = ""
    return {"link": f"{base}?{urlencode(inputs.to_query())}", "made": datetime.date.today().isoformat(),
            "version": tool_version()}


@functools.cache
def tool_version() -> str:
    """This project's version: installed, or from pyproject.toml when run from a checkout (read once a process)."""
    from importlib import metadata

    try:
        return metadata.version("keras-memory-calc")
    except metadata.PackageNotFoundError:
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"] if pyproject.is_file() else ""


def _cell(value: object, inputs: Inputs) -> str:
    if isinstance(value, float):
        return f"{value:+.1%}"
    if isinstance(value, int):
        return f"{value:,} B ({fmt(value, inputs, 3)})"
    return str(value)


# A model small enough to work out by hand: the Keras MNIST convnet, shipped in calc/data/models
# and measured on a CPU in the validation set (calc/data/validation_custom_cpu.json).
HAND_MODEL = "calc/data/models/mnist_cnn.keras"
HAND_CASE = "mnist_cnn.keras b128 adam float32"  # its case in the validation set
HAND_CONFIG = dict(batch_size=128, optimizer="adam", precision="float32", device="cpu", source="upload",
                   step="graph", num_gpus=1)


@dataclass(frozen=True)
class HandRow:
    layer: str
    output_shape: str
    values_per_sample: str  # the product, written out
    weights: str  # each weight's elements, added
    params: int
    kept_per_sample: int  # bytes the backward pass keeps of it, per sample


@dataclass(frozen=True)
class HandExample:
    rows: list[HandRow]
    numbers: FormulaNumbers
    terms: list[Term]
    inputs: Inputs


def hand_example(profile: ModelProfile, measured_bytes: int, gpu: GpuPreset) -> HandExample:
    """The small model's layers with their arithmetic, and the lesson's terms for its measured step."""
    inputs = replace(Inputs(), **HAND_CONFIG)
    measured = Measurement(measured_bytes, Device.CPU, inputs.batch_size)
    rows = [HandRow(f"{row.name} ({row.layer_type})", row.output_shape, _product(layer.output_shapes[0]),
                    " + ".join(f"{e:,}" for e in (*layer.trainable_weight_elements,
                                                  *layer.non_trainable_weight_elements)) or "0",
                    row.params, row.kept_bytes_per_sample)
            for layer, row in zip(profile.layers, layer_rows(profile, inputs))]
    fit = fit_of(profile, inputs, gpu)
    numbers = formula_numbers(profile, inputs, gpu, measured, fit, fit.max_batch)
    return HandExample(rows, numbers, terms(numbers, inputs), inputs)


def _product(shape: tuple[int, ...]) -> str:
    from math import prod

    return f"{prod(shape):,}" if len(shape) == 1 else " × ".join(map(str, shape)) + f" = {prod(shape):,}"


def hand_rows(example: HandExample) -> list[dict[str, object]]:
    return [{tr("layer"): r.layer, tr("output"): r.output_shape, tr("values per sample"): r.values_per_sample,
             tr("weights (elements)"): r.weights, tr("parameters"): r.params,
             tr("bytes kept per sample"): r.kept_per_sample} for r in example.rows]


def hand_measured_markdown(example: HandExample) -> str:
    n = example.numbers
    peak, measured = n.breakdown.peak_bytes, n.measured_bytes or 0
    return tr("The engine: **{peak:,} B**; TensorFlow measured **{measured:,} B** on a CPU for this step "
              "(batch {batch}, `adam`, float32: the median of its fresh runs), so the estimate is "
              "{error:+.1%} off.", peak=peak, measured=measured, batch=n.batch,
              error=(peak - measured) / measured)
