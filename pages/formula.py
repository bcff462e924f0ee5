import pandas as pd
import streamlit as st

from calc import classic
from dashboard import lesson, views
from dashboard import presentation
from dashboard.i18n import tr
from dashboard.loaders import load_hand_example
from dashboard.pagekit import inputs_and_profile
from dashboard.routes import ensure_routed
from dashboard.widgets import gpu_of, sidebar_inputs
from dashboard.xla_step import teach_hub, xla_answer_for
from dashboard.xla_view import lesson_line, xla_largest, xla_lesson

ensure_routed()
inputs = sidebar_inputs()
gpu = gpu_of(inputs)
if inputs.source == "hub":
    teach_hub(inputs, gpu)  # a KerasHub model's lesson is XLA's plan alone; the page ends there
inputs, profile = inputs_and_profile(inputs)
fit = views.fit_of(profile, inputs, gpu)
n = lesson.formula_numbers(profile, inputs, gpu, lesson.measured_for(inputs), fit, fit.max_batch)
terms = lesson.terms(n, inputs)
presenting = inputs.present
answer = xla_answer_for(inputs, gpu)
xla = xla_lesson(answer, n.breakdown, inputs)  # XLA's plan as a lesson, where it says what fills its peak
largest_xla = xla_largest(answer, inputs)
if presenting:
    st.html(presentation.CSS)
st.title(tr("The formula, with your numbers"))
top = st.columns([1, 1, 2])
top[0].toggle(tr("Presentation mode"), key="present", help=tr("Large type, no sidebar, one term at a time"))
top[1].download_button(tr("Handout (HTML, printable)"),
                       lesson.handout_html(n, inputs, terms, gpu.name, **lesson.handout_source(inputs), xla=xla,
                                           xla_largest=largest_xla),
                       "memory-formula.html", "text/html", key="dl_handout")

if presenting:  # on a projector, the lesson of the sidebar's step alone (XLA's plan where it says what fills its peak)
    if xla is not None:
        presentation.present(list(xla.terms), xla.peak_bytes, tr("XLA's plan, with your numbers"), [xla.why], inputs)
    else:
        presentation.present(terms, n.breakdown.peak_bytes, tr("1. What this tool computes"),
                             [lesson.needed_markdown(n, inputs, gpu), lesson.largest_markdown(n, inputs, gpu.name, largest_xla)],
                             inputs)
    st.stop()

if xla is None:
    st.caption(tr("Every number on this page comes from replaying one training step in the order TensorFlow's graph "
                  "executor runs it (`model.compile(..., jit_compile=False)`), tensor by tensor, and taking the "
                  "moment when the most memory is in use. XLA's step (`jit_compile=True`, Keras 3's default on a "
                  "GPU) is planned by XLA itself; the Estimator shows that plan."))
if answer is not None:
    st.info(lesson_line(answer, inputs, gpu, taught=xla is not None))
if xla is not None:
    st.header(tr("XLA's plan, with your numbers"))
    st.caption(tr("The step Keras runs on a GPU (jit_compile=True): XLA's own plan, split by what fills it at its "
                  "peak (the values XLA's buffer assignment holds then)."))
    st.latex(lesson.symbols_latex(list(xla.terms)))
    for term in xla.terms:
        st.markdown(lesson.term_markdown(term, inputs))
    st.latex(lesson.sum_latex(list(xla.terms), xla.peak_bytes, inputs))
    st.subheader(tr("Why it differs from the walk"))
    st.dataframe(pd.DataFrame(xla.versus), hide_index=True)
    st.markdown(xla.why)
if inputs.num_gpus > 1:
    st.info(lesson.per_gpu_note(n, inputs))

st.header(tr("1. What this tool computes"))
st.latex(lesson.symbols_latex(terms))
for term in terms:
    st.markdown(lesson.term_markdown(term, inputs))
st.latex(lesson.sum_latex(terms, n.breakdown.peak_bytes, inputs))
st.markdown(lesson.needed_markdown(n, inputs, gpu))
st.markdown(lesson.largest_markdown(n, inputs, gpu.name, largest_xla))

st.header(tr("2. The rules of thumb people use, for the same configuration"))
st.markdown(tr("Their symbols: **N**, every layer's output values per sample, summed (the Output Shape column of "
               "`model.summary()`); **P**, the parameters ({params:,}), **P_trainable** the trainable ones "
               "({trainable:,}); **B**, the batch on one GPU ({batch}); **I**, the input values per sample "
               "({input:,}).", params=n.weights_params, trainable=n.trainable_params, batch=n.batch,
               input=n.input_elements))
st.latex(r"\text{" + tr("Neural Network Console blog post") + r"}:\ (N \cdot B + P) \times 2 \times 4\ \text{bytes}")
st.markdown(tr("N = {neurons:,} (every Output Shape of `model.summary()` summed), P = {params:,}, B = {batch} → "
               "**{nbytes:,} bytes ({shown})**", neurons=n.neurons, params=n.weights_params, batch=n.batch,
               nbytes=n.nnc_bytes, shown=views.fmt(n.nnc_bytes, inputs, 3)))
st.latex(r"\text{" + tr("Stack Exchange answer (cs231n)") + r"}:\ N \cdot 2 \cdot 4 \cdot B + P \cdot 3 \cdot 4 + "
         r"B \cdot I \cdot 4")
st.markdown(tr("→ **{mb:,.2f} MB** (MB = 1024², as the answer divides)", mb=n.cs231n_mb))
st.latex(r"\text{" + tr("max batch (Stack Overflow, choosing a batch size)") + r"} = "
         r"\frac{\text{GPU bytes}}{4\,(N + P_{trainable})}")
st.markdown(tr("→ **{rule:,}** on {gpu}; this tool's graph-executor walk says **{engine:,}** (the largest batch "
               "above).",
               rule=n.rule_max_batch, gpu=gpu.name, engine=n.engine_max_batch))
table = pd.DataFrame(lesson.rule_comparison(n))
st.dataframe(table, hide_index=True, column_config={table.columns[2]: st.column_config.NumberColumn(format="percent")})
if n.measured is None:
    st.caption(lesson.no_measurement_caption(inputs))

st.header(tr("3. Why the rules are off"))
st.markdown(lesson.why_rules_are_off())

st.header(tr("4. Their worked examples, reproduced"))
st.markdown(tr(
    "- The Neural Network Console blog post, VGG16 at 224×224, batch 8: (15,262,696 × 8 + 138,357,544) × 2 × 4 = "
    "**{vgg8:,} bytes** ≈ 2 GB, as printed. The post then says batch 32 needs \"4×, about 8 GB\"; its own rule "
    "gives **{vgg32:,} bytes** (5.0 GB): the parameters do not grow with the batch.\n"
    "- The Stack Exchange question: 532,752 activations, 19,072,984 parameters, 180×50×1 input, batch 128: "
    "4.06 × 128 + 218.27 + 4.39 = **{answer} MB** (the question's own sum: {question} MB).\n"
    "- The Stack Overflow question on tiny-cnn's memory (\"why do CNNs use so much memory\"): (1,560,576 + 13,716) "
    "× 4 = **{tiny:,} bytes**; its \"about 12 MB\" is the same count at 8 bytes ({tiny8:,}). Layer 7 has "
    "3·3·96·192 = 165,888 weights, not 6,912.",
    vgg8=classic.nnc_bytes(15_262_696, 138_357_544, 8), vgg32=classic.nnc_bytes(15_262_696, 138_357_544, 32),
    answer=classic.cs231n_answer(532_752, 19_072_984, 9000, 128).total_mb,
    question=classic.cs231n_question_mb(532_752, 19_072_984, 9000, 128),
    tiny=classic.tiny_cnn_bytes(), tiny8=classic.tiny_cnn_bytes(bytes_per_value=8)))

if (hand := load_hand_example()) is not None:
    example = lesson.hand_example(*hand, gpu)
    st.header(tr("5. A model small enough to work out by hand"))
    st.markdown(tr("The Keras MNIST example convnet: 28×28×1 images, two convolutions, pooling and two Dense layers, "
                   "in the step TensorFlow measured: batch {batch}, `adam`, float32, on a CPU. The table and the terms "
                   "W, S and X can be checked with a calculator: a layer's values per sample are the product of its "
                   "output shape, its parameters the sum of its weights' elements (a 3×3 convolution from 1 to 32 "
                   "channels: 3·3·1·32 = 288 weights and 32 biases). G, U, B · a and T are what the replayed step holds "
                   "at the moment of the peak.", batch=example.numbers.batch))
    st.dataframe(pd.DataFrame(lesson.hand_rows(example)), hide_index=True)
    for term in example.terms:
        st.markdown(lesson.term_markdown(term, None))
    st.latex(lesson.sum_latex(example.terms, example.numbers.breakdown.peak_bytes, None, per_line=2))
    st.markdown(lesson.hand_measured_markdown(example))
