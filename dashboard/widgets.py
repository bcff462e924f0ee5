"""The shared sidebar: one widget per input, keyed by the input's name, synced to the URL."""

from __future__ import annotations

import streamlit as st

from calc.catalogue import lookup
from calc.gpus import GPU_PRESETS, GpuPreset, custom_gpu
from calc.facts.optimizers import applicable_options
from dashboard.i18n import LANGUAGES
from dashboard.state import (
    DEVICES,
    FIELD_NAMES,
    GPUS,
    MAX_BATCH,
    MODELS,
    OPTIMIZERS,
    PRECISIONS,
    REMATS,
    SOURCES,
    STEPS,
    TRAIN_MODES,
    UNITS,
    Inputs,
    parse_query,
)

SUMMARY_ACTIVATIONS = ["relu", "silu", "gelu", "relu6", "elu", "leaky_relu", "sigmoid", "tanh", "hard_silu"]
DEVICE_LABELS = {"gpu": "GPU", "cpu": "CPU", "cpu_fp16": "CPU (AVX512-FP16)"}
MODE_LABELS = {"all": "everything", "frozen_backbone": "frozen backbone + new head", "last_n": "last N layers"}
STEP_LABELS = {"xla": "XLA (Keras's default on a GPU, jit_compile=True)", "graph": "Graph executor (jit_compile=False)"}
REMAT_LABELS = {"none": "none", "full": "full (every layer)", "activations": "activations (activation layers)"}


def sidebar_inputs() -> Inputs:
    """Renders the sidebar and returns the current inputs; the URL follows them."""
    if "_from_url" not in st.session_state:
        inputs, warnings = parse_query(st.query_params.to_dict())
        st.session_state["_saved"] = {name: getattr(inputs, name) for name in FIELD_NAMES}
        st.session_state["_from_url"] = warnings
    # Widget state belongs to the page that drew it. Re-assigning each value makes it
    # the user's own, which survives a page switch (Streamlit's documented pattern);
    # the saved copy covers values Streamlit already dropped.
    for name, value in st.session_state["_saved"].items():
        st.session_state[name] = st.session_state[name] if name in st.session_state else value
    for warning in st.session_state["_from_url"]:
        st.warning(warning)
    sb = st.sidebar
    sb.selectbox("Language", list(LANGUAGES), format_func=LANGUAGES.get, key="lang")
    sb.radio("Model from", SOURCES, horizontal=True, key="source",
             format_func={"catalogue": "Keras applications", "upload": "my .keras / .h5 file",
                          "summary": "pasted model.summary()"}.get)
    if st.session_state["source"] == "upload":
        sb.file_uploader("Model file (.keras or .h5, loaded with Keras safe mode)", type=["keras", "h5"],
                         key="upload_file")
    elif st.session_state["source"] == "summary":
        sb.text_area("The text printed by model.summary()", height=200, max_chars=1_000_000, key="summary_text",
                     help="Keras 2 or 3. Print it wide, model.summary(line_length=200), so no name is cut.")
        sb.text_input("Input shape, if the table has no InputLayer row (Sequential)", key="summary_input_shape",
                      placeholder="224, 224, 3", max_chars=40)
        sb.selectbox("Activation rows whose name gives no function compute", SUMMARY_ACTIVATIONS,
                     key="summary_activation", help="conv1_relu says relu; activation_3 says nothing. "
                     "EfficientNet and ConvNeXt-style models use silu or gelu.")
    else:
        sb.selectbox("Model (Keras application)", MODELS, key="model")
        entry = lookup(st.session_state["model"])
        sb.number_input(f"Image size (px, min {entry.min_size}, default {entry.default_size})",
                        min_value=1, max_value=8192, step=16, key="image_size")
    sb.number_input("Batch size (global)", min_value=1, max_value=MAX_BATCH, step=1, key="batch_size")
    sb.selectbox("Optimizer", OPTIMIZERS, key="optimizer")
    for option in applicable_options(st.session_state["optimizer"]):  # momentum, centered, amsgrad
        sb.checkbox(option, key=option, help="one more slot per parameter (Keras 3 build())")
    sb.checkbox("EMA of the weights (use_ema)", key="ema", help="a full copy of the trainable weights")
    sb.number_input("Gradient accumulation steps", min_value=1, max_value=1024, key="grad_accum",
                    help="Keras 3 gradient_accumulation_steps: an accumulator per parameter")
    sb.selectbox("Precision", PRECISIONS, key="precision")
    sb.radio("Kernels", DEVICES, format_func=DEVICE_LABELS.get, horizontal=True, key="device",
             help="GPU: cuDNN and cuBLAS (measured on an H100). CPU: TensorFlow's CPU kernels, where the "
                  "validation set was measured; under mixed_float16 and for grouped convolutions they hold "
                  "buffers a GPU does not. CPU (AVX512-FP16): a CPU where oneDNN runs float16 itself "
                  "(Sapphire Rapids and later), without the float16 buffers")
    sb.radio("Training step", STEPS, format_func=STEP_LABELS.get, key="step",
             help="XLA: the step compiled by XLA, as Keras 3 runs it on a GPU by default; shown as XLA's own "
                  "memory plan (compiled here, without a GPU, for the chosen card). Graph executor: "
                  "model.compile(..., jit_compile=False), predicted by walking TensorFlow's graph executor")
    if st.session_state["step"] == "xla":
        sb.selectbox("Rematerialisation (keras.RematScope)", REMATS, format_func=REMAT_LABELS.get, key="remat",
                     help="Recompute activations in the backward pass instead of keeping them: less memory, "
                          "more compute. XLA's plan with and without it shows the saving")
    sb.selectbox("What is trained", TRAIN_MODES, format_func=MODE_LABELS.get, key="train_mode")
    if st.session_state["train_mode"] == "last_n":
        sb.number_input("N (last layers trained)", min_value=1, max_value=10000, key="last_n")
    sb.selectbox("GPU", GPUS, format_func=lambda k: GPU_PRESETS[k].name if k in GPU_PRESETS else "Custom size",
                 key="gpu")
    if st.session_state["gpu"] == "custom":
        sb.number_input("GPU memory (GiB)", min_value=0.25, max_value=4096.0, step=1.0, key="gpu_memory_gib")
    sb.number_input("GPUs (data parallel)", min_value=1, max_value=1024, key="num_gpus")
    sb.slider("Safety margin (%)", 0, 90, key="margin")
    sb.radio("Unit", UNITS, horizontal=True, key="unit",
             help="GiB = 1024³ bytes (what nvidia-smi's MiB add up to); GB = 10⁹ bytes")
    inputs = Inputs(**{name: st.session_state[name] for name in FIELD_NAMES})
    st.session_state["_saved"] = {name: getattr(inputs, name) for name in FIELD_NAMES}
    st.query_params.from_dict(inputs.to_query())
    return inputs




def gpu_of(inputs: Inputs) -> GpuPreset:
    if inputs.gpu == "custom":
        return custom_gpu(float(inputs.gpu_memory_gib))
    return GPU_PRESETS[inputs.gpu]
