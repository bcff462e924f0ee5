import pandas as pd
import streamlit as st

from dashboard import figures, views
from dashboard.loaders import (accuracy_line, load_gpu_slices, load_own_models, load_plan_report, load_validation,
                               noise_line, slice_line)
from dashboard.measure_now import measure_now_allowed, run_measurement
from dashboard.pagekit import inputs_and_profile
from dashboard.plain import plain
from dashboard.routes import ensure_routed

ensure_routed()
st.title("How accurate is it? Predicted versus measured")
inputs, profile = inputs_and_profile()
st.caption("Which step each table describes: the CPU set and your own models measure TensorFlow's graph executor "
           "(`jit_compile=False`) against the graph-executor walk; on the H100, the graph-executor slice does the "
           "same, and the XLA slice (`jit_compile=True`) is scored against the walk and, where its report exists, "
           "against XLA's own plan (`calc.xla`).")
st.caption(accuracy_line())
st.caption(noise_line())
try:
    report = load_validation()
except (OSError, ValueError) as exc:
    st.error(f"The validation report could not be read: {exc}")
    st.stop()
cases = report["cases"]
extra = st.session_state.setdefault("measured_now", [])
st.plotly_chart(figures.validation_figure([c["measured_bytes"] for c in cases], [c["predicted_bytes"] for c in cases],
                                          [c["case"] for c in cases], views.unit_divisor(inputs), inputs.unit, extra),
                key="validation_chart")
st.dataframe(pd.DataFrame(cases), hide_index=True,
             column_config={"relative_error": st.column_config.NumberColumn(format="percent")})

st.subheader("Where runs of one step differ most")
st.caption("The cases grouped by what calc.estimate.spread_caveats finds in them (the Estimator warns for each "
           "kind); errors are against each case's median run, and the margin is the share of memory to keep "
           "free so that every measured run of the group would have fit.")
percent = st.column_config.NumberColumn(format="percent")
st.dataframe(pd.DataFrame(views.caveat_rows(report)), hide_index=True,
             column_config={"lowest error": percent, "highest error": percent,
                            "margin that covered every run": percent})

st.subheader("Your own models: saved files")
st.caption("Architectures that are not Keras applications (U-Net, ConvMixer, a 1-D network, a Flatten-Dense CNN, "
           "...), saved as .keras files in calc/data/models and read as an upload is; measured on this CPU by the "
           "same protocol (python -m calc measure --file ...), not part of the set above.")
try:
    own = load_own_models()
except (OSError, ValueError) as exc:
    st.error(f"The own-model report could not be read: {exc}")
else:
    st.markdown(slice_line(own["summary"], "Own models, CPU"))
    st.dataframe(pd.DataFrame(own["cases"])[["case", "measured_bytes", "predicted_bytes", "relative_error"]],
                 hide_index=True, column_config={"relative_error": percent})

st.subheader("On a GPU: TensorFlow on an H100")
st.caption("Validation cases measured with TensorFlow 2.21 on an NVIDIA H100 by the same protocol "
           "(tools/measure_gpu_tf.py), estimated with GPU kernels; not part of the set above.")
try:
    slices = load_gpu_slices()
except (OSError, ValueError) as exc:
    st.error(f"The GPU reports could not be read: {exc}")
    slices = ()
for what, gpu_report in zip(("Graph executor, jit_compile=False (the step predicted)",
                             "XLA, jit_compile=True (Keras 3's default on a GPU)"), slices):
    st.markdown(slice_line(gpu_report["summary"], what))
    st.dataframe(pd.DataFrame(gpu_report["cases"])[["case", "measured_bytes", "predicted_bytes", "relative_error"]],
                 hide_index=True, column_config={"relative_error": percent})
try:
    plan_report = load_plan_report()
    st.markdown(slice_line(plan_report["summary"], "XLA, jit_compile=True, against XLA's own plan (the Estimator's XLA step)"))
    st.dataframe(pd.DataFrame(plan_report["cases"])[["case", "measured_bytes", "predicted_bytes", "relative_error"]],
                 hide_index=True, column_config={"relative_error": percent})
except (ImportError, OSError, ValueError, KeyError):
    st.caption("XLA's own plan is not scored here yet: no report of it against the XLA slice "
               "(python -m calc validate --step xla --save).")

st.subheader("Measure this configuration now")
allowed, why = measure_now_allowed(profile, inputs)
st.caption("Runs real training steps with TensorFlow on this server (its CPU, or its GPU for GPU kernels; one "
           "thread, MEMORY_FACTS.md protocol) in a separate process, one measurement at a time, with a time limit.")
if not allowed:
    st.info(why)
elif st.button("Measure now", key="measure_now"):
    with st.status(f"Measuring {inputs.model} at {inputs.image_size}px, batch {inputs.batch_size}…") as status:
        result = run_measurement(profile, inputs)
        if result.error:
            status.update(label="Measurement failed", state="error")
            st.error(plain(result.error))
        else:
            status.update(label="Measured", state="complete")
            extra.append((result.measured_bytes, result.predicted_bytes, result.label))
            st.success(f"Measured {views.fmt(result.measured_bytes, inputs, 3)}; predicted "
                       f"{views.fmt(result.predicted_bytes, inputs, 3)} ({result.error_fraction:+.1%}).")
