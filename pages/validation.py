import pandas as pd
import streamlit as st

from dashboard import charts, figures, views
from dashboard.i18n import tr
from dashboard.loaders import (accuracy_line, hub_measurements, hub_predictions, load_gpu_slices, load_own_models, load_plan_report,
                               load_validation, noise_line, slice_line, xla_line)
from dashboard.measure_now import measure_now_allowed, run_measurement
from dashboard.pagekit import inputs_and_profile
from dashboard.plain import plain
from dashboard.routes import ensure_routed
from dashboard.widgets import gpu_of, sidebar_inputs
from dashboard.xla_step import xla_answer_for


def case_table(cases: list[dict], columns: list[str] | None = None) -> pd.DataFrame:
    """The cases of a report as a table, its columns named in the interface's language."""
    table = pd.DataFrame(cases)
    names = {"case": tr("case"), "measured_bytes": tr("measured_bytes"), "predicted_bytes": tr("predicted_bytes"),
             "relative_error": tr("relative_error"), "measured_spread": tr("measured_spread"),
             "runs_bytes": tr("runs_bytes"), "caveats": tr("caveats")}
    return (table[columns] if columns else table).rename(columns=names)


ensure_routed()
charts.preload()
st.title(tr("How accurate is it? Predicted versus measured"))
inputs = sidebar_inputs()
hub = inputs.source == "hub"  # a KerasHub model: XLA's plan alone, measured on an H200
profile = None if hub else inputs_and_profile(inputs)[1]
# First what a newcomer asks: how good is the number the Estimator shows, for the step chosen.
answer = None if hub else xla_answer_for(inputs, gpu_of(inputs))
step = "xla" if hub or answer is not None and answer.plan is not None else "graph"
st.subheader(tr("How good is the number you are shown?"))
st.info(xla_line(step, hub=hub) if step == "xla" or inputs.device == "gpu" else accuracy_line())
st.caption(tr("Which step each table describes: the CPU set and your own models measure TensorFlow's graph executor "
              "(`jit_compile=False`) against the graph-executor walk; on the H100, the graph-executor slice does the "
              "same, and the XLA slice (`jit_compile=True`) is scored against the walk and, where its report exists, "
              "against XLA's own plan (`calc.xla`)."))
if hub:
    st.subheader(tr("KerasHub steps: predicted, then measured on an H200"))
    st.caption(tr("XLA's plans of these steps on an H200, committed before the GPU measured them "
                  "(tools/measure_gpu_hub.py), each then run as a user runs it, with random weights: JAX's peak of "
                  "the process, with XLA's autotuner on (as a user runs) and off."))
    on, off = hub_measurements()
    st.dataframe(pd.DataFrame({tr("case"): list(predicted := hub_predictions()),
                               tr("predicted_bytes"): list(predicted.values()),
                               tr("measured, autotuner on"): [on.get(c) for c in predicted],
                               tr("measured, autotuner off"): [off.get(c) for c in predicted]}), hide_index=True,
                 column_config={k: st.column_config.NumberColumn(format="localized") for k in (
                     tr("predicted_bytes"), tr("measured, autotuner on"), tr("measured, autotuner off"))})
st.caption(accuracy_line())
st.caption(noise_line())
try:
    report = load_validation()
except (OSError, ValueError) as exc:
    st.error(tr("The validation report could not be read: {error}", error=exc))
    st.stop()
cases = report["cases"]
measured_now = st.session_state.setdefault("measured_now", [])  # this session's (measured, predicted, label)
chart_slot = st.empty()


def show_validation_chart(key: str) -> None:
    """The cases and this session's measurements, in the chart at the top of the page."""
    charts.plotly_chart(chart_slot, figures.validation_figure(
        [c["measured_bytes"] for c in cases], [c["predicted_bytes"] for c in cases], [c["case"] for c in cases],
        views.unit_divisor(inputs), inputs.unit, extra=measured_now), key=key)


show_validation_chart("validation_chart")
percent = st.column_config.NumberColumn(format="percent")
counted = st.column_config.NumberColumn(format="localized")  # bytes with the reader's digit grouping
error_column = {tr("relative_error"): percent, tr("measured_bytes"): counted, tr("predicted_bytes"): counted}
st.dataframe(case_table(cases), hide_index=True, column_config=error_column)

st.subheader(tr("Where runs of one step differ most"))
st.caption(tr("The cases grouped by what calc.estimate.spread_caveats finds in them (the Estimator warns for each "
              "kind); errors are against each case's median run, and the margin is the share of memory to keep "
              "free so that every measured run of the group would have fit."))
caveat_table = pd.DataFrame(views.caveat_rows(report)).rename(columns={
    "steps with": tr("steps with"), "cases": tr("cases"), "lowest error": tr("lowest error"),
    "highest error": tr("highest error"), "margin that covered every run": tr("margin that covered every run")})
st.dataframe(caveat_table, hide_index=True,  # its errors and margin: the shares, whatever their columns are called
             column_config={c: percent for c in caveat_table.columns if caveat_table[c].dtype.kind == "f"})

SLICE_COLUMNS = ["case", "measured_bytes", "predicted_bytes", "relative_error"]
st.subheader(tr("Your own models: saved files"))
st.caption(tr("Architectures that are not Keras applications (U-Net, ConvMixer, a 1-D network, a Flatten-Dense CNN, "
              "...), saved as .keras files in calc/data/models and read as an upload is; measured on this CPU by the "
              "same protocol (python -m calc measure --file ...), not part of the set above."))
try:
    own = load_own_models()
except (OSError, ValueError) as exc:
    st.error(tr("The own-model report could not be read: {error}", error=exc))
else:
    st.markdown(slice_line(own["summary"], tr("Own models, CPU")))
    st.dataframe(case_table(own["cases"], SLICE_COLUMNS), hide_index=True, column_config=error_column)

st.subheader(tr("On a GPU: TensorFlow on an H100"))
st.caption(tr("Validation cases measured with TensorFlow 2.21 on an NVIDIA H100 by the same protocol "
              "(tools/measure_gpu_tf.py), estimated with GPU kernels; not part of the set above."))
try:
    slices = load_gpu_slices()
except (OSError, ValueError) as exc:
    st.error(tr("The GPU reports could not be read: {error}", error=exc))
    slices = ()
for what, gpu_report in zip((tr("Graph executor, jit_compile=False (the step predicted)"),
                             tr("XLA, jit_compile=True (Keras 3's default on a GPU)")), slices):
    st.markdown(slice_line(gpu_report["summary"], what))
    st.dataframe(case_table(gpu_report["cases"], SLICE_COLUMNS), hide_index=True, column_config=error_column)
try:
    plan_report = load_plan_report()
    st.markdown(slice_line(plan_report["summary"],
                           tr("XLA, jit_compile=True, against XLA's own plan (the Estimator's XLA step)")))
    st.dataframe(case_table(plan_report["cases"], SLICE_COLUMNS), hide_index=True, column_config=error_column)
except (ImportError, OSError, ValueError, KeyError):
    st.caption(tr("XLA's own plan is not scored here yet: no report of it against the XLA slice "
                  "(python -m calc validate --step xla --save)."))

if profile is None:
    st.stop()
st.subheader(tr("Measure this configuration now"))
allowed, why = measure_now_allowed(profile, inputs)
st.caption(tr("Runs real training steps with TensorFlow on this server (its CPU, or its GPU for GPU kernels; one "
              "thread, MEMORY_FACTS.md protocol) in a separate process, one measurement at a time, with a time limit."))
if not allowed:
    st.info(why)
elif st.button(tr("Measure now"), key="measure_now", icon=":material/play_arrow:"):
    with st.status(tr("Measuring {model} at {image_size}px, batch {batch_size}…", model=inputs.model,
                      image_size=inputs.image_size, batch_size=inputs.batch_size)) as status:
        result = run_measurement(profile, inputs)
        if result.error:
            status.update(label=tr("Measurement failed"), state="error")
        else:
            status.update(label=tr("Measured"), state="complete")
    # The result goes under the button, outside the status box (which folds up when done),
    # and the chart at the top gains the point in this same run.
    if result.error:
        st.error(plain(result.error))
    else:
        measured_now.append((result.measured_bytes, result.predicted_bytes, result.label))
        show_validation_chart("validation_chart_measured")
        st.success(tr("Measured {measured} ({measured_bytes:,} bytes); predicted {predicted} ({predicted_bytes:,} "
                      "bytes), {error:+.1%} against the measurement. The point is the star in the chart at the top.",
                      measured=views.fmt(result.measured_bytes, inputs, 3), measured_bytes=result.measured_bytes,
                      predicted=views.fmt(result.predicted_bytes, inputs, 3), predicted_bytes=result.predicted_bytes,
                      error=result.error_fraction))
