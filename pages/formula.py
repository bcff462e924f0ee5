import pandas as pd
import streamlit as st

from calc import classic
from dashboard import lesson, views
from dashboard.pagekit import inputs_and_profile
from dashboard.routes import ensure_routed
from dashboard.widgets import gpu_of

ensure_routed()
st.title("The formula, with your numbers")
inputs, profile = inputs_and_profile()
st.caption("Every number on this page is the graph-executor walk: the step as `model.compile(..., jit_compile=False)` "
           "runs it. XLA's step (`jit_compile=True`, Keras 3's default on a GPU) is planned by XLA itself; the "
           "Estimator shows that plan.")
gpu = gpu_of(inputs)
n = lesson.formula_numbers(profile, inputs, gpu, lesson.measured_for(inputs))
b = n.breakdown
f = lambda x: views.fmt(x, inputs, 3)  # noqa: E731

accumulation = resets = ""
if n.reset_constant_params:
    accumulation = (", one of them the gradient accumulator; TensorFlow also keeps the zeros that reset the "
                    "accumulators as constants, one per distinct variable shape")
    resets = f" + {n.reset_constant_params:,}"

if n.waits_for_all:
    gradients_text = ("under mixed_float16 the loss scale checks that every gradient is finite before any update "
                      "(one `ops.cond` over all of them), so at the update all gradients are alive")
    update_text = (f"when that branch starts, the updates of all variables are ready at once, and the peak holds "
                   f"update temporaries of many of them together: measured on Dense chains, about "
                   f"{n.branch_per_param:g} per trainable parameter for `{inputs.optimizer}` beyond the gradient "
                   f"(`branch_temporaries` in `calc.facts.optimizers`; the runs scatter, `docs/notes/optimizer-temporaries.md`): "
                   f"{n.branch_per_param:g} × {n.trainable_params:,} × 4 B, or one update's scratch if that is larger, "
                   f"counted when the update is the peak")
else:
    gradients_text = ("Keras applies each gradient soon after it is computed, so only a few are alive at once")
    update_text = (f"`{inputs.optimizer}` computes {n.early_per_param} product(s) of its slots alone per trainable "
                   f"parameter (SGD momentum's m·momentum, RMSprop's ρ·v, ...); nothing waits for the gradient, so "
                   f"they can run at the start of the step and live until the variable's update. Measured, the peak "
                   f"holds about {n.early_alive:.0%} of them on average (the executor runs some late; "
                   f"`docs/notes/optimizer-temporaries.md`). At most {n.early_alive:g} × {n.early_per_param} × "
                   f"{n.trainable_params:,} × 4 B; those of the variables not yet updated at the peak")

half_text = ""
if n.half_kernel_bytes:
    half_text = (f"; {f(n.half_kernel_bytes)} of it are buffers of TensorFlow's own float16 CPU kernels, which run "
                 "because oneDNN has no float16 path: a convolution's gradient im2cols a shard of the batch into one "
                 "buffer of [⌈15 Mi / unit⌉, output pixels, filter size] float16 elements (about 30 MiB whatever the "
                 "batch), and a Dense layer's MatMul copies its operands and result to float32 (`calc.facts.kernels`)")

st.header("1. What this tool computes")
st.latex(r"M_{peak} = W + S + G_{live} + U + B \cdot a_{kept} + T + X + R")
st.markdown(
    f"""
- **W, weights**: every variable, 4 bytes each (float32 even under mixed precision):
  {n.weights_params:,} parameters → **{f(b.weights_bytes)}**.
- **S, optimizer state**: {n.slots} slot(s) per trainable parameter for `{inputs.optimizer}` (Keras 3 `build()`{accumulation}):
  {n.slots} × {n.trainable_params:,}{resets} × 4 B → **{f(b.optimizer_state_bytes)}**.
- **G, gradients alive at the peak**: {gradients_text} → **{f(b.gradients_bytes)}**.
- **U, optimizer update temporaries**: {update_text} → **{f(b.other_bytes)}**.
- **B · a, activations kept for the backward pass**: what each layer's gradient reads (a Conv keeps its input,
  a ReLU its output, BatchNormalization its input, Add nothing), alive at the peak ({b.peak_phase}):
  batch {n.batch} → **{f(b.activations_bytes)}** (at most {n.kept_per_sample:,} bytes per sample over the whole model).
- **T, backward transients**: gradients of activations and scratch of the layer running at the peak{half_text} → **{f(b.backward_transient_bytes)}**.
- **X, the input batch**: {n.batch} × {n.input_elements:,} × 4 B (+ labels) → **{f(b.input_batch_bytes)}**.
- **R, allocator chunks**: TensorFlow's BFC allocator grows its pool by regions that double in size and hands a
  free chunk out whole unless it is at least twice the request (or 128 MiB more), so a tensor can hold up to about
  twice its size. The terms above count each tensor at its size plus a measured 8 % (with part of the model in
  inference, W and S are the chunks the simulated pool below gives the variables and slots). The estimate also replays
  this step's allocations through a simulation of the allocator at batch {n.batch}, after modelled histories of
  the pool (the variables' kernels drawn, or made from one value each), and adds what it finds beyond the sum
  above → **{f(b.allocator_bytes)}** (with part of the model in inference, the larger of the two histories; in
  full training, only what every history agrees on: the smallest of the two and of the step in fresh regions
  past the variables, so 0 wherever any stays within the 8 %).
"""
)
st.latex(
    rf"M_{{peak}} = {f(b.weights_bytes)} + {f(b.optimizer_state_bytes)} + {f(b.gradients_bytes)} + "
    rf"{f(b.other_bytes)} + {f(b.activations_bytes)} + {f(b.backward_transient_bytes)} + {f(b.input_batch_bytes)} "
    rf"+ {f(b.allocator_bytes)} = {f(b.peak_bytes)}".replace("GiB", r"\,\mathrm{GiB}").replace("GB", r"\,\mathrm{GB}")
)
st.markdown(f"`nvidia-smi` would show about **{f(gpu.overhead_bytes)}** more (CUDA context and libraries), "
            "plus whatever TensorFlow reserved beyond the peak unless memory growth is on.")

st.header("2. The rules of thumb people use, for the same configuration")
st.latex(r"\text{Neural Network Console blog post}:\ (N \cdot B + P) \times 2 \times 4\ \text{bytes}")
st.markdown(f"N = {n.neurons:,} (every Output Shape of `model.summary()` summed), P = {n.weights_params:,}, "
            f"B = {n.batch} → **{n.nnc_bytes:,} bytes ({f(n.nnc_bytes)})**")
st.latex(r"\text{Stack Exchange answer (cs231n)}:\ N \cdot 2 \cdot 4 \cdot B + P \cdot 3 \cdot 4 + B \cdot I \cdot 4")
st.markdown(f"→ **{n.cs231n_mb:,.2f} MB** (MB = 1024², as the answer divides)")
st.latex(r"\text{max batch (batch-size Q\&A)} = \frac{\text{GPU bytes}}{4\,(N + P_{trainable})}")
st.markdown(f"→ **{n.seed_max_batch:,}** on {gpu.name}; this tool says **{n.engine_max_batch:,}**.")
table = pd.DataFrame(lesson.rule_comparison(n))
st.dataframe(table, hide_index=True, column_config={table.columns[2]: st.column_config.NumberColumn(format="percent")})
if n.measured_bytes is None:
    st.caption("No measurement of exactly this configuration in the validation set; the Validation page can measure one.")

st.header("3. Why the rules are off")
st.markdown(
    """
- **Every layer output counted as kept.** Add, pooling, padding and Flatten outputs are not read by any gradient;
  BatchNormalization + ReLU keep one tensor each, not "value and gradient" of every output. BatchNorm-heavy
  networks are over-estimated most.
- **Gradients of activations are not all alive at once.** The backward pass frees each layer's kept tensors as it goes.
- **Optimizer state ignored (the blog post) or guessed as 1× (the Stack Exchange answer).** Adam keeps two slots per parameter; for
  weight-heavy models (VGG with its top) this is the largest part and the rules *under*-estimate.
- **Parameters multiplied as if they grew with the batch** (the batch-size Q&A's max-batch rule divides all memory by
  activations + parameters per sample).
- **1000 vs 1024.** These sources mix MB = 10⁶ and MB = 1024²; GPU cards are sold in GB but `nvidia-smi` counts MiB.
- **What `nvidia-smi` adds**: the CUDA context and library handles, and TensorFlow's reservation.
- **A frozen backbone** keeps almost nothing for the backward pass; the rules still count every activation.
"""
)

st.header("4. Their worked examples, reproduced")
st.markdown(
    f"""
- The Neural Network Console blog post, VGG16 at 224×224, batch 8: (15,262,696 × 8 + 138,357,544) × 2 × 4 =
  **{classic.nnc_bytes(15_262_696, 138_357_544, 8):,} bytes** ≈ 2 GB, as printed.
  The post then says batch 32 needs "4×, about 8 GB"; its own rule gives
  **{classic.nnc_bytes(15_262_696, 138_357_544, 32):,} bytes** (5.0 GB): the parameters do not grow with the batch.
- The Stack Exchange question: 532,752 activations, 19,072,984 parameters, 180×50×1 input, batch 128:
  4.06 × 128 + 218.27 + 4.39 = **{classic.cs231n_answer(532_752, 19_072_984, 9000, 128).total_mb} MB**
  (the question's own sum: {classic.cs231n_question_mb(532_752, 19_072_984, 9000, 128)} MB).
- The "why do CNNs use so much memory" Q&A, tiny-cnn: (1,560,576 + 13,716) × 4 = **{classic.tiny_cnn_bytes():,} bytes**; its "about 12 MB" is the same
  count at 8 bytes ({classic.tiny_cnn_bytes(bytes_per_value=8):,}). Layer 7 has 3·3·96·192 = 165,888 weights, not 6,912.
"""
)
