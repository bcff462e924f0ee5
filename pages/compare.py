import pandas as pd
import streamlit as st

from calc.gpus import GPU_PRESETS
from dashboard import charts, figures, views
from dashboard.i18n import tr
from dashboard.loaders import load_profile, spec_for
from dashboard.plain import plain
from dashboard.routes import ensure_routed
from dashboard.state import MAX_COMPARED, MODELS
from dashboard.widgets import remember, sidebar_inputs

GPU_NAMES = {key: gpu.name for key, gpu in GPU_PRESETS.items()}
ensure_routed()
charts.preload()
st.title(tr("Compare models and GPUs"))
inputs = sidebar_inputs()
models = st.multiselect(tr("Models"), MODELS, default=views.compared_models(inputs), max_selections=MAX_COMPARED,
                        key="compare_models")
gpu_keys = st.multiselect(tr("GPUs"), list(GPU_PRESETS), default=views.compared_gpus(inputs),
                          format_func=GPU_NAMES.get, key="compare_gpus")
remember("models", ",".join(models))  # in the link, and kept when the visitor comes back to this page
remember("gpus", ",".join(gpu_keys))
st.caption(tr("Same training setup as the sidebar: image {size}px, {optimizer}, {precision}, {device} kernels, "
              "{train_mode}, safety margin {margin}%. Every number is the graph-executor walk (`jit_compile=False`); "
              "the Estimator shows XLA's plan of the compiled step, one model and card at a time.",
              size=inputs.image_size, optimizer=inputs.optimizer, precision=inputs.precision,
              device=inputs.device.upper(), train_mode=inputs.train_mode, margin=inputs.margin))
profiles = {}
for name in models:
    try:
        with st.spinner(tr("Building {model} once (weights=None)…", model=name)):
            profiles[name] = load_profile(spec_for(name, inputs.image_size, inputs.train_mode == "frozen_backbone"))
    except ValueError as exc:
        st.error(f"{name}: {plain(exc)}")
if not profiles:
    st.info(tr("Pick at least one model."))
    st.stop()
gpus = [GPU_PRESETS[k] for k in gpu_keys]
try:
    table = pd.DataFrame(views.compare_table(profiles, gpus, inputs))
    curves = views.compare_curves(profiles, inputs)
except ValueError as exc:
    st.error(plain(exc))
    st.stop()
st.subheader(tr("Largest batch that fits"))
st.dataframe(table, hide_index=True)
st.download_button(tr("Table as CSV"), table.to_csv(index=False), "compare.csv", "text/csv", key="dl_compare_csv")
charts.plotly_chart(st, figures.curves_figure(curves, {g.name: g.memory_bytes - g.overhead_bytes for g in gpus},
                                              views.unit_divisor(inputs), inputs.unit), key="compare_chart")
