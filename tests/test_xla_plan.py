"""XLA's plan: targets, the plan's arithmetic, the cache, single flight, the max-batch search.

The pure tests replace the child with a fake runner; the slow ones compile for real (they
need jax, jaxlib, jax-cuda12-plugin and nvidia-cuda-nvcc-cu12, which requirements.txt
installs on Python 3.12, and are skipped where those are missing).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from calc import xla
from calc.catalogue import ModelFile, make_spec
from calc.cli import main
from calc.gpus import GPU_PRESETS
from calc.types import TrainingConfig
from calc.validation import GPU_TF_XLA_DATA, load_measurements
from calc.workers import plans
from calc.xla import cache
from tests.tools import XLA_ATTENTION_TEMP, wait_for

MIB = 2**20


def fake_analysis(batch: int, *, state: int = 3000, per_sample: int = 1_000_000, fixed_temp: int = 50_000) -> dict:
    """A child's answer shaped like XLA's: the state donated (aliased), a batch, temporaries."""
    x = 64 * batch
    return {"argument_bytes": state + x, "output_bytes": state + 8, "alias_bytes": state,
            "temp_bytes": fixed_temp + per_sample * batch, "generated_code_bytes": 0,
            "trainable_bytes": 1000, "non_trainable_bytes": 500, "optimizer_bytes": 1496, "metrics_bytes": 4,
            "batch_bytes": x, "build_seconds": 1.0, "compile_seconds": 2.0, "jax": "0.11.2", "keras": "3.15.1"}


@pytest.fixture
def fake_runner():
    calls = []

    def runner(request):
        calls.append(request)
        time.sleep(0.2)
        return fake_analysis(request["config"]["batch_size"])

    runner.calls = calls
    return runner


@pytest.fixture(autouse=True)
def _own_cache_unless_real(request, tmp_path, monkeypatch):
    """Fake plans never meet real ones: each pure test has a cache of its own."""
    if request.node.get_closest_marker("keras") is None:
        monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path / "cache"))


needs_plan = pytest.mark.skipif(xla.unavailable_reason() is not None,
                                reason=f"no XLA plan here: {xla.unavailable_reason()}")


def test_every_gpu_preset_has_a_target_and_the_custom_size_says_why_not():
    for key, preset in GPU_PRESETS.items():
        target = xla.target_for(key)
        text = target.config_text()
        major, minor = target.compute_capability.split(".")
        assert f"cuda_compute_capability {{ major: {int(major)} minor: {int(minor)} }}" in text
        assert f"core_count: {target.core_count}" in text
        # The card's memory in the target is the card's, within what nvidia-smi and the data sheet differ by.
        assert abs(target.device_memory_size - preset.memory_bytes) / preset.memory_bytes < 0.08, key
    with pytest.raises(xla.PlanError, match="custom size"):
        xla.target_for("custom")


def test_the_plan_is_arguments_plus_temporaries_plus_outputs_less_what_is_aliased():
    raw = fake_analysis(4)
    plan = xla.plan_from_analysis(raw, "t4")
    expected = raw["argument_bytes"] + raw["temp_bytes"] + raw["output_bytes"] - raw["alias_bytes"]
    assert plan.peak_bytes == expected == sum(plan.components().values())
    assert plan.weights_bytes == 1500 and plan.optimizer_state_bytes == 1500
    assert plan.input_batch_bytes == 64 * 4 and plan.temporaries_bytes == raw["temp_bytes"]
    assert plan.outputs_bytes == 8  # the loss and metrics beyond the donated state


def test_a_plan_is_compiled_once_then_read_from_the_disk_cache(fake_runner):
    spec, config = make_spec("MobileNetV2", 96), TrainingConfig(batch_size=8)
    first = xla.compute_plan(spec, config, "t4", runner=fake_runner)
    again = xla.compute_plan(spec, config, "t4", runner=fake_runner)
    assert first == again and len(fake_runner.calls) == 1
    assert xla.cached_plan(spec, config, "t4") == first
    # Anything that changes the plan is another entry: the target, the batch, remat.
    xla.compute_plan(spec, config, "a100-40", runner=fake_runner)
    xla.compute_plan(spec, replace(config, batch_size=9), "t4", runner=fake_runner)
    xla.compute_plan(spec, config, "t4", "full", runner=fake_runner)
    assert len(fake_runner.calls) == 4
    # Presets of one card share a target, so their plans are one entry.
    xla.compute_plan(spec, config, "colab-t4", runner=fake_runner)
    assert len(fake_runner.calls) == 4


def test_the_per_device_batch_is_compiled_and_the_family_key_names_the_versions_not_the_batch(fake_runner):
    spec = make_spec("MobileNetV2", 96)
    request = cache.plan_request(spec, TrainingConfig(batch_size=32, num_gpus=4), xla.target_for("t4"))
    # Four replicas are a 4x1 mesh: its global batch, 8 a card, compiled on four cards (tests/test_mesh.py).
    assert request["config"]["batch_size"] == 32 and request["config"]["num_gpus"] == 4
    assert cache.request_batch(request) == 8
    one_card = cache.plan_request(spec, TrainingConfig(batch_size=8), xla.target_for("t4"))
    assert cache.family_key(request, {}) != cache.family_key(one_card, {})
    key = cache.family_key(request, {"jax": "0.11.2", "keras": "3.15.1"})
    assert key != cache.family_key(request, {"jax": "0.12.0", "keras": "3.15.1"})
    assert key == cache.family_key(cache.at_batch(request, 99), {"jax": "0.11.2", "keras": "3.15.1"})
    assert key != cache.family_key(cache.plan_request(spec, TrainingConfig(), xla.target_for("l4")),
                                   {"jax": "0.11.2", "keras": "3.15.1"})
    with pytest.raises(xla.PlanError, match="remat must be one of"):
        cache.plan_request(spec, TrainingConfig(), xla.target_for("t4"), "sometimes")


def test_xla_flags_that_reach_the_compiler_keep_their_plans_apart(monkeypatch):
    spec, versions = make_spec("MobileNetV2", 96), {"jax": "0.11.2", "keras": "3.15.1"}
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    plain = cache.plan_request(spec, TrainingConfig(), xla.target_for("t4"))
    assert "xla_flags" not in plain  # no flags: the key shipped plans were written under
    monkeypatch.setenv("XLA_FLAGS", "  --xla_gpu_memory_limit_slop_factor=8 ")
    scaled = cache.plan_request(spec, TrainingConfig(), xla.target_for("t4"))
    assert scaled["xla_flags"] == "--xla_gpu_memory_limit_slop_factor=8"
    assert cache.family_key(scaled, versions) != cache.family_key(plain, versions)


def test_a_disk_that_refuses_plans_costs_no_compile_twice_in_this_process(fake_runner, tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("CALC_CACHE_DIR", str(blocked))
    spec, config = make_spec("MobileNetV2", 96), TrainingConfig(batch_size=8)
    first = xla.compute_plan(spec, config, "t4", runner=fake_runner)
    assert xla.compute_plan(spec, config, "t4", runner=fake_runner) == first and len(fake_runner.calls) == 1
    assert xla.known_plans(spec, config, "t4").plans == {8: first}


def test_identical_requests_at_once_compile_once(fake_runner):
    spec, config = make_spec("ResNet50", 128), TrainingConfig(batch_size=4)
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        xla.compute_plan(spec, config, "l4", runner=fake_runner).peak_bytes)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(fake_runner.calls) == 1 and len(set(results)) == 1 and len(results) == 4


def test_a_second_compile_waits_for_the_first_on_this_machine():
    spec = make_spec("ResNet50", 96)
    running, overlaps = [], []

    def runner(request):
        overlaps.append(len(running))
        running.append(1)
        time.sleep(0.3)
        running.pop()
        return fake_analysis(request["config"]["batch_size"])

    threads = [threading.Thread(target=xla.compute_plan, args=(spec, TrainingConfig(batch_size=b), "t4"),
                                kwargs={"runner": runner}) for b in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [0, 0, 0]


def test_a_process_that_compiles_in_a_row_hands_the_machine_to_one_that_waits():
    """Without the hand-over, the next compile of a tool that compiles one plan after another takes the
    machine's lock again before a waiter tries (every 0.2 s), and the waiter starves."""
    order = []

    def runner(request):
        order.append(request["config"]["batch_size"])
        time.sleep(0.3)
        return fake_analysis(request["config"]["batch_size"])

    def in_a_row():
        for b in (1, 2, 3, 4, 5):
            xla.compute_plan(make_spec("ResNet50", 64), TrainingConfig(batch_size=b), "t4", runner=runner)

    row = threading.Thread(target=in_a_row)
    row.start()
    wait_for(lambda: bool(order))
    xla.compute_plan(make_spec("MobileNetV2", 64), TrainingConfig(batch_size=99), "t4", runner=runner)
    row.join()
    assert order.index(99) <= 2  # right after the compile it waited for, or the one after


def test_a_child_that_ends_without_an_answer_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr("sys.executable", "/bin/sleep")
    monkeypatch.setattr(plans, "plan_env", lambda dump=None: {})
    # `/bin/sleep -m calc.workers.child plan-xla` fails at once: an answer-less child is a one-line error.
    with pytest.raises(xla.PlanError, match="the compile failed"):
        plans.compile_plan({"x": 1}, timeout_s=5)


def test_the_time_limit_stops_a_child_that_hangs(monkeypatch, tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr("subprocess.Popen", _popen_running(str(script)))
    started = time.monotonic()
    with pytest.raises(xla.PlanError, match="ran past 1 s"):
        plans.compile_plan({}, timeout_s=1)
    assert time.monotonic() - started < 10


def test_the_memory_budget_stops_a_child_that_grows(monkeypatch, tmp_path):
    script = tmp_path / "grow.py"
    script.write_text("import time\nblock = bytearray(300 * 2**20)\ntime.sleep(60)\n")
    monkeypatch.setattr("subprocess.Popen", _popen_running(str(script)))
    with pytest.raises(xla.PlanError, match="memory budget of 0.1 GiB"):
        plans.compile_plan({}, timeout_s=30, max_rss_bytes=100 * MIB)


def _popen_running(script: str):
    import subprocess
    import sys

    real = subprocess.Popen

    def popen(args, **kwargs):
        return real([sys.executable, script], **kwargs)

    return popen


class FakeWorker:
    """The shared compile worker, answering by formula (``fake_analysis``)."""

    def __init__(self):
        self.calls = []

    def compile(self, request, **_):
        self.calls.append(request["config"]["batch_size"])
        return fake_analysis(request["config"]["batch_size"])


@pytest.fixture
def fake_worker(monkeypatch):
    worker = FakeWorker()
    monkeypatch.setattr(cache, "unavailable_reason", lambda: None)
    monkeypatch.setattr(cache, "plan_versions", lambda: {"jax": "test"})
    monkeypatch.setattr(xla.compute, "run_plan", lambda request, key, **_: worker.compile(request))
    return worker


@pytest.mark.keras
def test_cli_estimate_with_a_gpu_preset_prints_the_plan(fake_worker, capsys):
    assert main(["estimate", "--model", "MobileNetV2", "--image-size", "96", "--batch-size", "16", "--gpu", "t4",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    raw = fake_analysis(16)
    assert out["step"] == "xla" and out["target"] == "t4"
    assert out["peak_bytes"] == raw["argument_bytes"] + raw["temp_bytes"] + raw["output_bytes"] - raw["alias_bytes"]
    assert out["peak_bytes"] == sum(out["components"].values())
    assert main(["estimate", "--model", "MobileNetV2", "--image-size", "96", "--batch-size", "16", "--gpu", "t4"]) == 0
    assert "XLA's plan of the step Keras compiles on Tesla T4 16 GB, jit_compile=True" in capsys.readouterr().out


@pytest.mark.keras
def test_cli_max_batch_with_the_plan_says_how_many_plans_it_took(fake_worker, capsys):
    from calc.validation.margins import plan_margin

    assert main(["max-batch", "--model", "MobileNetV2", "--image-size", "96", "--gpu", "t4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    t4 = GPU_PRESETS["t4"]
    # The margin: 0 asked, but the plan's measured record keeps its residual share.
    usable = int(t4.memory_bytes * (1 - plan_margin().fraction)) - t4.overhead_bytes
    # fake_analysis: peak = 3000 + 64 b + 50,000 + 1,000,000 b + 8; beside it, each sample's largest convolution:
    # MobileNetV2's block_1_depthwise, 113x113x96 in (zero-padded for its stride) and 56x56x96 out at 224 px,
    # scaled up to whole elements at 96 px, in float32.
    kept = -(-(113 * 113 * 96 + 56 * 56 * 96) * 96 * 96 // (224 * 224)) * 4
    brute = (usable - 53_008) // (1_000_064 + kept)
    assert brute - xla.settle_width(brute) <= out["max_batch_size"] <= brute
    assert out["step"] == "xla" and out["compiles"] == len(out["compiled"]) >= 2
    assert out["settled"] is True and out["margin"] == pytest.approx(plan_margin().fraction)
    sizes = {c["per_device_batch"]: c["fits"] for c in out["compiled"]}
    assert sizes[out["max_batch_size"]] is True and sizes[out["exceeds"]] is False
    assert out["exceeds"] - out["max_batch_size"] <= xla.settle_width(out["max_batch_size"])


@pytest.mark.keras
def test_cli_falls_back_to_the_walk_with_one_line_when_no_plan_can_be_made(monkeypatch, capsys):
    monkeypatch.setattr(cache, "unavailable_reason", lambda: "the XLA plan needs jax (pip install -r requirements.txt)")
    assert main(["estimate", "--model", "MobileNetV2", "--image-size", "96", "--gpu", "t4", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["step"] == "graph" and out["xla_unavailable"].startswith("the XLA plan needs jax")
    assert captured.err.count("\n") == 1 and "showing the graph-executor walk instead" in captured.err
    # A custom size names no card: the walk, and why.
    assert main(["estimate", "--model", "MobileNetV2", "--image-size", "96", "--memory-gib", "12", "--step", "xla",
                 "--json"]) == 0
    assert "custom size" in json.loads(capsys.readouterr().out)["xla_unavailable"]


def test_remat_asks_for_the_plan():
    assert main(["estimate", "--model", "MobileNetV2", "--remat", "full"]) == 2


# --- real compiles -----------------------------------------------------------------------


def _measured(case: str) -> int:
    return next(c["peak_bytes"] for c in load_measurements(GPU_TF_XLA_DATA)["cases"] if c["case"] == case)


@needs_plan
@pytest.mark.keras
def test_resnet50_on_an_h100_is_within_5_percent_of_tensorflows_xla_step(capsys):
    assert main(["estimate", "--model", "ResNet50", "--batch-size", "16", "--optimizer", "adam", "--gpu", "h100-80",
                 "--step", "xla", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    measured = _measured("ResNet50-224x224x3-top1000 b16 adam float32")
    assert out["peak_bytes"] == sum(out["components"].values())
    assert abs(out["peak_bytes"] / measured - 1) <= 0.05


@needs_plan
@pytest.mark.keras
def test_a_fresh_compile_gives_the_shipped_plan_to_the_byte():
    """The shipped plans are what this environment compiles: none is stale (the quickest of
    them to build and compile, 12.5 s when it was shipped)."""
    shipped = cache.shipped_plans()
    assert shipped, "no shipped plans"
    spec = make_spec("MobileNet", 224, include_top=False)
    config = TrainingConfig(batch_size=16, optimizer="adam", precision="mixed_bfloat16",
                            train_mode="frozen_backbone", device="gpu")
    request = cache.plan_request(spec, config, xla.target_for("h100-80"))
    key = cache.family_key(request, xla.plan_versions())
    assert 16 in shipped.get(key, {})
    fresh = plans.compile_plan(request)
    assert {k: fresh[k] for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes")} == \
        {k: shipped[key][16][k] for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes")}


@needs_plan
def test_the_landing_links_shipped_plan_says_what_fills_its_peak():
    """The landing page (ResNet50 224, b32, Adam, T4) splits XLA's peak without a compile: the shipped
    plan at the curve's first batch keeps its explanation, its largest layers named."""
    config = TrainingConfig(batch_size=32, optimizer="adam", device="gpu")
    plan = xla.known_plans(make_spec("ResNet50", 224), config, "t4").plans[32]
    assert plan.explained is not None and sum(plan.breakdown().values()) == plan.peak_bytes
    assert len(plan.explained.layers) == cache.SHIPPED_LAYERS + 1 and plan.explained.layers[-1][0] == "(other layers)"


# A small convolutional network saved as a file: a compile of its step takes seconds.
SMALL_CNN = ModelFile("calc/data/models/plain_cnn.keras")


@needs_plan
@pytest.mark.keras
def test_a_real_plan_holds_the_state_grows_with_the_batch_and_remat_moves_only_the_step():
    """Three compiles of one small network: batches 2 and 8, and 8 under full RematScope,
    which changes what the step keeps, not the model's variables (the direction is what the
    plan answers: docs/notes/gpu-and-xla.md)."""
    from calc.profiles import get_profile

    input_shape = get_profile(SMALL_CNN).input_shape
    small, large = (xla.compute_plan(SMALL_CNN, TrainingConfig(batch_size=b, optimizer="sgd", device="gpu"), "t4")
                    for b in (2, 8))
    for plan in (small, large):
        assert plan.peak_bytes == sum(plan.components().values())
        # SGD without momentum keeps no slot: the optimizer's state is its two scalars and the metrics'.
        assert plan.optimizer_state_bytes < 1024
        assert plan.input_batch_bytes == plan_batch_bytes(plan, input_shape)
    assert small.weights_bytes == large.weights_bytes
    assert large.temporaries_bytes > small.temporaries_bytes and large.peak_bytes > small.peak_bytes
    remat = xla.compute_plan(SMALL_CNN, TrainingConfig(batch_size=8, optimizer="sgd", device="gpu"), "t4", "full")
    assert remat.remat == "full" and remat.peak_bytes == sum(remat.components().values())
    assert (remat.weights_bytes, remat.optimizer_state_bytes, remat.input_batch_bytes) == \
        (large.weights_bytes, large.optimizer_state_bytes, large.input_batch_bytes)
    assert remat.temporaries_bytes != large.temporaries_bytes


@pytest.fixture(scope="module")
def plan_worker():
    """A plan worker of this host's own cluster (a process under its nanny), as the server and the command line
    start it; ``compile(request)`` waits for its answer."""
    from calc.cluster.engine import Engine
    from calc.cluster.worker import plan

    engine = Engine(None, {"plan": 1})
    keys = iter(range(10**6))

    def compile_(request, timeout_s=600):
        future = engine.submit(plan, request, key=f"plan-test-{next(keys)}", kind="plan", priority=0)
        return future.result(timeout=timeout_s)

    yield SimpleNamespace(engine=engine, compile=compile_, pids=lambda: set(engine.client.run(os.getpid).values()))
    engine.close()


@needs_plan
@pytest.mark.keras
def test_a_worker_that_keeps_the_model_plans_to_the_byte_what_a_fresh_child_plans(plan_worker):
    """The warm worker builds the model once; its plan of a further batch and card is a fresh child's. A compile
    nobody waits for any more is stopped halfway: its future released, its worker restarted."""
    from calc.cluster.worker import plan

    config = TrainingConfig(batch_size=2, optimizer="adam", device="gpu")
    first = plan_worker.compile(cache.plan_request(SMALL_CNN, config, xla.target_for("t4")))
    pids = plan_worker.pids()
    later = cache.plan_request(SMALL_CNN, replace(config, batch_size=8), xla.target_for("a100-40"))
    warm = plan_worker.compile(later)
    assert first["warm"] is False and warm["warm"] is True and plan_worker.pids() == pids
    fresh = plans.compile_plan(later)
    fields = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes")
    assert {k: warm[k] for k in fields} == {k: fresh[k] for k in fields}
    engine = plan_worker.engine
    other = cache.plan_request(ModelFile("calc/data/models/mnist_cnn.keras"), config, xla.target_for("t4"))
    future = engine.submit(plan, other, key="plan-test-unwanted", kind="plan", priority=0)
    wait_for(lambda: "plan-test-unwanted" in engine.running(), timeout_s=60)
    started = time.monotonic()
    future.release()
    wait_for(lambda: engine.running().get("plan-test-unwanted", SimpleNamespace(state="")).state == "cancelled",
             timeout_s=5)
    engine.restart([engine.running()["plan-test-unwanted"].worker])
    assert time.monotonic() - started < 30 and "plan-test-unwanted" not in engine.running()
    assert not plan_worker.pids() & pids


@needs_plan
@pytest.mark.keras
def test_a_plan_with_xlas_full_code_generation_is_the_plan_to_the_byte(tmp_path, plan_worker):
    """The plans' compiles skip XLA's machine code (calc.keras.codegen): they stop before the first
    kernel, where XLA has dumped the assignment; should one go on, no LLVM optimisation, and an
    assembler stand-in that answers the version as the real one and writes an empty file for a
    kernel. The plan XLA assigns, and what fills its peak, are the same with XLA's full code
    generation, on two compute capabilities."""
    import subprocess

    from calc.keras.codegen import STOP_MARK, compiler_options, cuda_root, stopping_cache, unassembled_cuda_root

    real, stand_in = cuda_root(), unassembled_cuda_root()
    assert real is not None and stand_in is not None
    unoptimised = {"xla_backend_optimization_level": 0, "xla_gpu_cuda_data_dir": stand_in}
    assert compiler_options("unoptimised") == unoptimised
    assert compiler_options() == {**unoptimised, "xla_gpu_kernel_cache_file": stopping_cache()}
    assert compiler_options("full") == {}
    assert STOP_MARK.encode() in Path(stopping_cache()).read_bytes()
    version = [subprocess.run([f"{root}/bin/ptxas", "--version"], capture_output=True, text=True, check=True).stdout
               for root in (real, stand_in)]
    assert version[0] == version[1] and "Cuda compilation tools" in version[0]
    (tmp_path / "k.ptx").write_text(".version 8.0\n.target sm_75\n.address_size 64\n")
    subprocess.run([f"{stand_in}/bin/ptxas", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin"),
                    "-arch=sm_75"], check=True)
    assert (tmp_path / "k.cubin").read_bytes() == b""

    config = TrainingConfig(batch_size=4, optimizer="adam", device="gpu")
    fields = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "batch_bytes", "peak")
    for gpu in ("t4", "h100-80"):
        request = cache.plan_request(SMALL_CNN, config, xla.target_for(gpu))
        planned, full = plan_worker.compile(request), plan_worker.compile({**request, "codegen": "full"})
        assert planned["kernels_emitted"] is False and full["kernels_emitted"] is True, gpu
        assert "peak" in planned and {k: planned[k] for k in fields} == {k: full[k] for k in fields}, gpu
    with pytest.raises(xla.PlanError, match="unknown code generation"):
        plan_worker.compile({**request, "codegen": "some"})


@needs_plan
@pytest.mark.keras
def test_where_the_stand_in_assembler_cannot_run_xla_assembles(monkeypatch):
    """A temporary folder mounted noexec would leave XLA no assembler it can run: the plan's
    compile then keeps the real one (no folder option; LLVM still unoptimised), rather than
    failing every compile."""
    from calc.keras import codegen

    def noexec(*args, **kwargs):
        raise PermissionError(13, "Permission denied", args[0][0])

    codegen.unassembled_cuda_root.cache_clear()
    monkeypatch.setattr(codegen.subprocess, "run", noexec)
    try:
        assert codegen.compiler_options("unoptimised") == {"xla_backend_optimization_level": 0}
        assert codegen.compiler_options("full") == {}
    finally:
        codegen.unassembled_cuda_root.cache_clear()
    monkeypatch.undo()
    assert codegen.compiler_options()["xla_gpu_cuda_data_dir"] == codegen.unassembled_cuda_root()


def plan_batch_bytes(plan, input_shape) -> int:
    batch = plan.input_batch_bytes // (4 * (math.prod(input_shape) + 1))
    return batch * 4 * (math.prod(input_shape) + 1)  # float32 images and int32 labels


@needs_plan
@pytest.mark.keras
def test_every_compute_capability_compiles():
    """One small step per distinct compute capability: each target is one XLA accepts.

    The requests go to one plan child in turn (it serves one request a line), so the
    interpreter and JAX start once; each answer is read as ``compute_plan`` reads it.
    """
    from calc.workers.protocol import Child, child_command

    mlp = ModelFile("calc/data/models/mlp.keras")
    config = TrainingConfig(batch_size=2, optimizer="sgd", device="gpu")
    targets = {}
    for key, target in xla.gpu_targets().items():
        targets.setdefault(target.compute_capability, target)
    assert len(targets) >= 8
    child = Child(child_command("plan-xla"), plans.plan_env())
    try:
        for capability, target in targets.items():
            reply = child.ask(cache.plan_request(mlp, config, target, ""), timeout_s=300)
            assert reply.refusal is None and not reply.failure, (capability, reply, child.tail(5))
            plan = xla.plan_from_analysis(reply.answer, target.key, "")
            assert plan.peak_bytes == sum(plan.components().values()) and plan.temporaries_bytes > 0, capability
    finally:
        child.close()


@needs_plan
@pytest.mark.keras
def test_a_saved_file_is_planned_with_its_own_weights(capsys):
    from pathlib import Path

    from calc.uploads import profile_upload

    path = Path(__file__).parent.parent / "calc" / "data" / "models" / "mnist_cnn.keras"
    assert main(["estimate", "--file", str(path), "--batch-size", "32", "--optimizer", "adam", "--gpu", "t4",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    profile = profile_upload(path.read_bytes(), path.name)
    assert out["step"] == "xla" and out["peak_bytes"] == sum(out["components"].values())
    # float32 variables, and each Dropout's seed generator state (two uint32).
    assert 4 * profile.total_params <= out["components"]["weights"] <= 4 * profile.total_params + 64
    # Adam: two slots a trainable parameter, and its iteration count and learning rate.
    assert 8 * profile.trainable_params <= out["components"]["optimizer_state"] <= 8 * profile.trainable_params + 64


@needs_plan
@pytest.mark.keras
def test_what_fills_a_small_networks_peak_is_what_its_backward_pass_needs_by_hand(tmp_path, monkeypatch):
    """256 inputs -> Dense 2048 (relu, "wide") -> Dense 10 ("head"), SGD, batches 64 and 128.

    XLA's temporaries peak in wide's backward pass, as its weight gradient is made: dW = x^T dZ,
    2048 x 256 floats (2 MiB whatever the batch), from dZ, the gradient of wide's output (batch x
    2048 floats), with the input batch itself (an argument) as x. Nothing of the forward pass is
    needed any more, so no activation is live; cuBLAS's workspace is the rest of the block."""
    import keras

    monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path / "cache"))
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(2048, activation="relu", name="wide"),
                              keras.layers.Dense(10, name="head")])
    model.save(tmp_path / "wide.keras")
    for batch in (64, 128):
        plan = xla.compute_plan(ModelFile(str(tmp_path / "wide.keras")),
                                TrainingConfig(batch_size=batch, optimizer="sgd", device="gpu"), "t4", explained=True)
        kinds, explained = plan.breakdown(), plan.explained
        assert kinds is not None and explained is not None
        assert sum(kinds.values()) == plan.peak_bytes  # every byte in one kind
        assert kinds["weights"] == 4 * (256 * 2048 + 2048 + 2048 * 10 + 10)
        assert kinds["input_batch"] == 4 * batch * 256 + 4 * batch  # the features and the labels
        assert kinds["gradients"] == 4 * 2048 * 256 + 4 * batch * 2048
        assert kinds["activations"] == 0 and kinds["workspace"] > 0
        assert (explained.moment_layer, explained.moment_phase) == ("wide", "backward")
        assert dict(dict(explained.layers)["wide"])["gradients"] == kinds["gradients"]


@pytest.mark.keras
def test_an_own_model_with_attention_plans_flash_attention_on_an_ampere_card(tmp_path):
    """A file with MultiHeadAttention (4 heads of 64, no dropout) over 1,024 tokens, in mixed_bfloat16,
    batch 4, on an L4: Keras takes cuDNN's flash attention there, so the plan holds at least the four
    heads' bfloat16 probabilities (4 x 4 x 1024 x 1024 x 2 B) less than the same step with XLA's
    attention (cuDNN reported missing). A convolutional file asks the device nothing."""
    import subprocess
    import sys

    from calc.workers.plans import plan_env

    code = XLA_ATTENTION_TEMP + f"""
import json, keras
from calc.catalogue import ModelFile
from calc.keras.plan import PlanModel
from calc.types import TrainingConfig
from calc.xla.targets import target_for
x = keras.Input((1024, 256))
y = keras.layers.MultiHeadAttention(4, 64)(x, x)
model = keras.Model(x, keras.layers.Dense(10)(keras.layers.GlobalAveragePooling1D()(y)))
model.save("{tmp_path}/attention.keras")
config = TrainingConfig(batch_size=4, precision="mixed_bfloat16", device="gpu")
plan = PlanModel(ModelFile("{tmp_path}/attention.keras"), config)
card = target_for("l4").config_text()
flash = plan.plan(4, card)["temp_bytes"]
plain = xla_attention_temp(plan, 4, card)
cnn = PlanModel(ModelFile("calc/data/models/mnist_cnn.keras"), TrainingConfig(batch_size=4, device="gpu"))
print(json.dumps([plan.asks_the_device, cnn.asks_the_device, flash, plain]))
"""
    done = subprocess.run([sys.executable, "-c", code], env=plan_env(), capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    asks, cnn_asks, flash, plain = json.loads(done.stdout.strip().splitlines()[-1])
    assert asks and not cnn_asks
    assert plain - flash >= 4 * 4 * 1024 * 1024 * 2, (flash, plain)


@pytest.mark.keras
def test_a_step_xla_has_no_gemm_configuration_for_is_compiled_again_with_cublas(tmp_path):
    """XLA without a device refuses some GEMM fusions it has no default configuration for (Gemma 2 2B at
    32 x 280 tokens on an L4); the plan compiles that step again with cuBLAS for every matrix product and
    says so. Here the refusal is made to happen on a small file's first compile; the second stops
    where XLA has dumped its assignment, as a plan's compile does."""
    import subprocess
    import sys

    from calc.workers.plans import plan_env

    code = """
import json
from jax._src import stages
from calc.catalogue import ModelFile
from calc.keras.plan import NO_GEMM_CONFIG, PlanModel
from calc.types import TrainingConfig
from calc.xla.targets import target_for
compile = stages.Lowered.compile
calls = []
def refusing(self, compiler_options=None, **kwargs):
    calls.append(compiler_options)
    if "xla_gpu_enable_triton_gemm" not in compiler_options:
        raise RuntimeError("INTERNAL: Failed to get configs for: 1 out of 3 instructions. " + NO_GEMM_CONFIG + " for HLO")
    return compile(self, compiler_options=compiler_options, **kwargs)
stages.Lowered.compile = refusing
plan = PlanModel(ModelFile("calc/data/models/mlp.keras"), TrainingConfig(batch_size=8, device="gpu"))
raw = plan.plan(8, target_for("l4").config_text())
print(json.dumps([calls, raw.get("triton_gemm"), raw["temp_bytes"] > 0, raw["kernels_emitted"]]))
"""
    done = subprocess.run([sys.executable, "-c", code], env=plan_env(str(tmp_path)), capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    calls, triton, planned, emitted = json.loads(done.stdout.strip().splitlines()[-1])
    options = {"xla_backend_optimization_level": 0,  # calc.keras.codegen's options
               "xla_gpu_cuda_data_dir": calls[0]["xla_gpu_cuda_data_dir"],
               "xla_gpu_kernel_cache_file": calls[0]["xla_gpu_kernel_cache_file"]}
    assert calls == [options, {**options, "xla_gpu_enable_triton_gemm": False}] and triton is False and planned
    assert emitted is False
