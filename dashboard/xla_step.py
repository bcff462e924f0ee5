"""The long work on a page: the plans known for the inputs, what to build or compile next, and its progress.

Nothing here waits for a build or a compile. A page reads what is known (``xla_answer_for``), tells
the server's work service what it still wants (``calc.service``: the model's ledger at a new size,
XLA's plans), and draws a fragment that repeats that every second (which keeps the wants alive)
and reruns the page when one of them ends.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field, replace

import pandas as pd
import streamlit as st

from calc import xla
from calc.catalogue import ModelSpec
from calc.gpus import GPU_PRESETS, GpuPreset
from calc.hub import HubSpec, hub_models, lora_applies, make_hub_spec
from calc.xla import XlaPlan
from calc.xla.budget import step_budget
from calc.service import COMPILES_ENV, Kind, Progress, Setup, Want, compiles_enabled, service
from dashboard import charts, figures, lesson, views
from dashboard.hub_compare import compared_hubs, hub_compare_series, hub_compare_tables, hub_inputs, mesh_grid_table
from dashboard.i18n import language, set_language, tr
from dashboard.loaders import spec_for
from dashboard.pagekit import kept_upload
from dashboard.state import HUB_MODELS, MAX_COMPARED, Inputs
from dashboard.widgets import remember
from dashboard.plain import plain
from dashboard.xla_view import (CompareCell, XlaAnswer, hub_line, sequence_line, sequence_view, shown_pending, shown_xla,
                                xla_answer)

SESSION_KEY = "_xla_session"


@dataclass
class XlaState:
    answer: XlaAnswer | None = None  # None where XLA's plan does not apply or cannot be made here
    base_plan: XlaPlan | None = None  # the same step without remat (remat chosen only)
    notes: list[tuple[str, str]] = field(default_factory=list)  # ("info" | "warning" | "caption", one line)
    wants: tuple[Want, ...] = ()  # the model's build, and XLA's plans
    progress: dict[Want, Progress] = field(default_factory=dict)
    setup: Setup | None = None
    versions: tuple[tuple[Setup | ModelSpec, int], ...] = ()  # the service's count of each want's ended tasks
    known: dict[Setup, xla.KnownPlans] = field(default_factory=dict)  # the plans read for this page, by setup

    def known_of(self, setup: Setup) -> xla.KnownPlans:
        """A setup's known plans, read once for this page."""
        if setup not in self.known:
            self.known[setup] = setup.known()
        return self.known[setup]

    def shown(self, view: views.EstimateView, inputs: Inputs) -> views.ShownStep:
        if self.answer is None:
            return views.shown_walk(view, inputs)
        if self.answer.plan is None and any(p.state == "failed" for w, p in self.progress.items()
                                            if w.kind in (Kind.PLAN, Kind.REFINE)):
            return views.shown_walk(view, inputs)  # the plan cannot be made: the walk for good, as its note says
        if self.answer.plan is None:
            return shown_pending(view, inputs, self.answer, compiles_enabled())
        return shown_xla(view, inputs, self.answer, None if self.base_plan is None else self.base_plan.peak_bytes,
                         compiles_enabled())


def session_id() -> str:
    """The visitor's Streamlit session, as the work service knows it: its wants go when the tab closes."""
    return st.session_state.setdefault(SESSION_KEY, _streamlit_session() or uuid.uuid4().hex)


def _streamlit_session() -> str:
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else ""


def _connected(session: str) -> bool:
    """Whether a session's tab is still connected (always, where no Streamlit server runs: a test, a script)."""
    from streamlit.runtime import Runtime

    return not Runtime.exists() or Runtime.instance().is_active_session(session)


service().watch_sessions(_connected)


PROXY_ENV = "CALC_TRUSTED_PROXY"  # the proxy's address(es), comma-separated, whose X-Forwarded-For is believed


def trusted_proxies() -> frozenset[str]:
    """The addresses ``CALC_TRUSTED_PROXY`` names (none by default: no header is believed)."""
    return frozenset(a.strip() for a in os.environ.get(PROXY_ENV, "").split(",") if a.strip())


def client_address() -> str:
    """The visitor's address, for the work service's places per client: Streamlit's peer, or, when that
    peer is the proxy named in ``CALC_TRUSTED_PROXY``, the address the proxy appended to
    ``X-Forwarded-For`` (its last entry: the earlier ones are whatever the visitor sent). From any other
    peer the header is ignored: a local user cannot take fresh addresses past the share of one."""
    try:
        peer = st.context.ip_address or ""
        forwarded = st.context.headers.get("X-Forwarded-For", "") if peer and peer in trusted_proxies() else ""
    except Exception:  # noqa: BLE001 - no request context (AppTest, a script): one shared client
        return ""
    return forwarded.split(",")[-1].strip()[:64] or peer


def setup_of(inputs: Inputs, remat: str | None = None) -> Setup:
    """The configuration the inputs name: a catalogue model, a KerasHub preset, or the uploaded file
    (``not_applicable`` is None)."""
    if inputs.source == "hub":
        return Setup.of(hub_spec_of(inputs), views.config_of(inputs), inputs.gpu, "")
    spec = kept_upload() if inputs.source == "upload" else spec_for(inputs.model, inputs.image_size,
                                                                    inputs.train_mode == "frozen_backbone")
    assert not isinstance(spec, str)
    return Setup.of(spec, views.config_of(inputs), inputs.gpu, views.remat_mode(inputs) if remat is None else remat)


def hub_spec_of(inputs: Inputs) -> HubSpec:
    """The KerasHub setup the inputs name. Raises ``ValueError`` (one line) for one the model cannot take."""
    model = hub_models()[inputs.hub]
    rank = inputs.lora_rank if lora_applies(model, inputs.hub_frozen) else 0  # else the sidebar shows no LoRA
    return make_hub_spec(inputs.hub, inputs.seq_len if model.text else None, rank,
                         None if inputs.hub_dtype == "auto" else inputs.hub_dtype, inputs.hub_classes,
                         "" if inputs.quantize == "none" else inputs.quantize)


def not_applicable(inputs: Inputs) -> str | None:
    """Why XLA's plan is not shown for these inputs (one line; "" for the graph executor's step), or None."""
    if inputs.step != "xla" and inputs.source != "hub":
        return ""
    reason = views.xla_reason(inputs)
    if reason is None and (missing := xla.unavailable_reason()) is not None:
        reason = tr("No XLA plan on this server: {reason}; this shows the graph-executor walk (jit_compile=False).",
                    reason=missing) if inputs.source != "hub" else tr(
            "No XLA plan on this server: {reason}. A KerasHub model is answered by XLA's plan alone.", reason=missing)
    if reason is None and inputs.source == "upload" and isinstance(kept := kept_upload(), str):
        reason = tr("No XLA plan of the file: {reason}. This shows the graph-executor walk (jit_compile=False).",
                    reason=kept)
    return reason


def xla_answer_for(inputs: Inputs, gpu: GpuPreset) -> XlaAnswer | None:
    """XLA's answer for the inputs from the plans known (every page shows this one); None where the
    step is the graph executor's or XLA's plan does not apply."""
    if not_applicable(inputs) is not None:
        return None
    setup = setup_of(inputs)
    return xla_answer(setup.known(), views.config_of(inputs).per_replica_batch, budget_of(setup, gpu, inputs))


def budget_of(setup: Setup, gpu: GpuPreset, inputs: Inputs) -> xla.PlanBudget:
    """What one configuration's plan may take on ``gpu``: the sidebar's margin, or the one its measured record
    asks for (a KerasHub model's is its own)."""
    return step_budget(gpu, inputs.margin / 100, setup.spec, setup.config.precision.value, setup.config)


def curve_wants(setup: Setup, answer: XlaAnswer, start: int) -> list[Want]:
    """What a configuration's curve still asks for: its second plan, and the search for the largest batch
    (from one-device batch ``start`` when no plan is known) until compiled plans settle it."""
    wants = []
    if answer.known.curve.points and answer.known.curve.second_anchor() is not None:
        wants.append(Want.of(setup, Kind.ANCHOR))
    if answer.max_batch is None or not answer.max_batch.settled:
        wants.append(Want.of(setup, Kind.SEARCH, budget_bytes=answer.budget.plan_bytes, start=start,
                             kept_per_sample=answer.budget.kept.per_sample_bytes))
    return wants


def xla_state(inputs: Inputs, view: views.EstimateView, gpu: GpuPreset, build: ModelSpec | None = None) -> XlaState:
    """The plans known for these inputs; what is missing is asked of the work service (compiles on) or named
    (off). ``build``: the model at a size whose ledger nobody has built yet, asked for too."""
    state = XlaState()
    builds = [Want.build(build)] if build is not None else []
    reason = not_applicable(inputs)
    if reason is not None:
        if reason:
            state.notes.append(("info", reason))
        return asked(state, builds)
    setup = state.setup = setup_of(inputs)
    per_device = views.config_of(inputs).per_replica_batch
    state.answer = answer = xla_answer(setup.known(), per_device, budget_of(setup, gpu, inputs))
    wants = []
    if answer.plan is None:
        wants.append(Want.of(setup, Kind.PLAN, batch=per_device))
    elif not answer.plan.compiled:
        wants.append(Want.of(setup, Kind.REFINE, batch=per_device))
    elif answer.plan.explained is None:
        wants.append(Want.of(setup, Kind.EXPLAIN, batch=per_device))
    wants += curve_wants(setup, answer, start=max(1, (view.max_batch or inputs.batch_size) // inputs.num_gpus))
    if isinstance(setup.spec, HubSpec) and setup.spec.model.text and answer.plan is not None:
        wants.append(Want.of(setup, Kind.SEQUENCE, batch=per_device, budget_bytes=answer.budget.plan_bytes))
    if isinstance(setup.spec, HubSpec) and (line := fewest_cards_line(setup.spec, answer, inputs, gpu)) is not None:
        state.notes.append(("caption", line))
    if setup.remat:
        base = setup_of(inputs, remat="")
        state.base_plan = base.known().plans.get(per_device)
        if state.base_plan is None:
            wants.append(Want.of(base, Kind.REFINE, batch=per_device))
    state.known[setup] = answer.known
    wants = [w for w in wants if w.next_task(state.known_of) is not None
             and (w.kind is not Kind.EXPLAIN or compiles_enabled())]  # nothing to say of a missing extra
    if wants and not compiles_enabled():
        state.notes.append(("info", tr("XLA compiles are off on this server ({env}=off): this shows the plans "
                                       "shipped or already compiled, and the graph-executor walk where none is.",
                                       env=COMPILES_ENV) if inputs.source != "hub" else
                            tr("XLA compiles are off on this server ({env}=off): a KerasHub model shows only the "
                               "plans already compiled here.", env=COMPILES_ENV)))
        wants = []
    return asked(state, builds + wants)


def fewest_cards_line(spec: HubSpec, answer: XlaAnswer, inputs: Inputs, gpu: GpuPreset) -> str | None:
    """The fewest cards of this preset that train the setup at its batch, from the plans compiled for a model axis
    of 1, 2, 4 and 8 cards (``calc.xla.search.known_fewest_cards``); None where they do not tell it yet."""
    from calc.xla.search import known_fewest_cards

    config = views.config_of(inputs)
    found = known_fewest_cards(spec, config, inputs.gpu, answer.budget.plan_bytes)
    if found is None or found.model_parallel is None:
        return None
    axis, needed = found.tried[-1]
    return tr("Fewest {card} that train this at batch {batch}: {cards} (a {data}x{axis} mesh, {needed} a card with "
              "the bytes kept free), from XLA's plans compiled for {tried} card(s) sharing the weights.",
              card=gpu.name, batch=inputs.batch_size, cards=config.num_gpus * axis, data=config.num_gpus, axis=axis,
              needed=views.fmt(needed, inputs), tried=", ".join(str(a) for a, _ in found.tried))


def asked(state: XlaState, wants: list[Want]) -> XlaState:
    """``state`` once the work service has been told what this page wants (nothing: it wants nothing any
    more), with where each want stands and a note for each that failed."""
    state.wants = tuple(wants)
    work = service()
    state.progress = work.ask(session_id(), state.wants, client=client_address())
    state.versions = tuple((what, work.version(what)) for what in dict.fromkeys(w.what for w in state.wants))
    for want, progress in state.progress.items():
        if progress.state == "failed":
            state.notes.append(_failure_note(want, progress.message, want.setup != state.setup))
    return state


def _failure_note(want: Want, error: str, base: bool) -> tuple[str, str]:
    if want.kind is Kind.BUILD:
        return "warning", tr("Building the model at this size failed: {error}", error=error)
    if base:
        return "info", tr("No XLA plan without remat ({error}), so remat's saving is not shown.", error=error)
    if want.kind is Kind.SEARCH:
        return "warning", tr("The search for the largest batch over XLA plans stopped: {error}.", error=error)
    if want.kind is Kind.SEQUENCE:
        return "warning", tr("The search for the longest sequence over XLA plans stopped: {error}.", error=error)
    if want.kind is Kind.EXPLAIN:
        return "info", tr("What fills this plan's peak is not known ({error}); the bar shows XLA's temporaries as "
                          "one block.", error=error)
    if want.kind is Kind.REFINE:
        return "info", tr("No XLA plan of this very batch ({error}); the point drawn between compiled plans stands.",
                          error=error)
    return "warning", tr("No XLA plan for this step: {error}. This shows the graph-executor walk (jit_compile=False).",
                         error=error)


def show_xla_notes(state: XlaState) -> None:
    """The one-line notes, and the progress of the builds and compiles the page waits for."""
    for level, text in state.notes:
        {"info": st.info, "warning": st.warning}.get(level, st.caption)(text)
    if state.wants:
        _progress(state.wants, state.setup, state.versions, session_id(), language())


def _what(want: Want, progress: Progress, base: bool) -> str:
    """What a want's task makes, as the progress line names it."""
    if want.kind is Kind.BUILD:
        assert want.spec is not None
        return tr("{model} at {height}x{width}, built once (weights=None) for its layer ledger", model=want.spec.name,
                  height=want.spec.height, width=want.spec.width)
    if base:
        return tr("the plan without remat at batch {batch}, to show remat's saving", batch=progress.batch)
    return {
        Kind.PLAN: tr("XLA's plan at batch {batch}", batch=progress.batch),
        Kind.ANCHOR: tr("a second plan (batch {batch}) to draw the curve's line", batch=progress.batch),
        Kind.SEARCH: tr("the largest batch: compile {step} of about {steps} (batch {batch})", step=progress.step,
                        steps=progress.steps, batch=progress.batch),
        Kind.REFINE: tr("the plan at batch {batch} itself, to replace the drawn point", batch=progress.batch),
        Kind.EXPLAIN: tr("what fills the plan's peak at batch {batch}, by kind and layer", batch=progress.batch),
        Kind.SEQUENCE: tr("the longest sequence: compile {step} ({tokens:,} tokens at batch {batch})",
                          step=progress.step, tokens=progress.tokens, batch=progress.batch),
    }[want.kind]


def progress_text(want: Want, progress: Progress, base: bool = False) -> str | None:
    """One line on where a want stands (``base``: the same step without remat); None when there is nothing to say."""
    if progress.state in ("done", "failed", "off"):
        return None
    if progress.state == "refused":
        reason = tr("this address has {count} configurations waiting; this one waits for one of them",
                    count=progress.count) if progress.held_by == "client" else tr(
            "the server's queue is full ({count} configurations waiting); this one waits for a place",
            count=progress.count)
        return tr("Waiting: {reason}.", reason=reason)
    what = _what(want, progress, base)
    building = want.kind is Kind.BUILD
    if progress.state == "running" and progress.eta_s > 0:
        return (tr("Building {what}: {seconds:.0f} s so far, about {left:.0f} s left.", what=what,
                   seconds=progress.seconds, left=progress.eta_s) if building else
                tr("Compiling {what}: {seconds:.0f} s so far, about {left:.0f} s left.", what=what,
                   seconds=progress.seconds, left=progress.eta_s))
    if progress.state == "running":
        return (tr("Building {what}: {seconds:.0f} s so far, longer than the {usual:.0f} s such a build takes here.",
                   what=what, seconds=progress.seconds, usual=progress.usual_s) if building else
                tr("Compiling {what}: {seconds:.0f} s so far, longer than the {usual:.0f} s such a compile takes "
                   "here.", what=what, seconds=progress.seconds, usual=progress.usual_s))
    if building:
        return tr("Queued: {what}; {ahead} builds ahead, done in about {wait:.0f} s.", what=what,
                  ahead=progress.ahead, wait=progress.eta_s)
    return tr("Queued: {what}; {ahead} compiles ahead, done in about {wait:.0f} s.", what=what,
              ahead=progress.ahead, wait=progress.eta_s)


@st.fragment(run_every=1.0)
def _progress(wants: tuple[Want, ...], setup: Setup | None, versions: tuple[tuple[Setup | ModelSpec, int], ...],
              session: str, lang: str = "en") -> None:
    set_language(lang)  # a fragment's rerun runs without app.py, maybe in a fresh thread
    work = service()
    progress = work.ask(session, wants)  # keeps the wants alive while the visitor is here
    if any(work.version(what) != v for what, v in versions) or any(p.state == "done" for p in progress.values()):
        st.rerun()  # the whole page, which now finds the new ledger or plan
    shown = set()
    for want in wants:  # two wants may wait for one compile (a search's first step is the curve's second plan)
        task = (want.what, progress[want].batch)
        base = want.kind is not Kind.BUILD and want.setup != setup
        if task not in shown and (text := progress_text(want, progress[want], base)) is not None:
            shown.add(task)
            st.caption(text)


def waits(state: XlaState, text: str) -> None:
    """Until a page has a first number to show (a KerasHub model's first plan; a model at a new size, its
    ledger or its plan), why, and where its build or compile stands; the page ends here."""
    if state.wants:
        st.info(text)
    show_xla_notes(state)
    st.stop()


def hub_view(inputs: Inputs, gpu: GpuPreset) -> views.EstimateView:
    """A KerasHub model's setup line and the card's view (``views.card_view``); one line and the end
    of the page for a setup the model cannot take."""
    try:
        spec = hub_spec_of(inputs)
    except ValueError as exc:
        st.error(plain(exc))
        st.stop()
    st.caption(hub_line(spec, inputs))
    return views.card_view(inputs, gpu)


def hub_sequence(state: XlaState, inputs: Inputs) -> None:
    """A KerasHub text model's longest sequence at the page's batch: one line and the plans the search
    compiled, against the card (the search runs in the background, after the largest batch's)."""
    if state.answer is None or state.setup is None or not isinstance(state.setup.spec, HubSpec):
        return
    spec = state.setup.spec
    if not spec.model.text:
        return
    setup = state.setup
    view = sequence_view(spec, views.config_of(inputs).per_replica_batch, state.answer,
                         lambda at: state.known_of(replace(setup, spec=at)), setup.config)
    st.subheader(tr("Sequence length"))
    st.caption(sequence_line(view))
    if view.points:
        charts.plotly_chart(st, figures.sequence_figure(view, views.unit_divisor(inputs), inputs.unit),
                            key="sequence_chart")


def teach_hub(inputs: Inputs, gpu: GpuPreset) -> None:
    """The Formula page for a KerasHub model: XLA's plan of its step as a lesson (``dashboard.hub_lesson``),
    in presentation mode too; or why there is none yet. The page ends here."""
    from dashboard import presentation
    from dashboard.hub_lesson import hub_handout_html, hub_lesson

    try:
        spec = hub_spec_of(inputs)
    except ValueError as exc:
        st.error(plain(exc))
        st.stop()
    taught = hub_lesson(xla_answer_for(inputs, gpu), spec, views.config_of(inputs), inputs)
    if inputs.present and taught is not None:
        st.html(presentation.CSS)
    st.title(tr("The formula, with your numbers"))
    top = st.columns([1, 1, 2])
    top[0].toggle(tr("Presentation mode"), key="present", help=tr("Large type, no sidebar, one term at a time"))
    step = tr("The step Keras runs on the JAX backend (jit_compile=True), planned by XLA for {gpu}: its parts add up "
              "to the plan's peak to the byte, and where the parameter counts give a part, its arithmetic is shown "
              "with your numbers.", gpu=gpu.name)
    if taught is not None:
        top[1].download_button(tr("Handout (HTML, printable)"), hub_handout_html(
            taught, inputs, hub_line(spec, inputs), step, **lesson.handout_source(inputs)), "memory-formula.html",
            "text/html", key="dl_handout")
    if taught is None:
        st.info(tr("XLA's plan of this KerasHub step at this batch is not known on this server yet: the Estimator "
                   "compiles it, and this page teaches it once it is known."))
        st.stop()
    assert taught is not None
    header = tr("XLA's plan, with your numbers")
    if inputs.present:
        presentation.present(list(taught.terms), taught.peak_bytes, header, [taught.why], inputs)
        st.stop()
    st.caption(hub_line(spec, inputs))
    st.header(header)
    st.caption(step)
    st.latex(lesson.symbols_latex(list(taught.terms)))
    for term in taught.terms:
        st.markdown(lesson.term_markdown(term, inputs))
    st.latex(lesson.sum_latex(list(taught.terms), taught.peak_bytes, inputs))
    st.markdown(taught.why)
    st.stop()


def hub_waits(state: XlaState) -> None:
    """Until a KerasHub model's first plan is known, there is no number to show (no walk stands in)."""
    waits(state, tr("XLA compiles this step's plan for the card: the numbers appear here when it is done."))


def model_waits(state: XlaState, inputs: Inputs) -> None:
    """Until a model at a size nobody has built yet has its ledger or XLA's plan, there is no number to show."""
    if state.answer is not None:
        text = tr("{model} at {size}x{size} is new to this server: its layer ledger is built and XLA compiles its "
                  "plan for the card in the background, and the numbers appear here as each is done.",
                  model=inputs.model, size=inputs.image_size)
    else:
        text = tr("{model} at {size}x{size} is new to this server: its layer ledger is built in the background, and "
                  "the numbers appear here when it is done.", model=inputs.model, size=inputs.image_size)
    waits(state, text)


def compare_hubs(inputs: Inputs) -> None:
    """The Compare page for KerasHub models (``dashboard.hub_compare``): presets x cards, the largest batch
    and the plan's peak at the batch, each from XLA's plans as on the Estimator; what is not known yet
    compiles in the background, every cell's first plan first. The page ends here."""
    presets = st.multiselect(tr("KerasHub models"), HUB_MODELS, default=compared_hubs(inputs),
                             max_selections=MAX_COMPARED, key="compare_hubs")
    gpu_keys = st.multiselect(tr("GPUs"), list(GPU_PRESETS), default=views.compared_gpus(inputs),
                              format_func=lambda k: GPU_PRESETS[k].name, key="compare_gpus")
    remember("hubs", ",".join(presets))
    remember("gpus", ",".join(gpu_keys))
    if not presets or not gpu_keys:
        st.info(tr("Pick at least one KerasHub model and one GPU."))
        st.stop()
    st.caption(tr("Same training setup as the sidebar: batch {batch}, {optimizer}, LoRA rank {rank} where the model "
                  "has attention, dtype policy {dtype}, safety margin {margin}%; a text model at {tokens:,} tokens, "
                  "or its longest where it has fewer learned positions. Every number is XLA's plan of the step Keras "
                  "runs on the JAX backend, compiled for the card here, as on the Estimator: a largest batch alone "
                  "is settled by compiled plans; \"≥ N\" is what the plans known so far tell; \"≈\" is a peak drawn "
                  "between compiled plans. The longest sequence is on the Estimator.", batch=inputs.batch_size,
                  optimizer=inputs.optimizer, rank=inputs.lora_rank, margin=inputs.margin,
                  dtype=tr("each model's own") if inputs.hub_dtype == "auto" else inputs.hub_dtype,
                  tokens=inputs.seq_len))
    if mesh := views.per_gpu_caption(inputs):
        st.caption(mesh)
    if (missing := xla.unavailable_reason()) is not None:
        st.info(tr("No XLA plan on this server: {reason}. A KerasHub model is answered by XLA's plan alone.",
                   reason=missing))
        st.stop()
    gpus = [GPU_PRESETS[k] for k in gpu_keys]
    specs: dict[str, HubSpec | None] = {}
    errors: dict[tuple[str, str], str] = {}
    setups: dict[tuple[str, str], Setup] = {}
    for preset in presets:
        there = hub_inputs(inputs, preset)
        try:
            specs[preset] = spec = hub_spec_of(there)
        except ValueError as exc:
            specs[preset] = None
            errors.update({(preset, g.key): plain(exc) for g in gpus})
            continue
        setups.update({(preset, g.key): Setup.of(spec, views.config_of(there), g.key) for g in gpus})
    grid, grid_wants = mesh_grid(specs, gpus, inputs)
    cells, wants, progress = compare_cells(setups, errors, inputs, extra=grid_wants)
    grid = {key: compare_cell(answer, [w for w in grid_wants if w.setup == setup], progress)
            for key, (setup, answer) in grid.items()}
    if any(cell.state == "off" for cell in cells.values()):
        st.info(tr("XLA compiles are off on this server ({env}=off): a KerasHub model shows only the plans already "
                   "compiled here.", env=COMPILES_ENV))
    largest, peaks = hub_compare_tables(presets, specs, gpus, cells, inputs)
    st.subheader(tr("Largest batch that fits"))
    st.dataframe(pd.DataFrame(largest), hide_index=True)
    st.subheader(peaks_heading(inputs))
    st.dataframe(pd.DataFrame(peaks), hide_index=True)
    show_compare_progress(cells, wants)
    st.download_button(tr("Table as CSV"), pd.DataFrame(largest).to_csv(index=False), "compare.csv", "text/csv",
                       key="dl_compare_csv")
    show_mesh_grid(presets, gpus, grid, inputs)
    series = hub_compare_series(cells, gpus, inputs)
    if series:
        charts.plotly_chart(st, figures.curves_figure(series, {g.name: g.memory_bytes - g.overhead_bytes for g in gpus},
                                                      views.unit_divisor(inputs), inputs.unit, markers=True),
                            key="compare_chart")
        st.caption(tr("Each line joins the plans compiled for that model and card, at one device's batch."))
    st.stop()


def mesh_grid(specs: dict[str, HubSpec | None], gpus: list[GpuPreset],
              inputs: Inputs) -> tuple[dict[tuple[str, str, int], tuple[Setup, XlaAnswer]], list[Want]]:
    """The Compare page's cards x count: each preset on each card on a model axis of 1, 2, 4, then 8 cards (the
    sidebar's data replicas kept), doubled as ``fewest-cards`` doubles it: until one card fits, or a mesh has no
    plan yet (that plan is wanted; the larger ones wait for it). (preset, GPU key, axis) -> setup and answer."""
    from calc.xla.search import MODEL_AXES, on_model_axis

    grid: dict[tuple[str, str, int], tuple[Setup, XlaAnswer]] = {}
    wants: list[Want] = []
    for preset, spec in specs.items():
        if spec is None:
            continue
        config = views.config_of(hub_inputs(inputs, preset))
        for gpu in gpus:
            for axis in MODEL_AXES:
                try:
                    setup = Setup.of(spec, on_model_axis(config, axis), gpu.key)
                except ValueError:  # more hosts than a mesh may have
                    break
                answer = xla_answer(setup.known(), config.per_replica_batch, budget_of(setup, gpu, inputs))
                grid[preset, gpu.key, axis] = setup, answer
                if answer.plan is None:
                    wants.append(Want.of(setup, Kind.PLAN, batch=config.per_replica_batch))
                    break
                if answer.budget.fits(answer.plan.peak_bytes, config.per_replica_batch):
                    break
    return grid, wants


def compare_cell(answer: XlaAnswer, mine: list[Want], progress: dict[Want, Progress]) -> CompareCell:
    """A Compare cell (a model on a card, or a mesh of the cards x count grid) with where the compiles it wants
    (``mine``) stand: "failed" with the first failure's line, else "waiting", or "off" where compiles are off."""
    failed = [progress[w].message for w in mine if w in progress and progress[w].state == "failed"]
    state = "failed" if failed else "waiting" if mine and compiles_enabled() else "off" if mine else ""
    return CompareCell(answer, state, failed[0] if failed else "")


def show_mesh_grid(presets: list[str], gpus: list[GpuPreset], grid: dict[tuple[str, str, int], CompareCell],
                   inputs: Inputs) -> None:
    """The cards x count table, what it reckons, and why a mesh was refused."""
    from calc.xla.search import MODEL_AXES

    if not grid:
        return
    st.subheader(tr("Cards sharing the weights"))
    st.caption(tr("One card's need on a mesh of {data} replica(s) of the batch, each over 1, 2, 4 or 8 cards that "
                  "share the weights by the preset's layout map (keras.distribution.ModelParallel): XLA's plan of one "
                  "card at batch {batch} on each replica, with the bytes kept free beside it, against the card's "
                  "budget, as the Estimator's verdict reckons it. The cards are doubled until one fits, as `python -m "
                  "calc fewest-cards` does; a larger mesh is not planned (—).", data=inputs.num_gpus,
                  batch=views.config_of(inputs).per_replica_batch))
    st.dataframe(pd.DataFrame(mesh_grid_table(presets, gpus, grid, MODEL_AXES, inputs)), hide_index=True)
    for (preset, key, axis), cell in grid.items():
        if cell.error:
            st.warning(f"{preset} · {GPU_PRESETS[key].name} · {inputs.num_gpus}x{axis}: {plain(cell.error)}")


def peaks_heading(inputs: Inputs) -> str:
    """The Compare page's peaks table, as every page names a peak: without the framework overhead."""
    return tr("XLA's planned peak at batch {batch} ({unit}, framework overhead not included, as on the Estimator)",
              batch=inputs.batch_size, unit=inputs.unit)


def compare_setups(models: list[str], gpu_keys: list[str], inputs: Inputs) -> dict[tuple[str, str], Setup]:
    """The Compare page's catalogue models on each card, at the sidebar's size and setup (whatever model the
    sidebar comes from)."""
    return {(name, key): setup_of(replace(inputs, source="catalogue", model=name, gpu=key))
            for name in models for key in gpu_keys}


def compare_cells(setups: dict[tuple[str, str], Setup], errors: dict[tuple[str, str], str], inputs: Inputs,
                  builds: tuple[ModelSpec, ...] = (), extra: list[Want] | None = None
                  ) -> tuple[dict[tuple[str, str], CompareCell], tuple[Want, ...], dict[Want, Progress]]:
    """The Compare page's cells, (model, GPU key) -> XLA's answer from the known plans and where its compiles
    stand, and what the page wants in the background: the ledgers of ``builds`` (models at a size nobody has
    built yet), each cell's plan at the batch, the curve's second plan and the largest batch's search (every
    first number goes before any search), then ``extra`` (the page's other plans). ``errors``: the cells whose setup
    the model cannot take, with why. Also returns where each want stands."""
    compiling = compiles_enabled()
    batch = views.config_of(inputs).per_replica_batch
    answers, plans = {}, []
    for key, setup in setups.items():
        answer = answers[key] = xla_answer(setup.known(), batch, budget_of(setup, GPU_PRESETS[key[1]], inputs))
        if answer.plan is None:
            plans.append(Want.of(setup, Kind.PLAN, batch=batch))
        plans += curve_wants(setup, answer, start=batch)
    known = {setup: answers[key].known for key, setup in setups.items()}  # read once, above
    plans = [w for w in plans if w.next_task(known.__getitem__) is not None]
    wants = [Want.build(spec) for spec in builds] + (plans + (extra or []) if compiling else [])
    progress = service().ask(session_id(), wants, client=client_address())
    cells = {key: CompareCell(None, "", error) for key, error in errors.items()}
    for key, setup in setups.items():
        cells[key] = compare_cell(answers[key], [w for w in plans if w.setup == setup], progress)
    for want in wants:
        if want.kind is Kind.BUILD and progress[want].state == "failed":
            assert want.spec is not None
            st.warning(f"{want.spec.name}: {plain(progress[want].message)}")
    return cells, tuple(wants), progress


def show_compare_progress(cells: dict[tuple[str, str], CompareCell], wants: tuple[Want, ...]) -> None:
    """A line for each cell whose compile failed, and the progress of the builds and compiles still wanted."""
    for (name, key), cell in cells.items():
        if cell.error:
            st.warning(f"{name} · {GPU_PRESETS[key].name}: {plain(cell.error)}")
    if wants:
        work = service()
        _compare_progress(wants, tuple((what, work.version(what)) for what in dict.fromkeys(w.what for w in wants)),
                          session_id(), language())


@st.fragment(run_every=1.0)
def _compare_progress(wants: tuple[Want, ...], versions: tuple[tuple[Setup | ModelSpec, int], ...], session: str,
                      lang: str = "en") -> None:
    """The Compare page's builds and compiles: how many cells still wait, and the one running now."""
    set_language(lang)
    work = service()
    progress = work.ask(session, wants)
    if any(work.version(what) != v for what, v in versions) or any(p.state == "done" for p in progress.values()):
        st.rerun()
    for want in wants:
        if want.kind is Kind.BUILD and (text := progress_text(want, progress[want])) is not None:
            st.caption(text)
    waiting = len({w.setup for w in wants if w.kind is not Kind.BUILD and progress[w].state not in ("done", "failed")})
    if waiting:
        st.caption(tr("{count} model and card pairs wait for XLA's plans; they compile in the background, first "
                      "plans first.", count=waiting))
    compiles = [w for w in wants if w.kind is not Kind.BUILD and progress[w].state in ("running", "queued")]
    for want in sorted(compiles, key=lambda w: (progress[w].state != "running", progress[w].ahead))[:1]:
        if (text := progress_text(want, progress[want])) is not None:  # the one running now, else the next
            assert want.setup is not None
            spec = want.setup.spec
            name = spec.preset if isinstance(spec, HubSpec) else getattr(spec, "name", tr("your model"))
            st.caption(f"{name} · {GPU_PRESETS[want.setup.gpu_key].name}: {text}")
