import json

import pandas as pd
import streamlit as st

from dashboard import charts, figures, views
from dashboard.i18n import tr
from dashboard.pagekit import inputs_and_profile
from dashboard.routes import ensure_routed
from dashboard.widgets import gpu_of, sidebar_inputs
from dashboard.xla_step import xla_answer_for
from dashboard.xla_view import layers_line, xla_layer_rows, xla_layers_caption

ensure_routed()
charts.preload()
st.title(tr("Where the memory goes, layer by layer"))
inputs = sidebar_inputs()
# A KerasHub model has no walk: XLA's plan by layer alone.
profile = None if inputs.source == "hub" else inputs_and_profile(inputs)[1]
answer = xla_answer_for(inputs, gpu_of(inputs))
if answer is not None and profile is not None:
    st.info(layers_line(answer, views.walk_peak_bytes(profile, inputs), inputs))
xla_rows = xla_layer_rows(answer.plan, inputs) if answer is not None and answer.plan is not None else []
if xla_rows:
    assert answer is not None and answer.plan is not None
    st.subheader(tr("XLA's plan at its peak, by layer"))
    st.caption(xla_layers_caption(answer.plan, inputs))
    st.dataframe(pd.DataFrame(xla_rows), hide_index=True)
if profile is None:
    if not xla_rows:
        st.info(tr("What fills this KerasHub model's plan is not known on this server yet: the Estimator asks "
                   "XLA for it after the plan itself, and this page shows it by layer then."))
    st.stop()
if xla_rows:
    st.subheader(tr("The graph-executor walk, layer by layer"))
else:  # the walk's peak is the number shown: its parts first
    phase, peak_rows = views.walk_peak_rows(profile, inputs)
    st.subheader(tr("The walk's peak, part by part"))
    st.caption(tr("The graph executor's step peaks at {phase}; its parts sum to the peak. Below, the ledger of what "
                  "each layer keeps for the backward pass, per sample.", phase=phase))
    st.dataframe(pd.DataFrame(peak_rows), hide_index=True,
                 column_config={tr("bytes"): st.column_config.NumberColumn(format="localized")})
rows = views.layer_rows(profile, inputs)
share = tr("share of kept")
table = pd.DataFrame([r.__dict__ for r in rows]).rename(columns={
    "name": tr("layer"), "layer_type": tr("type"), "output_shape": tr("output shape"), "params": tr("params"),
    "kept_bytes_per_sample": tr("bytes kept per sample"), "share": share})
st.caption(tr("{calls} layer calls, {params:,} parameters ({trainable:,} trainable when everything is trained). "
              "'Bytes kept per sample' is what the backward pass holds for one image.",
              calls=len(rows), params=profile.total_params, trainable=profile.trainable_params))
counted = st.column_config.NumberColumn(format="localized")  # with the reader's digit grouping
st.dataframe(table, hide_index=True, column_config={
    share: st.column_config.ProgressColumn(format="percent", min_value=0, max_value=1, width="medium"),
    tr("params"): counted, tr("bytes kept per sample"): counted})
d1, d2 = st.columns(2)
d1.download_button(tr("Layers as CSV"), table.to_csv(index=False), "layers.csv", "text/csv", key="dl_layers_csv")
d2.download_button(tr("Layers as JSON"), json.dumps([r.__dict__ for r in rows]), "layers.json", "application/json",
                   key="dl_layers_json")

divisor = views.unit_divisor(inputs)
heaviest = views.heaviest_layers(rows, 15)
st.subheader(tr("Heaviest layers"))
charts.plotly_chart(st, figures.layers_figure([r.name for r in heaviest], [r.kept_bytes_per_sample for r in heaviest],
                                              divisor, inputs.unit), key="layers_chart")
st.subheader(tr("Memory over one training step (batch {batch})", batch=inputs.batch_size))
st.caption(tr("Rises through the forward pass as activations are kept, peaks near the start of the backward pass, "
              "falls as each layer's backward releases what it kept."))
phases, totals = views.timeline_series(profile, inputs)
charts.plotly_chart(st, figures.timeline_figure(phases, totals, divisor, inputs.unit), key="timeline_chart")
