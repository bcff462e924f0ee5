from dataclasses import replace

import pandas as pd
import streamlit as st

from calc.gpus import GPU_PRESETS
from dashboard import charts, figures, views, xla_view
from dashboard.i18n import tr
from dashboard.loaders import spec_for
from dashboard.pagekit import catalogue_profile
from dashboard.plain import plain
from dashboard.routes import ensure_routed
from dashboard.state import MAX_COMPARED, MODELS
from dashboard.widgets import remember, sidebar_inputs
from dashboard.hub_compare import catalogue_compare_series, catalogue_peaks_table
from dashboard.xla_step import compare_cells, compare_hubs, compare_setups, peaks_heading, show_compare_progress

GPU_NAMES = {key: gpu.name for key, gpu in GPU_PRESETS.items()}
ensure_routed()
charts.preload()
st.title(tr("Compare models and GPUs"))
inputs = sidebar_inputs()
if inputs.source == "hub":
    compare_hubs(inputs)  # KerasHub presets x cards, XLA's plans alone; the page ends there
models = st.multiselect(tr("Models"), MODELS, default=views.compared_models(inputs), max_selections=MAX_COMPARED,
                        key="compare_models")
gpu_keys = st.multiselect(tr("GPUs"), list(GPU_PRESETS), default=views.compared_gpus(inputs),
                          format_func=GPU_NAMES.get, key="compare_gpus")
remember("models", ",".join(models))  # in the link, and kept when the visitor comes back to this page
remember("gpus", ",".join(gpu_keys))
xla_step = inputs.step == "xla" and views.xla_reason(replace(inputs, source="catalogue")) is None  # catalogue models
if xla_step:
    st.caption(tr("Same training setup as the sidebar: image {size}px, {optimizer}, {precision}, {device} kernels, "
                  "{train_mode}, safety margin {margin}%. The largest batches are XLA's, as on the Estimator: a number "
                  "alone is settled by compiled plans; \"≥ N\" is what the plans known so far tell; \"N (walk)\" is "
                  "the graph-executor walk's, where no XLA plan of that model and card is known yet. What the plans "
                  "do not tell yet compiles in the background. The peaks and the curves are XLA's plans too, per "
                  "card; a model none of whose plans is known yet is drawn from the walk (`jit_compile=False`), "
                  "marked so.", size=inputs.image_size, optimizer=inputs.optimizer,
                  precision=inputs.precision, device=inputs.device.upper(), train_mode=inputs.train_mode,
                  margin=inputs.margin))
else:
    st.caption(tr("Same training setup as the sidebar: image {size}px, {optimizer}, {precision}, {device} kernels, "
                  "{train_mode}, safety margin {margin}%. Every number is the graph-executor walk "
                  "(`jit_compile=False`).", size=inputs.image_size, optimizer=inputs.optimizer,
                  precision=inputs.precision, device=inputs.device.upper(), train_mode=inputs.train_mode,
                  margin=inputs.margin))
profiles, builds = {}, []
for name in models:
    try:  # a model at a size nobody has built yet is built in the background; its row comes then
        profile = catalogue_profile(name, inputs)
    except ValueError as exc:
        st.error(f"{name}: {plain(exc)}")
        continue
    if profile is None:
        builds.append(spec_for(name, inputs.image_size, inputs.train_mode == "frozen_backbone"))
    else:
        profiles[name] = profile
if not models:
    st.info(tr("Pick at least one model."))
    st.stop()
gpus = [GPU_PRESETS[k] for k in gpu_keys]
setups = compare_setups(list(profiles), gpu_keys, inputs) if xla_step else {}
cells, wants, _ = compare_cells(setups, {}, inputs, tuple(builds))
if not profiles and not builds:
    st.stop()  # each model's error is above
if not profiles:
    st.info(tr("The models are built at this size in the background; the table appears when the first is done."))
    show_compare_progress(cells, wants)
    st.stop()
try:
    rows = views.compare_table(profiles, gpus, inputs)
    curves = views.compare_curves(profiles, inputs)
    if xla_step:
        rows = xla_view.compare_table(rows, gpus, inputs, {key: cell.answer for key, cell in cells.items()})
        curves = catalogue_compare_series(cells, gpus, inputs, curves)
    table = pd.DataFrame(rows)
except ValueError as exc:
    st.error(plain(exc))
    st.stop()
st.subheader(tr("Largest batch that fits"))
st.dataframe(table, hide_index=True)
if xla_step:
    st.subheader(peaks_heading(inputs))
    st.dataframe(pd.DataFrame(catalogue_peaks_table(list(profiles), gpus, cells, inputs)), hide_index=True)
show_compare_progress(cells, wants)
st.download_button(tr("Table as CSV"), table.to_csv(index=False), "compare.csv", "text/csv", key="dl_compare_csv")
charts.plotly_chart(st, figures.curves_figure(curves, {g.name: g.memory_bytes - g.overhead_bytes for g in gpus},
                                              views.unit_divisor(inputs), inputs.unit, markers=xla_step),
                    key="compare_chart")
