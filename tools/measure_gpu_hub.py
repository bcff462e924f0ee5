"""KerasHub training steps on a GPU under Keras's JAX backend, against XLA's plan on record.

    python tools/measure_gpu_hub.py predict --gpu h200 [--save]   # here: XLA's plan of each case (set hub_gpu)
    python tools/measure_gpu_hub.py prepare                        # here: the wheels to carry, into .gpu/hub
    python3 tools/measure_gpu_hub.py measure OUT.json [DEADLINE_S] [--jobs N] [--no-autotune] [--only SUBSTR]
    python tools/measure_gpu_hub.py measure OUT.json 600 --dry-run --only gpt2   # here: the child on the CPU
    python tools/measure_gpu_hub.py compare OUT.json [--dumps D.json]  # here: the plan on record against the card

``predict`` compiles XLA's plan (``calc.xla.compute_plan``) of each case of ``CASES`` not yet in
``validation/planned.json`` for the card and, with ``--save``, adds them to set ``hub_gpu``; a case
planned before keeps its prediction (``--replace``: every case planned again, the set replaced): the
predictions are committed before a GPU measures them.

``measure`` runs on the lent GPU machine (JAX with CUDA; no TensorFlow, nothing to download),
each ``hub_gpu`` case in a fresh child (``KERAS_BACKEND=jax``, ``XLA_PYTHON_CLIENT_PREALLOCATE=false``,
``XLA_PYTHON_CLIENT_MEM_FRACTION=0.97``, ``PYTHONPATH=.``), the smallest plans first, ``--jobs N``
children at once (default 1; each child is its own process with its own allocator, so its peak is
its own; the eight plans add up to about 82 GiB). The child builds the task as the plan does
(``calc.keras.hub.hub_training_model``: the dtype policy, ``backbone.enable_lora``, the task's own
loss and metrics, the case's optimizer) but with real random weights, as a user runs it: the plan's
deferred variables (its ``keras.StatelessScope``) are replaced by an empty context. Then two
``train_on_batch`` on random tokens (or images) of the case's shape, and JAX's allocator
statistics: ``peak_bytes_in_use`` of the process (JAX cannot reset its peak, so it covers the
build, the random initialisation and XLA's compile and autotuning too: the peaks right after the
build and after the first step are kept beside it), ``bytes_in_use`` before the second step, the
versions, which kernel each ``jax.nn.dot_product_attention`` call took, and errors (out of memory
marked as such). It saves the file as each case ends and starts none after DEADLINE_S (default
480), when it also stops the children still running.

What must be carried (``prepare``; ``.gpu/`` is ignored by git): keras-hub 0.32.0 and keras 3.15.1
(the versions of the plan), and what they import that a machine with JAX alone lacks (``PINNED``),
about 10 MiB of wheels in ``.gpu/hub``. keras-hub imports TensorFlow, tensorflow-text,
sentencepiece and kagglehub only where they are installed (``try: import``), so none is needed.
``measure`` unpacks keras and keras-hub always, the others only where the machine's Python cannot
import them, into ``/tmp/calc-hub-site``, first on the children's path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30
SET = "hub_gpu"
WHEELS = ROOT / ".gpu" / "hub"
SITE = Path("/tmp/calc-hub-site")
# Carried wheels: what the plan was compiled with, what keras-hub imports unconditionally beyond Keras, and
# what Keras itself imports beyond JAX, NumPy and ml_dtypes (each checked with the module hidden). Keras and
# keras-hub are always unpacked (their versions decide the step); the rest only where the machine lacks them.
PINNED = {"keras-hub": "0.32.0", "keras": "3.15.1", "regex": "2026.11.19", "tokenizers": "0.23.3",
          "optree": "0.20.0", "namex": "0.1.0", "absl-py": "2.5.1", "rich": "15.0.0", "markdown-it-py": "4.3.0",
          "mdurl": "0.1.2", "pygments": "2.21.0", "packaging": "26.4", "typing-extensions": "4.16.0"}
ALWAYS = ("keras", "keras_hub")
MEM_FRACTION = "0.97"

# (preset, tokens or None for an image model, LoRA rank, dtype policy, batch, optimizer). Small and medium
# steps of four text families with cuDNN's flash attention on the card (Llama 3.2, Qwen 2.5) or without it
# (Gemma 2: a logit soft cap; GPT-2: dropout in attention), LoRA and full, and two image families in float32:
# ViT, full and LoRA (whose deviceless plan has no Triton GEMM configuration for the value projection's
# backward pass, and is compiled with cuBLAS for every matrix product: "triton_gemm": false), and Swin. Then
# Gemma 2 2B's LoRA step with its backbone quantized to int8 and to int4 (a seventh item: model.quantize's mode),
# built as Keras loads a quantized model (docs/MESHES.md).
CASES = (
    ("llama3.2_1b", 2048, 4, "bfloat16", 4, "adamw"),
    ("llama3.2_1b", 512, 0, "bfloat16", 2, "adamw"),
    ("qwen2.5_0.5b_en", 4096, 4, "bfloat16", 2, "adamw"),
    ("gemma2_2b_en", 512, 4, "bfloat16", 2, "adamw"),
    ("gpt2_base_en", 1024, 0, "bfloat16", 8, "adamw"),
    ("vit_base_patch16_224_imagenet", None, 0, "float32", 64, "adamw"),
    ("vit_base_patch16_224_imagenet", None, 8, "float32", 64, "adamw"),
    ("swin_tiny_patch4_window7_224", None, 0, "float32", 64, "adamw"),
    ("gemma2_2b_en", 512, 4, "bfloat16", 8, "adamw", "int8"),
    ("gemma2_2b_en", 512, 4, "bfloat16", 8, "adamw", "int4"),
)


def setups() -> list[tuple[Any, Any]]:
    """``CASES`` as (``HubSpec``, ``TrainingConfig``)."""
    from calc.hub import make_hub_spec
    from calc.types import TrainingConfig

    return [(make_hub_spec(preset, seq, lora, dtype, quantize=quantize[0] if quantize else ""),
             TrainingConfig(batch_size=batch, optimizer=opt, device="gpu"))
            for preset, seq, lora, dtype, batch, opt, *quantize in CASES]


def case_id(spec: Any, config: Any) -> str:
    """``llama3.2_1b-seq2048-lora4-bfloat16 b4 adamw``: the hub spec's key (the policy is in it), batch, optimizer."""
    return f"{spec.key} b{config.batch_size} {config.optimizer.value}"


def expected_attention(spec: Any, capability: str) -> str:
    """The attention kernel Keras takes on a card of ``capability`` (docs/KERASHUB.md, "Attention, as the card
    would run it"): "cudnn" (flash attention), "xla" (the scores computed and kept), or "none" (a
    convolutional network)."""
    model = spec.model
    b = model.backbone
    if "num_layers" not in b and "depths" not in b:
        return "none"
    half = spec.dtype in ("bfloat16", "mixed_bfloat16", "mixed_float16")
    head = b.get("head_dim") or (b["hidden_dim"] // b["num_query_heads"] if "num_query_heads" in b else 0)
    major = int(capability.split(".")[0])
    fits = 0 < head <= (256 if major >= 9 else 128)
    calls = model.family in ("Llama3", "Mistral", "Qwen", "Phi3") or (
        model.family in ("Gemma", "Gemma3") and not b.get("attention_logit_soft_cap"))
    return "cudnn" if calls and half and fits and major >= 8 else "xla"


# --- predict (here) -----------------------------------------------------------------------------------------


def predict(gpu: str, save: bool, planned: Path | None = None, replace: bool = False) -> list[dict[str, Any]]:
    """XLA's plan of every case not planned yet (``replace``: of every case) for ``gpu``, printed; with ``save``,
    added to set ``hub_gpu`` of planned.json (``replace``: the set replaced)."""
    from calc.requests import config_to_dict, spec_to_dict
    from calc.xla.cache import read_cached
    from calc.xla.compute import compute_plan, family_request
    from calc.xla.targets import target_for

    target = target_for(gpu)
    entries = []
    before = set() if replace else {c["case"] for c in planned_entries(planned)}
    print(f"{'case':74s} {'plan':>9s} {'weights':>8s} {'temps':>8s} {'attention':>9s} {'compile':>8s}", flush=True)
    for spec, config in setups():
        if case_id(spec, config) in before:
            continue
        started = time.monotonic()
        plan = compute_plan(spec, config, gpu)
        wall = time.monotonic() - started
        _, key = family_request(spec, config, gpu)
        raw = read_cached(key, config.batch_size) or {}
        attention = expected_attention(spec, target.compute_capability)
        entry = {"case": case_id(spec, config), "set": SET, "spec": spec_to_dict(spec),
                 "config": config_to_dict(config), "gpu": gpu, "predicted_peak_bytes": plan.peak_bytes,
                 "plan": {**plan.components(), "trainable_weights": plan.trainable_weights_bytes},
                 "breakdown": plan.breakdown(), "attention": attention,
                 "triton_gemm": raw.get("triton_gemm", True), "versions": plan.versions,
                 "compile_seconds": round(plan.compile_seconds, 1),
                 "drawn_by": f"measure_gpu_hub.py predict --gpu {gpu}"}
        if entry["breakdown"] is None:
            del entry["breakdown"]
        entries.append(entry)
        print(f"{entry['case']:74s} {plan.peak_bytes / GIB:8.2f}G {plan.weights_bytes / GIB:7.2f}G "
              f"{plan.temporaries_bytes / GIB:7.2f}G {attention:>9s} {plan.compile_seconds:7.1f}s"
              f"{'' if wall > 5 else ' (known)'}", flush=True)
    if save:
        save_planned(entries if replace else planned_entries(planned) + entries, planned)
        print(f"{len(entries)} cases -> validation/planned.json (set {SET})")
    return entries


def save_planned(entries: list[dict[str, Any]], path: Path | None = None) -> None:
    """Set ``hub_gpu`` of planned.json becomes ``entries``, where the set was; every other set is kept as it was."""
    from calc.validation.planned import PLANNED, load_planned

    path = path or PLANNED
    cases = load_planned(path)
    at = next((i for i, c in enumerate(cases) if c["set"] == SET), len(cases))
    kept = [c for c in cases if c["set"] != SET]
    at -= sum(1 for c in cases[:at] if c["set"] == SET)
    path.write_text(json.dumps({"cases": kept[:at] + entries + kept[at:]}, indent=1) + "\n")


def planned_entries(path: Path | None = None) -> list[dict[str, Any]]:
    """Set ``hub_gpu`` of planned.json, in its order."""
    from calc.validation.planned import PLANNED, load_planned

    return [c for c in load_planned(path or PLANNED) if c["set"] == SET]


# --- prepare (here) -----------------------------------------------------------------------------------------


def prepare() -> None:
    """The wheels ``measure`` unpacks on the GPU machine, into .gpu/hub (ignored by git): pip's own client."""
    exclude = ROOT / ".git" / "info" / "exclude"
    if exclude.parent.is_dir() and "/.gpu/" not in exclude.read_text().split():
        with open(exclude, "a") as f:
            f.write("/.gpu/\n")
    WHEELS.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux_2_27_x86_64", "--platform", "manylinux_2_17_x86_64",
                    "--platform", "manylinux2014_x86_64", "-d", str(WHEELS),
                    *(f"{name}=={version}" for name, version in PINNED.items())], check=True)
    total = 0
    for wheel in sorted(WHEELS.glob("*.whl")):
        total += wheel.stat().st_size
        print(f"{wheel.stat().st_size / 2**20:6.2f} MiB  {wheel.name}")
    print(f"{total / 2**20:6.2f} MiB in .gpu/hub: carry it (run's carry: [\".gpu/hub\"])")


def _top_level(wheel: zipfile.ZipFile) -> set[str]:
    """The importable names a wheel installs (its first path components, less its metadata)."""
    names = {n.split("/")[0] for n in wheel.namelist()}
    return {n.removesuffix(".py") for n in names if not n.endswith((".dist-info", ".data"))}


def carried_site() -> str | None:
    """Unpacks the carried wheels a child needs into ``SITE`` (Keras and keras-hub always, the others where this
    Python cannot import them); the folder for the children's path, or None without wheels."""
    import importlib.util

    wheels = sorted(WHEELS.glob("*.whl"))
    if not wheels:
        return None
    SITE.mkdir(parents=True, exist_ok=True)
    for path in wheels:
        with zipfile.ZipFile(path) as wheel:
            names = _top_level(wheel)
            if names & set(ALWAYS) or not all(importlib.util.find_spec(n) for n in names):
                wheel.extractall(SITE)
                print(f"unpacked {path.name} ({', '.join(sorted(names))})", flush=True)
    return str(SITE)


# --- measure (the GPU machine; --dry-run here) --------------------------------------------------------------

CHILD = r'''
import json, os, sys, time
from contextlib import nullcontext
raw = json.loads(sys.argv[1])
from calc.keras.step import print_stage
t0 = time.perf_counter()
def phase(what):  # a child stopped at its limit says how far it came
    print_stage(t0, what)
import numpy as np
import jax, keras, keras_hub
import calc.keras.hub as hub
from calc.requests import config_from_dict, plan_spec_from_dict
spec, config = plan_spec_from_dict(raw["spec"]), config_from_dict(raw["config"])
batch, sequence = raw.get("batch", config.batch_size), raw.get("sequence", spec.sequence_length)
# Real random weights, as a user builds the task: the plan's deferred variables become real ones.
hub._deferred = nullcontext
attention = {}  # which kernel each call of jax.nn.dot_product_attention took (Keras tries cudnn, then xla)
_dpa = jax.nn.dot_product_attention
def _recorded(*args, implementation=None, **kwargs):
    try:
        out = _dpa(*args, implementation=implementation, **kwargs)
    except Exception:
        attention[f"{implementation} refused"] = attention.get(f"{implementation} refused", 0) + 1
        raise
    attention[str(implementation)] = attention.get(str(implementation), 0) + 1
    return out
jax.nn.dot_product_attention = _recorded
device = jax.devices()[0]
def stats():
    return device.memory_stats() or {}  # None on a CPU
task = hub.hub_training_model(spec, config)
built = stats()
phase(f"task built: {task.count_params():,} parameters")
x, y, w = hub.batch_structure(task, batch, max(1, sequence))
rng = np.random.default_rng(0)
vocabulary = spec.model.backbone.get("vocabulary_size", 2)
def fill(name, s):  # token ids below the vocabulary, masks of ones, images in [0, 1)
    if s.dtype == bool or "mask" in name:
        return np.ones(s.shape, s.dtype)
    if np.issubdtype(s.dtype, np.integer):
        return rng.integers(0, vocabulary if "token" in name else 2, size=s.shape).astype(s.dtype)
    return rng.random(s.shape, dtype=np.float32).astype(s.dtype)
x = {k: fill(k, s) for k, s in x.items()} if isinstance(x, dict) else fill("", x)
causal = w is not None
y = rng.integers(0, vocabulary if causal else spec.classes, size=y.shape).astype(y.dtype)
w = None if w is None else np.ones(w.shape, w.dtype)
phase(f"inputs made, batch {batch}" + (f", {sequence} tokens" if sequence else ""))
loss_1 = task.train_on_batch(x, y, sample_weight=w)
first = stats()
phase("first step done (traced, compiled, run)")
before = first.get("bytes_in_use")
loss_2 = task.train_on_batch(x, y, sample_weight=w)
phase("second step done")
after = stats()
def number(v):
    v = v[0] if isinstance(v, (list, tuple)) else v
    return float(v)
def version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return "?"
try:
    from jax._src.cudnn.fused_attention_stablehlo import check_cudnn_version
    cudnn = check_cudnn_version()
except Exception as exc:
    cudnn = f"none ({type(exc).__name__})"
print("RESULT", json.dumps({
    "peak_bytes": after.get("peak_bytes_in_use"), "resident_before_step_bytes": before,
    "bytes_in_use_after_bytes": after.get("bytes_in_use"), "first_step_peak_bytes": first.get("peak_bytes_in_use"),
    "build_peak_bytes": built.get("peak_bytes_in_use"), "build_bytes_in_use": built.get("bytes_in_use"),
    "bytes_limit": after.get("bytes_limit"), "seconds": round(time.perf_counter() - t0, 1),
    "iterations": int(keras.ops.convert_to_numpy(task.optimizer.iterations)), "loss": [number(loss_1), number(loss_2)],
    "trainable_params": int(sum(np.prod(v.shape) for v in task.trainable_variables)),
    "params": int(task.backbone.count_params()), "attention": attention, "batch": batch, "sequence": sequence,
    "device": device.device_kind, "platform": device.platform,
    "compute_capability": getattr(device, "compute_capability", None), "cudnn": cudnn,
    "xla_flags": os.environ.get("XLA_FLAGS", ""), "python": sys.version.split()[0],
    "jax": jax.__version__, "jaxlib": version("jaxlib"), "keras": keras.__version__,
    "keras_hub": keras_hub.__version__}))
'''

OOM_MARKS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "OOM")


def _last_stage(stderr: str) -> str:
    stages = [line for line in stderr.splitlines() if line.startswith("measure:")]  # calc.keras.step.STAGE_PREFIX
    return stages[-1] if stages else "none printed"


def _error_line(stderr: str) -> str:
    """The line that says why a child failed: the out-of-memory one where there is one, else its last."""
    lines = [line for line in stderr.strip().splitlines() if line.strip() and not line.startswith("measure:")]
    marked = [line for line in lines if any(m in line for m in OOM_MARKS)]
    return ((marked or lines or ["no output"])[-1]).strip()[:400]


def measure_one(case: dict[str, Any], timeout_s: float, env: dict[str, str]) -> dict[str, Any]:
    """One case in a fresh child: its RESULT, or its error (``oom`` where it ran out of memory)."""
    head = {k: case[k] for k in ("case", "spec", "config", "gpu") if k in case}
    flags = ["-S"] if sys.flags.no_site else []  # a check run without site-packages keeps the children without
    try:
        out = subprocess.run([sys.executable, *flags, "-c", CHILD, json.dumps(case)], capture_output=True, text=True,
                             timeout=timeout_s, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return {**head, "error": f"ran past {timeout_s:.0f} s; last stage: {_last_stage(stderr)}", "oom": False}
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        error = _error_line(out.stderr)
        oom = any(m in out.stderr for m in OOM_MARKS)
        return {**head, "error": f"{error} (last stage: {_last_stage(out.stderr)})", "oom": oom}
    return {**head, **json.loads(lines[-1][7:])}


def child_env(site: str | None, dry_run: bool, no_autotune: bool) -> dict[str, str]:
    path = [p for p in (site, str(ROOT), os.environ.get("PYTHONPATH")) if p]
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_PYTHON_CLIENT_PREALLOCATE="false",
               XLA_PYTHON_CLIENT_MEM_FRACTION=MEM_FRACTION, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=":".join(path))
    if dry_run:
        env["JAX_PLATFORMS"] = "cpu"
    if no_autotune:  # XLA's autotuner tries kernels with their own buffers while it compiles; they count in the peak
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()
    return env


def dump_folder(case: str) -> str:
    """The folder a case's dump goes into, as ``tools/gpu_tf/xla_dumps.py`` keys its summary (as
    ``measure_gpu_tf.dump_folder`` names a TensorFlow step's)."""
    return "".join(ch if ch.isalnum() else "_" for ch in case)


def dump_env(env: dict[str, str], dump_root: Path | None, case: str) -> dict[str, str]:
    """``env`` with XLA writing the case's compiled modules with their buffer assignments into a folder of its
    own under ``dump_root`` (``tools/gpu_tf/xla_dumps.py`` reads them); ``env`` itself without one."""
    if dump_root is None:
        return env
    folder = dump_root / dump_folder(case)
    return {**env, "XLA_FLAGS": f"{env.get('XLA_FLAGS', '')} --xla_dump_to={folder} --xla_dump_hlo_as_proto".strip()}


def measure(path: str, deadline_s: float, only: list[str], dry_run: bool = False, no_autotune: bool = False,
            jobs: int = 1, planned: Path | None = None, dump_root: Path | None = None) -> list[dict[str, Any]]:
    """Every ``hub_gpu`` case (or those whose id holds one of ``only``), smallest plan first, ``jobs`` children
    at once (each its own process and allocator, so its own peak; the card holds the largest three together
    several times over), the file saved as each ends; none starts after ``deadline_s``.

    ``dry_run``: on this machine's CPU, at batch 1 and at most 16 tokens, to run the child's code."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    started = time.monotonic()
    todo = sorted((c for c in planned_entries(planned) if not only or any(s in c["case"] for s in only)),
                  key=lambda c: c["predicted_peak_bytes"])
    if not todo:
        raise SystemExit(f"no case of set {SET} in validation/planned.json matches {only or 'anything'}")
    site = carried_site()
    env = child_env(site, dry_run, no_autotune)
    print(f"{len(todo)} KerasHub steps, {jobs} at a time, allocator {MEM_FRACTION} of the card each; python "
          f"{sys.version.split()[0]}; carried site: {site or 'none (.gpu/hub has no wheel)'}", flush=True)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    environment = {"backend": "jax (XLA)", "set": SET, "dry_run": dry_run, "jobs": jobs,
                   "allocator": f"XLA_PYTHON_CLIENT_MEM_FRACTION={MEM_FRACTION}, no preallocation",
                   "xla_flags": env.get("XLA_FLAGS", ""),
                   "protocol": "KerasHub task with random weights, task.compile(optimizer), 2 train_on_batch, "
                               "peak_bytes_in_use of the process; fresh process per case"}

    def one(entry: dict[str, Any]) -> None:
        left = deadline_s - (time.monotonic() - started)
        if left < 30:
            print(f"SKIPPED {entry['case']} (deadline)", flush=True)
            return
        case = {k: entry[k] for k in ("case", "spec", "config", "gpu")}
        if dry_run:
            case.update(batch=1, sequence=min(16, entry["spec"]["hub"]["sequence_length"]))
        result = measure_one(case, left, dump_env(env, dump_root, entry["case"]))
        if "error" in result:
            shown = f"{'OUT OF MEMORY' if result['oom'] else 'FAILED'}: {result['error']}"
        elif result["peak_bytes"] is None:
            shown = f"ran in {result['seconds']} s (no allocator statistics on {result['platform']})"
        else:
            shown = (f"{result['peak_bytes'] / GIB:.2f} GiB (planned {entry['predicted_peak_bytes'] / GIB:.2f}) in "
                     f"{result['seconds']} s; attention {result['attention']}")
        with lock:
            results.append(result)
            print(f"{entry['case']:74s} {shown}", flush=True)
            Path(path).write_text(json.dumps({"environment": environment, "cases": results}, indent=1) + "\n")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, todo))
    return results


# --- compare (here) -----------------------------------------------------------------------------------------


def rows(data: dict[str, Any], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per planned case: its prediction, the measurement (or why there is none), the plan's error
    (``predicted / measured - 1``: positive where the plan says more than the card held)."""
    measured = {c["case"]: c for c in data.get("cases", [])}
    out = []
    for entry in entries:
        m = measured.get(entry["case"])
        row = {"case": entry["case"], "predicted": entry["predicted_peak_bytes"], "measured": None, "error": None,
               "ran": False, "status": "not measured", "build_peak": None, "attention": entry.get("attention")}
        if m is not None and "error" in m:
            row["status"] = "out of memory" if m.get("oom") else f"failed: {m['error'][:80]}"
        elif m is not None:
            used = sorted(k for k in m.get("attention", {}) if "refused" not in k)
            row.update(ran=True, measured_attention="+".join(used) or "no call")
            if m.get("peak_bytes") is None:
                row["status"] = f"ran at batch {m.get('batch')}, no allocator statistics (dry run)"
            else:
                peak = m["peak_bytes"]
                row.update(measured=peak, error=entry["predicted_peak_bytes"] / peak - 1, status="ran",
                           build_peak=m.get("build_peak_bytes"))
                if m.get("build_peak_bytes") == peak:
                    row["status"] = "ran; peak set by the build"
        out.append(row)
    return out


def compare(path: str, planned: Path | None = None) -> list[dict[str, Any]]:
    data = json.load(open(path))
    table = rows(data, planned_entries(planned))
    print(f"{'case':74s} {'predicted':>10s} {'measured':>10s} {'error':>8s}  attention (plan/card)  step")
    for r in table:
        measured = f"{r['measured'] / GIB:9.2f}G" if r["measured"] is not None else "         -"
        error = f"{r['error'] * 100:+7.1f}%" if r["error"] is not None else "       -"
        attention = f"{r['attention'] or '?'}/{r.get('measured_attention', '-')}"
        print(f"{r['case']:74s} {r['predicted'] / GIB:9.2f}G {measured} {error}  {attention:21s}  {r['status']}")
    errors = [r["error"] for r in table if r["error"] is not None]
    if errors:
        a = sorted(abs(e) for e in errors)
        device = next((c.get("device") for c in data.get("cases", []) if c.get("device")), "?")
        print(f"{len(a)} of {len(table)} steps measured on {device}: the plan is off by a median "
              f"{a[len(a) // 2] * 100:.1f}%, from {min(errors) * 100:+.1f}% to {max(errors) * 100:+.1f}%")
    return table


def logits_bytes(entry: dict[str, Any]) -> int:
    """A causal LM's logits at the case's batch: batch x sequence x vocabulary, in the compute dtype (0 for
    any other model)."""
    from calc.requests import config_from_dict, plan_spec_from_dict

    spec, config = plan_spec_from_dict(entry["spec"]), config_from_dict(entry["config"])
    vocabulary = spec.model.backbone.get("vocabulary_size", 0) if spec.model.task == "causal_lm" else 0
    return config.batch_size * spec.sequence_length * vocabulary * (4 if spec.dtype == "float32" else 2)


def dump_rows(dumps: dict[str, Any], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case with a dump: the temporaries the card's compile (autotuner on) assigned against the plan's,
    and that difference in units of the step's logits (``logits_bytes``).

    With the autotuner on, each LoRA causal LM measured took more than its plan by one buffer of its logits'
    size (docs/KERASHUB.md); the card's own buffer assignment says whether that buffer is in the step."""
    out = []
    for entry in entries:
        summary = dumps.get(dump_folder(entry["case"]))
        if not isinstance(summary, dict) or "temporaries_bytes" not in summary:
            continue
        planned = entry["plan"]["xla_temporaries"]
        extra = summary["temporaries_bytes"] - planned
        logits = logits_bytes(entry)
        out.append({"case": entry["case"], "planned": planned, "card": summary["temporaries_bytes"], "extra": extra,
                    "logits": logits, "in_logits": extra / logits if logits else None})
    return out


def compare_dumps(dumps: dict[str, Any], planned: Path | None = None) -> list[dict[str, Any]]:
    table = dump_rows(dumps, planned_entries(planned))
    print(f"\n{'case':74s} {'plan temp':>10s} {'card temp':>10s} {'extra':>9s} {'logits':>9s}  extra/logits")
    for r in table:
        ratio = f"{r['in_logits']:.3f}" if r["in_logits"] is not None else "-"
        print(f"{r['case']:74s} {r['planned'] / GIB:9.2f}G {r['card'] / GIB:9.2f}G {r['extra'] / 2**20:8.0f}M "
              f"{r['logits'] / 2**20:8.0f}M  {ratio}")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="XLA's plan of each case, here")
    p.add_argument("--gpu", default="h200")
    p.add_argument("--save", action="store_true", help=f"write them into validation/planned.json (set {SET})")
    p.add_argument("--replace", action="store_true", help="plan every case again and replace the set")
    sub.add_parser("prepare", help="download the wheels the GPU machine needs into .gpu/hub")
    m = sub.add_parser("measure", help="measure each case (on the GPU machine)")
    m.add_argument("out")
    m.add_argument("deadline_s", nargs="?", type=float, default=480.0)
    m.add_argument("--only", action="append", default=[], help="the cases whose id holds this (repeatable)")
    m.add_argument("--no-autotune", action="store_true", help="XLA's autotuner off (--xla_gpu_autotune_level=0)")
    m.add_argument("--dry-run", action="store_true", help="on the CPU, batch 1 and at most 16 tokens")
    m.add_argument("--jobs", type=int, default=1, help="children at once (default 1)")
    m.add_argument("--dump-root", type=Path, help="XLA writes each case's compiled modules under this folder")
    c = sub.add_parser("compare", help="the plans on record against a measurement file")
    c.add_argument("out")
    c.add_argument("--dumps", help="tools/gpu_tf/xla_dumps.py's summary of the measured steps' dumps")
    args = parser.parse_args(argv)
    if args.command == "predict":
        predict(args.gpu, args.save, replace=args.replace)
    elif args.command == "prepare":
        prepare()
    elif args.command == "measure":
        measure(args.out, args.deadline_s, args.only, args.dry_run, args.no_autotune, args.jobs,
                dump_root=args.dump_root)
    else:
        compare(args.out)
        if args.dumps:
            compare_dumps(json.loads(Path(args.dumps).read_text()))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # the project is not installed on the GPU machine
    sys.exit(main())
