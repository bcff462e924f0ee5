import json

import pandas as pd
import streamlit as st

from dashboard import charts, figures, views
from dashboard.i18n import tr
from dashboard.loaders import accuracy_line, caveat_records, own_model_record, xla_line
from dashboard.pagekit import build_spec, inputs_and_profile
from dashboard.plain import plain
from dashboard.routes import ensure_routed
from dashboard.widgets import gpu_of, sidebar_inputs
from dashboard.xla_step import hub_sequence, hub_view, hub_waits, model_waits, show_xla_notes, xla_state
from dashboard.xla_view import kept_line, remat_note

ensure_routed()
charts.preload()
st.title(tr("How much GPU memory will this training step take?"))
inputs = sidebar_inputs()
gpu = gpu_of(inputs)
profile = None
if inputs.source == "hub":  # a KerasHub model: XLA's plan alone, no walk beside it
    view = hub_view(inputs, gpu)
else:  # a model at a size nobody has built yet: the page goes on without the walk while it is built
    inputs, profile = inputs_and_profile(inputs, wait=False)
    try:
        view = views.estimate_view(profile, inputs, gpu) if profile is not None else views.card_view(inputs, gpu)
    except ValueError as exc:
        st.error(plain(exc))
        st.stop()
xla = xla_state(inputs, view, gpu, build_spec(inputs) if profile is None else None)  # what is missing runs aside
if xla.answer is None or xla.answer.plan is None:
    if inputs.source == "hub":
        hub_waits(xla)
    elif profile is None:
        model_waits(xla, inputs)
shown = xla.shown(view, inputs)

c1, c2, c3 = st.columns([1, 1, 1.6])  # the largest batch's label says how it is known: room for it whole
c1.metric(shown.peak_label, views.fmt(shown.peak_bytes, inputs), delta=views.remat_delta(shown, inputs),
          delta_color="inverse")
c2.metric(f"{gpu.name}", views.fmt(shown.capacity_bytes, inputs))
c3.metric(shown.max_batch_label, views.max_batch_value(shown))
verdict = st.info if not shown.final and shown.decided_by is None else st.success if shown.fits else st.error
verdict(views.verdict(shown, inputs))
if caption := views.per_gpu_caption(inputs):
    st.caption(caption)
show_xla_notes(xla)
if (remat := views.remat_line(shown, inputs)) is not None:
    st.caption(remat)
if xla.answer is not None:
    st.caption(kept_line(xla.answer, inputs))
if shown.step == "xla" and (recompute := remat_note(xla.answer, inputs)) is not None:
    st.caption(recompute)
if shown.step == "graph" and shown.final:
    st.caption(accuracy_line())
st.caption(xla_line(shown.step, hub=inputs.source == "hub"))
if shown.step == "graph" and shown.final:  # the walk's caveats: TensorFlow's allocator and executor, not XLA's plan
    for note in views.caveat_notes(view, inputs, caveat_records(), caveat_records("gpu")):
        st.warning(note)
    if (own := views.own_model_note(inputs, own_model_record())) is not None:
        st.warning(own)
    if view.unknown_layer_types:
        st.warning(tr("Layer types without a rule, counted as keeping input and output: {types}",
                      types=plain(", ".join(view.unknown_layer_types))))

divisor = views.unit_divisor(inputs)
left, right = st.columns(2)
charts.plotly_chart(left, figures.breakdown_figure(shown.components, shown.overhead_bytes, shown.capacity_bytes,
                                                   divisor, inputs.unit, shown.kept_bytes), key="breakdown_chart")
charts.plotly_chart(right, figures.curve_figure(shown.curve, shown.capacity_bytes, shown.usable_bytes,
                                                views.max_batch_value(shown), divisor, inputs.unit), key="curve_chart")
right.caption(views.curve_caption(shown))
if inputs.source == "hub":
    hub_sequence(xla, inputs)
rows = views.shown_table(shown, inputs)
st.markdown(views.markdown_table(rows))
d1, d2 = st.columns(2)
d1.download_button(tr("Breakdown as CSV"), pd.DataFrame(rows).to_csv(index=False), "breakdown.csv", "text/csv",
                   key="dl_breakdown_csv")
d2.download_button(tr("Breakdown as JSON"), json.dumps({"inputs": inputs.to_query(), "rows": views.breakdown_table(shown)}),
                   "breakdown.json", "application/json", key="dl_breakdown_json")
