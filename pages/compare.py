import pandas as pd
import streamlit as st

from calc.gpus import GPU_PRESETS
from dashboard import figures, views
from dashboard.loaders import load_profile, spec_for
from dashboard.plain import plain
from dashboard.routes import ensure_routed
from dashboard.state import MODELS
from dashboard.widgets import sidebar_inputs

MAX_MODELS = 6
ensure_routed()
st.title("Compare models and GPUs")
inputs = sidebar_inputs()
models = st.multiselect("Models", MODELS, default=[inputs.model, "EfficientNetB0"] if inputs.model != "EfficientNetB0"
                        else [inputs.model, "ResNet50"], max_selections=MAX_MODELS, key="compare_models")
gpu_keys = st.multiselect("GPUs", list(GPU_PRESETS), default=["t4", "a10", "a100-40", "h100-80"],
                          format_func=lambda k: GPU_PRESETS[k].name, key="compare_gpus")
st.caption(f"Same training setup as the sidebar: image {inputs.image_size}px, {inputs.optimizer}, {inputs.precision}, "
           f"{inputs.device.upper()} kernels, {inputs.train_mode}, safety margin {inputs.margin}%. Every number is "
           "the graph-executor walk (`jit_compile=False`); the Estimator shows XLA's plan of the compiled step, "
           "one model and card at a time.")
profiles = {}
for name in models:
    try:
        with st.spinner(f"Building {name} once (weights=None)…"):
            profiles[name] = load_profile(spec_for(name, inputs.image_size, inputs.train_mode == "frozen_backbone"))
    except ValueError as exc:
        st.error(f"{name}: {plain(exc)}")
if not profiles:
    st.info("Pick at least one model.")
    st.stop()
gpus = [GPU_PRESETS[k] for k in gpu_keys]
try:
    table = pd.DataFrame(views.compare_table(profiles, gpus, inputs))
    curves = views.compare_curves(profiles, inputs)
except ValueError as exc:
    st.error(plain(exc))
    st.stop()
st.subheader("Largest batch that fits")
st.dataframe(table, hide_index=True)
st.download_button("Table as CSV", table.to_csv(index=False), "compare.csv", "text/csv", key="dl_compare_csv")
st.plotly_chart(figures.curves_figure(curves, {g.name: g.memory_bytes - g.overhead_bytes for g in gpus},
                                      views.unit_divisor(inputs), inputs.unit), key="compare_chart")
