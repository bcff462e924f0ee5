"""The Estimator's XLA step: which plans are known, which compiles to queue, and their progress.

Nothing here waits for a compile. A page reads what is known (shipped, on disk, a finished
job), queues what is missing (``dashboard.xla_jobs``), and draws a fragment that reports
the queue every second and reruns the page when a compile it waits for ends.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Hashable

import streamlit as st

from calc import xla
from calc.gpus import GPU_PRESETS, GpuPreset
from calc.estimate import GpuFit
from calc.xla import XlaMaxBatch, XlaPlan
from dashboard import views, xla_jobs
from dashboard.i18n import language, set_language, tr
from dashboard.loaders import spec_for
from dashboard.state import Inputs
from dashboard.xla_jobs import JOBS, Job

SESSION_KEY = "_xla_session"
MAX_BATCH_WANTED = "_xla_max_batch_wanted"  # the largest-batch searches this session asked for


@dataclass(frozen=True)
class Want:
    """A compile the page waits for: its job key, and how to queue it for a session."""

    key: Hashable
    label: str
    submit: Callable[[str], Job | str]
    kind: str = "plan"  # "plan": this step's; "base": the same without remat; "search": the largest batch


@dataclass
class XlaState:
    plan: XlaPlan | None = None  # this step's plan, with the chosen remat
    base_plan: XlaPlan | None = None  # the same without remat (remat chosen only)
    max_batch: XlaMaxBatch | None = None
    plan_peaks: dict[int, int] = field(default_factory=dict)  # one-device batch -> plan peak, all known
    notes: list[tuple[str, str]] = field(default_factory=list)  # ("info" | "warning" | "caption", one line)
    waiting: tuple[Want, ...] = ()
    max_batch_want: Want | None = None  # the button's search, when it can be asked for

    def shown(self, view: views.EstimateView, inputs: Inputs) -> views.ShownStep:
        if self.plan is None:
            return views.shown_walk(view)
        return views.shown_plan(view, inputs, self.plan, plan_peaks=self.plan_peaks,
                                max_batch=None if self.max_batch is None else self.max_batch.max_batch,
                                base_peak_bytes=None if self.base_plan is None else self.base_plan.peak_bytes)


def session_id() -> str:
    return st.session_state.setdefault(SESSION_KEY, uuid.uuid4().hex)


def xla_state(inputs: Inputs, view: views.EstimateView) -> XlaState:
    """The plans known for these inputs; the missing ones are queued (compiles on) or named (off)."""
    state = XlaState()
    if inputs.step != "xla":
        return state
    reason = views.xla_reason(inputs)
    if reason is None and (missing := xla.unavailable_reason()) is not None:
        reason = tr("No XLA plan on this server: {reason}; this shows the graph-executor walk (jit_compile=False).",
                    reason=missing)
    if reason is not None:
        state.notes.append(("info", reason))
        return state
    session = session_id()
    spec = spec_for(inputs.model, inputs.image_size, inputs.train_mode == "frozen_backbone")
    config, remat, gpu_key = views.config_of(inputs), views.remat_mode(inputs), inputs.gpu
    what = dict(model=spec.name, height=spec.height, width=spec.width, batch=config.per_replica_batch,
                gpu=GPU_PRESETS[gpu_key].name)
    wants: list[Want] = []

    def plan_want(mode: str) -> Want:
        if mode:
            label = tr("{model} {height}x{width}, batch {batch} for {gpu}, remat {mode}", mode=mode, **what)
        elif remat:
            label = tr("{model} {height}x{width}, batch {batch} for {gpu}, without remat", **what)
        else:
            label = tr("{model} {height}x{width}, batch {batch} for {gpu}", **what)
        return Want(xla_jobs.plan_key(spec, config, gpu_key, mode), label,
                    lambda s: xla_jobs.request_plan(spec, config, gpu_key, mode, label, s),
                    "plan" if mode == remat else "base")

    state.plan = xla_jobs.known_plan(spec, config, gpu_key, remat)
    if state.plan is None:
        wants.append(plan_want(remat))
    if remat:
        state.base_plan = xla_jobs.known_plan(spec, config, gpu_key, "")
        if state.base_plan is None:
            wants.append(plan_want(""))

    budget = views.plan_budget_bytes(view)
    search_key = _search_key(inputs, budget)
    if remat:
        search_label = tr("the largest batch of {model} {height}x{width} for {gpu}, remat {mode} (a search over several "
                          "compiles)", model=spec.name, height=spec.height, width=spec.width,
                          gpu=GPU_PRESETS[gpu_key].name, mode=remat)
    else:
        search_label = tr("the largest batch of {model} {height}x{width} for {gpu} (a search over several compiles)",
                          model=spec.name, height=spec.height, width=spec.width, gpu=GPU_PRESETS[gpu_key].name)
    search = Want(search_key, search_label, lambda s: xla_jobs.request_max_batch(
        spec, config, gpu_key, remat, budget, max(1, view.max_batch // inputs.num_gpus), search_label, s), "search")
    state.max_batch = finished_search(search_key)
    if state.max_batch is None:
        if search_key in st.session_state.get(MAX_BATCH_WANTED, set()):
            wants.append(search)
        elif xla_jobs.compiles_enabled():
            state.max_batch_want = search

    JOBS.release(session, {w.key for w in wants})
    waiting, off = [], []
    for want in wants:
        job = want.submit(session)  # the existing job when there is one
        if isinstance(job, Job) and job.done and job.error:
            state.notes.append(_failure_note(want, job.error))
        elif isinstance(job, str) and not xla_jobs.compiles_enabled():
            off.append(want.label)
        else:
            waiting.append(want)  # queued, running, or refused for now (the session's cap): the fragment retries
    if off:
        if state.plan is None:
            note = tr("XLA compiles are off on this server ({env}=off), and no shipped or cached plan is known for "
                      "{what}; this shows the graph-executor walk.", env=xla_jobs.COMPILES_ENV, what="; ".join(off))
        else:
            note = tr("XLA compiles are off on this server ({env}=off), and no shipped or cached plan is known for "
                      "{what}.", env=xla_jobs.COMPILES_ENV, what="; ".join(off))
        state.notes.append(("info", note))
    state.waiting = tuple(waiting)

    known = xla_jobs.known_plan_peaks(spec, config, gpu_key, remat,
                                      [b // inputs.num_gpus for b in view.curve_batches])
    if state.max_batch is not None:
        known.update(state.max_batch.compiled)
    if state.plan is not None:
        known[config.per_replica_batch] = state.plan.peak_bytes
    state.plan_peaks = known
    return state


def _search_key(inputs: Inputs, budget_bytes: int) -> Hashable:
    spec = spec_for(inputs.model, inputs.image_size, inputs.train_mode == "frozen_backbone")
    return xla_jobs.max_batch_key(spec, views.config_of(inputs), inputs.gpu, views.remat_mode(inputs), budget_bytes)


def finished_search(key: Hashable) -> XlaMaxBatch | None:
    """The answer of the largest-batch search ``key`` names, once it has finished."""
    job = JOBS.get(key)
    return job.result if job is not None and isinstance(job.result, XlaMaxBatch) else None


def largest_batch(inputs: Inputs, fit: GpuFit, gpu: GpuPreset) -> int:
    """The global largest batch the Estimator shows for these inputs, without queueing anything: XLA's,
    where this step's plan is known and a search over plans has finished, else the walk's (``fit``,
    ``views.fit_of``)."""
    if inputs.step != "xla" or views.xla_reason(inputs) is not None or xla.unavailable_reason() is not None:
        return fit.max_batch
    spec = spec_for(inputs.model, inputs.image_size, inputs.train_mode == "frozen_backbone")
    if xla_jobs.known_plan(spec, views.config_of(inputs), inputs.gpu, views.remat_mode(inputs)) is None:
        return fit.max_batch
    found = finished_search(_search_key(inputs, fit.usable_bytes - gpu.overhead_bytes))
    return fit.max_batch if found is None else found.max_batch * inputs.num_gpus


def _failure_note(want: Want, error: str) -> tuple[str, str]:
    if want.kind == "search":
        return "warning", tr("The search for the largest batch over XLA plans failed: {error}.", error=error)
    if want.kind == "base":
        return "info", tr("No XLA plan without remat ({error}), so remat's saving is not shown.", error=error)
    return "warning", tr("No XLA plan for this step: {error}. This shows the graph-executor walk (jit_compile=False).",
                         error=error)


def _want_max_batch(key: Hashable) -> None:
    st.session_state.setdefault(MAX_BATCH_WANTED, set()).add(key)


def show_xla_notes(state: XlaState) -> None:
    """The one-line notes, the progress of the compiles waited for, and the largest-batch button."""
    for level, text in state.notes:
        {"info": st.info, "warning": st.warning}.get(level, st.caption)(text)
    if state.waiting:
        _progress(state.waiting, session_id(), language())
    if state.max_batch_want is not None:
        st.button(tr("Find the largest batch with compiles"), key="xla_max_batch", on_click=_want_max_batch,
                  args=(state.max_batch_want.key,),
                  help=tr("Searches XLA plans from the walk's answer (a few compiles of 15-120 s each, in the "
                          "background); until then the largest batch shown is the graph-executor walk's."))


def progress_text(job: Job, ahead: int, label: str | None = None) -> str:
    """The job's progress; ``label``: what this session calls it (a job is shared, its own label
    is in the language of the session that queued it)."""
    what = job.label if label is None else label
    if job.running:
        return tr("Compiling with XLA: {what}; {seconds:.0f} s so far (a compile takes 15-120 s here). "
                  "The page updates when it is done.", what=what, seconds=job.elapsed_s())
    if ahead == 1:
        return tr("Queued for XLA: {what}; {ahead} compile ahead of it.", what=what, ahead=ahead)
    return tr("Queued for XLA: {what}; {ahead} compiles ahead of it.", what=what, ahead=ahead)


@st.fragment(run_every=1.0)
def _progress(wants: tuple[Want, ...], session: str, lang: str = "en") -> None:
    set_language(lang)  # a fragment's rerun runs without app.py, maybe in a fresh thread
    finished = False
    for want in wants:
        job = want.submit(session)  # the job, or one refused at the session's cap queued now if it can be
        if isinstance(job, str):
            st.caption(tr("{what}: {reason}.", what=want.label, reason=job))
        elif job.done:
            finished = True
        else:
            st.info(progress_text(job, JOBS.place(job), want.label))
    if finished:
        st.rerun()  # the whole page, which now finds the answer
