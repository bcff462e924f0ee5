"""What every page starts with: the inputs, the profile (cached), or a clear error."""

from __future__ import annotations

import streamlit as st

from calc.catalogue import ModelSpec
from calc.estimate import plan_step
from calc.profiles import needs_build
from calc.types import ModelProfile
from dashboard import views
from dashboard.i18n import tr
from dashboard.loaders import load_profile, spec_for
from dashboard.plain import plain
from dashboard.turns import READS
from dashboard.state import Inputs
from dashboard.widgets import sidebar_inputs


def inputs_and_profile(inputs: Inputs | None = None, *, wait: bool = True) -> tuple[Inputs, ModelProfile | None]:
    """The sidebar's inputs (``inputs`` where the page read them already) and the model's profile. A
    KerasHub model has none: its answer is XLA's plan, on the Estimator (``dashboard.xla_step.hub_view``).

    A catalogue model at a size nobody has built yet is built in the background (``calc.service``):
    with ``wait`` the page says where its build stands and ends there (it reruns when the build is done);
    without, the profile is None and the page goes on with what it knows (``build_spec`` names the build).
    """
    inputs = inputs or sidebar_inputs()
    if inputs.source == "hub":
        st.info(tr("A KerasHub model is answered by XLA's plan on the Estimator page. This page covers Keras "
                   "applications and your own models: choose one under \"Model from\"."))
        st.stop()
    readers = {"upload": _uploaded_profile, "summary": _summary_profile}
    profile = readers[inputs.source]() if inputs.source in readers else _catalogue_profile(inputs, wait)
    if profile is None:
        return inputs, None
    try:
        plan_step(profile, views.config_of(inputs))  # a configuration the model cannot take fails here, once
    except ValueError as exc:
        st.error(plain(exc))
        st.stop()
    return inputs, profile


def build_spec(inputs: Inputs) -> ModelSpec | None:
    """The catalogue model the inputs name, where its ledger at this size is not known yet; else None."""
    if inputs.source != "catalogue":
        return None
    spec = spec_for(inputs.model, inputs.image_size, inputs.train_mode == "frozen_backbone")
    return spec if needs_build(spec) else None


def _catalogue_profile(inputs: Inputs, wait: bool) -> ModelProfile | None:
    try:
        profile = catalogue_profile(inputs.model, inputs)
    except ValueError as exc:
        st.error(plain(exc))
        st.stop()
        raise  # st.stop() ends the script; this line only tells type checkers
    if profile is None and wait:
        from dashboard.xla_step import XlaState, asked, waits
        from calc.service import Want

        spec = build_spec(inputs)
        assert spec is not None
        waits(asked(XlaState(), [Want.build(spec)]), tr(
            "{model} is built at {height}x{width} once (weights=None) for its layer ledger: this page shows it "
            "when that is done.", model=spec.name, height=spec.height, width=spec.width))
    return profile


def catalogue_profile(model: str, inputs: Inputs) -> ModelProfile | None:
    """A catalogue model's profile at the sidebar's size, or None while nobody has built it at this size
    (a page asks for its build: ``build_spec``). Raises ``ValueError`` (one line)."""
    spec = spec_for(model, inputs.image_size, inputs.train_mode == "frozen_backbone")
    return None if needs_build(spec) else load_profile(spec)


def _uploaded_profile() -> ModelProfile:
    """The uploaded file's ledger, read once per file (kept in this session only).

    Once read, the file's bytes leave the server (Streamlit's upload manager would keep them
    until the session ends, also after the visitor switches to another source); a failed
    read is remembered too, so a rerun does not read the same file again.
    """
    from calc.uploads import profile_upload

    upload = st.session_state.get("upload_file")
    if upload is None:
        st.info(tr("Upload a .keras or .h5 file in the sidebar. It is read with Keras safe mode, in a separate "
                   "process, and deleted afterwards; only its layer ledger is kept."))
        st.stop()
    cached = st.session_state.get("_upload_profile")
    if cached is not None and cached[0] == upload.file_id:
        if isinstance(cached[1], str):
            st.error(cached[1])
            st.stop()
        return cached[1]
    if not hasattr(upload, "getvalue"):  # Streamlit no longer holds this file (a DeletedFile)
        st.info(tr("The uploaded file is no longer on the server; upload it again."))
        st.stop()
    waiting = st.empty()
    try:
        with READS.turn(lambda ahead: waiting.info(_uploads_ahead(ahead))):
            waiting.empty()
            with st.spinner(tr("Reading {name} (Keras safe mode)…", name=plain(upload.name))):
                profile = profile_upload(upload.getvalue(), upload.name)
        _keep_for_plans(upload, profile)
    except ValueError as exc:
        message = f"{plain(upload.name)}: {plain(exc)}"
        st.session_state["_upload_profile"] = (upload.file_id, message)
        st.error(message)
        st.stop()
    finally:
        _release_upload(upload.file_id)
    st.session_state["_upload_profile"] = (upload.file_id, profile)
    return profile


UPLOAD_KEPT = "_upload_kept"  # (file id, calc.catalogue.ModelFile or a one-line reason): the file XLA plans


def _keep_for_plans(upload, profile) -> None:
    """Keeps a file that has been read for XLA's plan, which compiles from the file itself, with its ledger (what
    the plan's verdict reads its largest convolution from, ``calc.xla.kept``)."""
    from calc.profiles import store_file_profile
    from calc.uploads import keep_upload

    try:
        kept = keep_upload(upload.getvalue(), upload.name)
    except ValueError as exc:
        st.session_state[UPLOAD_KEPT] = (upload.file_id, plain(exc))
        return
    store_file_profile(kept, profile)
    st.session_state[UPLOAD_KEPT] = (upload.file_id, kept)


def kept_upload():
    """The uploaded file XLA plans (``calc.catalogue.ModelFile``), or a one-line reason there is none."""
    upload, kept = st.session_state.get("upload_file"), st.session_state.get(UPLOAD_KEPT)
    if upload is None or kept is None or kept[0] != upload.file_id:
        return tr("the uploaded file is no longer on the server; upload it again for XLA's plan")
    return kept[1]


def _release_upload(file_id: str) -> None:
    """Drops the file's bytes from Streamlit's upload manager: only the ledger is kept."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is not None:
        ctx.uploaded_file_mgr.remove_file(ctx.session_id, file_id)


def _uploads_ahead(ahead: int) -> str:
    if ahead > 1:
        return tr("{ahead} other uploads on this server will be read first; yours is next after them.", ahead=ahead)
    return tr("{ahead} other upload on this server will be read first; yours is next after them.", ahead=ahead)


def _summary_profile() -> ModelProfile:
    """A ledger read from pasted ``model.summary()`` text: wired from "Connected to", else a chain."""
    from calc.summary_text import parse_shape, read_summary

    text = st.session_state.get("summary_text") or ""
    if not text.strip():
        st.info(tr("Paste the table printed by model.summary() in the sidebar (Keras 2 or 3 layout). A functional "
                   "model's table is read with its wiring (the 'Connected to' column); one without it as a chain."))
        st.stop()
    try:
        reading = read_summary(text, activation=st.session_state.get("summary_activation", "relu"),
                               input_shape=parse_shape(st.session_state.get("summary_input_shape", "")))
    except ValueError as exc:
        st.error(tr("Could not read the summary: {error}", error=plain(exc)))
        st.stop()
    st.caption(views.summary_caption(reading))
    for note in views.summary_warnings(reading):
        st.warning(note)
    return reading.profile
