"""The shared sidebar: one widget per input, keyed by the input's name, synced to the URL."""

from __future__ import annotations

import streamlit as st

from calc.catalogue import lookup
from calc.gpus import GPU_PRESETS, GpuPreset, custom_gpu
from calc.facts.optimizers import applicable_options
from calc.hub import MAX_CLASSES, MAX_LORA_RANK, hub_models, lora_applies
from calc.types import MAX_DEVICES_PER_HOST, MAX_HOSTS
from dashboard.i18n import LANGUAGES, mark, tr
from dashboard.state import (
    DEVICES,
    FIELD_NAMES,
    GPUS,
    HUB_DTYPES,
    HUB_MODELS,
    MAX_BATCH,
    MODELS,
    OPTIMIZERS,
    QUANTIZE,
    PRECISIONS,
    REMATS,
    SOURCES,
    STEPS,
    TRAIN_MODES,
    UNITS,
    Inputs,
    parse_query,
    parse_query_by_key,
)

SUMMARY_ACTIVATIONS = ["relu", "silu", "gelu", "relu6", "elu", "leaky_relu", "sigmoid", "tanh", "hard_silu"]
SOURCE_LABELS = {"catalogue": mark("Keras applications"), "hub": mark("KerasHub (LLMs, transformers)"),
                 "upload": mark("my .keras / .h5 file"), "summary": mark("pasted model.summary()")}
HUB_DTYPE_LABELS = {"auto": mark("the task's default (bfloat16 for a causal LM, else float32)")}
DEVICE_LABELS = {"gpu": "GPU", "cpu": "CPU", "cpu_fp16": "CPU (AVX512-FP16)"}  # names: not translated
MODE_LABELS = {"all": mark("everything"), "frozen_backbone": mark("frozen backbone + new head"),
               "last_n": mark("last N layers")}
STEP_LABELS = {"xla": mark("XLA (Keras's default on a GPU, jit_compile=True)"),
               "graph": mark("Graph executor (jit_compile=False)")}
REMAT_LABELS = {"none": mark("none"), "full": mark("full (every layer)"),
                "activations": mark("activations (activation layers)")}


def _model_switched() -> None:
    """A model switch takes the new model's default image size, unless the size was the user's own (not the
    default of the model shown before)."""
    before = st.session_state.get("_model_shown")
    if before is None or st.session_state.get("image_size") == lookup(before).default_size:
        st.session_state["image_size"] = lookup(st.session_state["model"]).default_size


def sidebar_inputs() -> Inputs:
    """Renders the sidebar and returns the current inputs; the URL follows them."""
    if "_link" not in st.session_state:
        link = st.query_params.to_dict()
        inputs, _ = parse_query(link)
        st.session_state["_saved"] = {name: getattr(inputs, name) for name in FIELD_NAMES}
        st.session_state["_link"] = link
    # Widget state belongs to the page that drew it. Re-assigning each value makes it
    # the user's own, which survives a page switch (Streamlit's documented pattern);
    # the saved copy covers values Streamlit already dropped.
    for name, value in st.session_state["_saved"].items():
        st.session_state[name] = st.session_state[name] if name in st.session_state else value
    show_link_warnings()
    sb = st.sidebar
    # Option labels in this run's language, looked up rather than translated when shown:
    # Streamlit may format an option outside the script's thread, where the language is not set.
    labels = {name: {k: tr(label) for k, label in table.items()} for name, table in (
        ("source", SOURCE_LABELS), ("step", STEP_LABELS), ("remat", REMAT_LABELS), ("train_mode", MODE_LABELS))}
    labels["gpu"] = {k: GPU_PRESETS[k].name if k in GPU_PRESETS else tr("Custom size") for k in GPUS}
    sb.selectbox(tr("Language"), list(LANGUAGES), format_func=LANGUAGES.get, key="lang")
    sb.radio(tr("Model from"), SOURCES, horizontal=True, key="source", format_func=labels["source"].get)
    if st.session_state["source"] == "upload":
        sb.file_uploader(tr("Model file (.keras or .h5, loaded with Keras safe mode)"), type=["keras", "h5"],
                         key="upload_file")
    elif st.session_state["source"] == "summary":
        sb.text_area(tr("The text printed by model.summary()"), height=200, max_chars=1_000_000, key="summary_text",
                     help=tr("Keras 2 or 3. Print it wide, model.summary(line_length=200), so no name is cut."))
        sb.text_input(tr("Input shape, if the table has no InputLayer row (Sequential)"), key="summary_input_shape",
                      placeholder="224, 224, 3", max_chars=40)
        sb.selectbox(tr("Activation rows whose name gives no function compute"), SUMMARY_ACTIVATIONS,
                     key="summary_activation", help=tr("conv1_relu says relu; activation_3 says nothing. "
                                                       "EfficientNet and ConvNeXt-style models use silu or gelu."))
    elif st.session_state["source"] == "hub":
        _hub_inputs(sb)
    else:
        sb.selectbox(tr("Model (Keras application)"), MODELS, key="model", on_change=_model_switched)
        entry = lookup(st.session_state["model"])
        st.session_state["_model_shown"] = entry.name
        sb.number_input(tr("Image size (px, min {min}, default {default})", min=entry.min_size,
                           default=entry.default_size),
                        min_value=1, max_value=8192, step=16, key="image_size")
    sb.number_input(tr("Batch size (global)"), min_value=1, max_value=MAX_BATCH, step=1, key="batch_size")
    sb.selectbox(tr("Optimizer"), OPTIMIZERS, key="optimizer")
    for option in applicable_options(st.session_state["optimizer"]):  # momentum, centered, amsgrad
        sb.checkbox(option, key=option, help=tr("one more slot per parameter (Keras 3 build())"))
    sb.checkbox(tr("EMA of the weights (use_ema)"), key="ema", help=tr("a full copy of the trainable weights"))
    sb.number_input(tr("Gradient accumulation steps"), min_value=1, max_value=1024, key="grad_accum",
                    help=tr("Keras 3 gradient_accumulation_steps: an accumulator per parameter"))
    if st.session_state["source"] != "hub":  # a KerasHub model's step is XLA's, its precision its dtype policy
        _step_inputs(sb, labels)
    sb.selectbox("GPU", GPUS, format_func=labels["gpu"].get, key="gpu")
    if st.session_state["gpu"] == "custom":
        sb.number_input(tr("GPU memory (GiB)"), min_value=0.25, max_value=4096.0, step=1.0, key="gpu_memory_gib")
    sb.number_input(tr("GPUs (data parallel)"), min_value=1, max_value=1024, key="num_gpus")
    if st.session_state["source"] == "hub":  # the preset's layout map shards its weights; an application has none
        sb.number_input(tr("Cards sharing the weights (model parallel)"), min_value=1, max_value=MAX_DEVICES_PER_HOST,
                        key="model_parallel", help=tr("keras.distribution.ModelParallel with the preset's own layout "
                                                      "map: a mesh of (GPUs) x (these cards); XLA plans one card"))
        sb.number_input(tr("Hosts"), min_value=1, max_value=MAX_HOSTS, key="hosts",
                        help=tr("the machines the mesh's cards sit on, as many on each"))
    sb.slider(tr("Safety margin (%)"), 0, 90, key="margin")
    sb.radio(tr("Unit"), UNITS, horizontal=True, key="unit",
             help=tr("GiB = 1024³ bytes (what nvidia-smi's MiB add up to); GB = 10⁹ bytes"))
    inputs = Inputs(**{name: st.session_state[name] for name in FIELD_NAMES})
    st.session_state["_saved"] = {name: getattr(inputs, name) for name in FIELD_NAMES}
    st.query_params.from_dict(inputs.to_query())
    return inputs


def _hub_inputs(sb) -> None:
    """A KerasHub preset and what its training setup adds: the sequence, LoRA's rank, the dtype policy."""
    models = hub_models()
    sb.selectbox(tr("Model (KerasHub preset)"), HUB_MODELS, key="hub",
                 format_func=lambda name: f"{name} ({models[name].params / 1e9:.2f} B)")
    model = models[st.session_state["hub"]]
    if model.text:
        longest = model.sequence_limit
        st.session_state["seq_len"] = min(st.session_state["seq_len"], longest)  # GPT-2 and BERT stop at theirs
        sb.number_input(tr("Sequence length (tokens)"), min_value=1, max_value=longest, step=128, key="seq_len")
    if model.task != "causal_lm":
        sb.number_input(tr("Classes (the classifier's new head)"), min_value=1, max_value=MAX_CLASSES,
                        key="hub_classes")
        sb.checkbox(tr("Freeze the backbone (the new head alone trains)"), key="hub_frozen")
    if lora_applies(model, st.session_state["hub_frozen"]):
        sb.number_input(tr("LoRA rank (0: train every weight)"), min_value=0, max_value=MAX_LORA_RANK,
                        key="lora_rank", help=tr("backbone.enable_lora(rank): the query and value projections gain "
                                                 "two float32 factors each, and only those (and the projections' "
                                                 "biases) train"))
    # The default named by what it is for this model: a short option that a narrow sidebar does not cut.
    auto = tr("default: {dtype}", dtype="bfloat16" if model.task == "causal_lm" else "float32")
    sb.selectbox(tr("Dtype policy"), HUB_DTYPES, key="hub_dtype", format_func=lambda d: auto if d == "auto" else d,
                 help=tr(HUB_DTYPE_LABELS["auto"]))
    plain = tr("not quantized")  # translated now: the widget's labels are this run's language
    sb.selectbox(tr("Quantize the frozen weights"), QUANTIZE, key="quantize",
                 format_func=lambda q: plain if q == "none" else q,
                 help=tr("model.quantize(mode) before LoRA: int8 and int4 keep the frozen kernels in 8 or 4 bits "
                         "with scales beside them; float8 trains the matrix products in 8-bit floats"))


def _step_inputs(sb, labels: dict[str, dict[str, str]]) -> None:
    """The step of a Keras application or your own model: precision, kernels, the step, remat, what trains."""
    sb.selectbox(tr("Precision"), PRECISIONS, key="precision")
    sb.radio(tr("Kernels"), DEVICES, format_func=DEVICE_LABELS.get, horizontal=True, key="device",
             help=tr("GPU: cuDNN and cuBLAS (measured on an H100). CPU: TensorFlow's CPU kernels, where the "
                     "validation set was measured; under mixed_float16 and for grouped convolutions they hold "
                     "buffers a GPU does not. CPU (AVX512-FP16): a CPU where oneDNN runs float16 itself "
                     "(Sapphire Rapids and later), without the float16 buffers"))
    sb.radio(tr("Training step"), STEPS, format_func=labels["step"].get, key="step",
             help=tr("XLA: the step compiled by XLA, as Keras 3 runs it on a GPU by default; shown as XLA's own "
                     "memory plan (compiled here, without a GPU, for the chosen card). Graph executor: "
                     "model.compile(..., jit_compile=False), predicted by walking TensorFlow's graph executor"))
    if st.session_state["step"] == "xla":
        sb.selectbox(tr("Rematerialisation (keras.RematScope)"), REMATS, format_func=labels["remat"].get,
                     key="remat", help=tr("Recompute activations in the backward pass instead of keeping them: "
                                          "less memory, more compute. XLA's plan with and without it shows the "
                                          "saving"))
    sb.selectbox(tr("What is trained"), TRAIN_MODES, format_func=labels["train_mode"].get, key="train_mode")
    if st.session_state["train_mode"] == "last_n":
        sb.number_input(tr("N (last layers trained)"), min_value=1, max_value=10000, key="last_n")




def show_link_warnings() -> None:
    """The link's bad values, each until the visitor sets that input (then it is theirs, not the link's).

    Read again on every run, so that they are in the language chosen now.
    """
    fallback, warnings = parse_query_by_key(st.session_state["_link"])
    settled = st.session_state.setdefault("_settled", set())
    for key, text in warnings:
        if key not in settled and st.session_state.get(key, getattr(fallback, key)) != getattr(fallback, key):
            settled.add(key)
        if key not in settled:
            st.warning(text)


def remember(name: str, value: object) -> None:
    """An input set outside the sidebar (the Compare page's lists): kept across pages and in the link."""
    st.session_state[name] = value
    st.session_state["_saved"][name] = value
    st.query_params[name] = str(value)


def gpu_of(inputs: Inputs) -> GpuPreset:
    if inputs.gpu == "custom":
        return custom_gpu(float(inputs.gpu_memory_gib))
    return GPU_PRESETS[inputs.gpu]
