import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from calc.cli import main
from calc.types import Device


# A shipped example file: a measurement's child builds it in seconds (MobileNetV2 took 18 s).
SMALL_FILE = str(Path(__file__).resolve().parent.parent / "calc" / "data" / "models" / "mnist_cnn.keras")


def run(*args):
    return subprocess.run([sys.executable, "-m", "calc", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["estimate", "--model", "ResNet50", "--device", "tpu"], "invalid choice: 'tpu'"),
        (["estimate", "--model", "ResNet50", "--batch-size", "0"], "positive integer"),
        (["estimate", "--model", "ResNet50", "--batch-size", "-4"], "positive integer"),
        (["estimate", "--model", "ResNet50", "--batch-size", "2.5"], "positive integer"),
        (["estimate", "--model", "ResNet50", "--batch-size", "ten"], "positive integer"),
        (["estimate", "--model", "ResNet50", "--batch-size", "1000000000000"], "at most 16,777,216"),
        (["estimate", "--model", "ResNet50", "--image-size", "1"], "at least 32x32"),
        (["estimate", "--model", "ResNet50", "--height", "224", "--width", "16"], "at least 32x32"),
        (["estimate", "--model", "NoSuchNet"], "Unknown model"),
        (["estimate", "--model", "ResNet50", "--optimizer", "adamx"], "invalid choice"),
        (["estimate", "--model", "ResNet50", "--precision", "float16"], "invalid choice"),
        (["estimate", "--model", "ResNet50", "--gpu", "a200"], "Unknown GPU"),
        (["estimate", "--model", "InceptionV3", "--image-size", "64"], "at least 75x75"),
        (["estimate", "--model", "ResNet50", "--image-size", "100000"], "between 1 and 8192"),
        (["estimate", "--model", "VGG16", "--image-size", "8192"], "parameters"),
        (["estimate", "--model", "ResNet50", "--batch-size", "10", "--gpus", "4"], "divisible"),
        (["estimate"], "--model"),
        (["frobnicate"], "invalid choice"),
        (["max-batch", "--model", "ResNet50"], "--gpu"),
        (["estimate", "--file", "/nonexistent/model.keras"], "cannot read /nonexistent/model.keras"),
        (["estimate", "--file", "m.keras", "--model", "ResNet50"], "drop --model"),
        (["estimate", "--file", "m.keras", "--image-size", "64"], "drop --image-size"),
        (["measure", "--file", "missing.keras"], "cannot read missing.keras"),
        (["measure", "--file", "m.keras", "--no-top"], "drop --no-top"),
        (["measure", "--file", "model.txt"], "Expected a .keras or .h5 file"),
        (["estimate", "--model", "ResNet50", "--momentum", "1.5"], "between 0 and 1"),
        (["estimate", "--model", "ResNet50", "--momentum", "high"], "between 0 and 1"),
        (["estimate", "--model", "ResNet50", "--gpu", "t4", "--margin", "nan"], "a fraction in [0, 1)"),
        (["estimate", "--model", "ResNet50", "--gpu", "t4", "--margin", "1"], "a fraction in [0, 1)"),
        (["estimate", "--model", "ResNet50", "--memory-gib", "1e-300"], "from 1/1024 (1 MiB) to 4096"),
        (["estimate", "--model", "ResNet50", "--memory-gib", "nan"], "from 1/1024 (1 MiB) to 4096"),
        (["measure", "--model", "ResNet50", "--timeout", "-1"], "seconds in (0, 86400]"),
        (["measure", "--model", "ResNet50", "--timeout", "inf"], "seconds in (0, 86400]"),
        (["estimate", "--model", "ConvNeXtXLarge", "--classes", "1000000"], "2,049,000,000 parameters"),
    ],
)
def test_bad_options_one_line_status_2(args, needle, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and err.startswith("calc: error:")


@pytest.mark.parametrize("make", ["link_to_dev_zero", "fifo", "folder"])
def test_file_takes_regular_files_only(make, tmp_path, capsys):
    """A link to /dev/zero would be read until memory runs out, a FIFO would wait for ever."""
    path = tmp_path / "model.keras"
    if make == "link_to_dev_zero":
        path.symlink_to("/dev/zero")
    elif make == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    for command in ("estimate", "measure"):
        assert main([command, "--file", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"calc: error: {path} is not a regular file; --file takes a saved model file."


@pytest.mark.parametrize("content, needle", [
    ("{}", 'expected an object with a list of "cases"'),
    ("[]", 'expected an object with a list of "cases"'),
    ("not json", "cannot be read as a validation data file"),
    ('{"cases": [7]}', "case 1: expected an object"),
    ('{"cases": [{"case": "x", "spec": {}, "config": {}, "peak_bytes": -5}]}', "positive whole"),
    ('{"cases": [{"case": "x", "spec": {}, "config": {}, "peak_bytes": 5}]}', "case x: not a model"),
])
def test_validate_a_data_file_of_another_shape_is_one_line(content, needle, tmp_path, capsys):
    data = tmp_path / "data.json"
    data.write_text(content)
    for step in ("graph", "xla"):
        assert main(["validate", "--data", str(data), "--step", step]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and "\n" not in err and err.startswith("calc: error: data.json"), err


def test_models_and_gpus_json(capsys):
    assert main(["models", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)["models"]
    assert {"name": "ResNet50", "family": "ResNet", "default_size": 224, "min_size": 32} in models
    assert main(["gpus", "--json"]) == 0
    assert any(g["key"] == "t4" for g in json.loads(capsys.readouterr().out)["gpus"])


def test_estimate_by_subprocess_bad_option_exit_code():
    r = run("estimate", "--model", "ResNet50", "--batch-size", "0")
    assert r.returncode == 2 and "positive integer" in r.stderr


@pytest.mark.keras
def test_estimate_json_real_model():
    r = run("estimate", "--model", "MobileNetV2", "--image-size", "96", "--batch-size", "8",
            "--optimizer", "adamw", "--precision", "mixed_bfloat16", "--gpu", "t4", "--step", "graph", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["peak_bytes"] == sum(out["components"].values())
    assert out["optimizer"] == "adamw" and out["precision"] == "mixed_bfloat16"
    assert out["fits"] is True and out["max_batch_size"] > 8


@pytest.mark.keras
def test_estimate_names_what_makes_runs_of_the_step_differ(capsys):
    def caveats(*args):
        assert main(["estimate", *args, "--json"]) == 0
        return json.loads(capsys.readouterr().out)["caveats"]

    # VGG16's fc1 at 224 px: 7x7x512 inputs x 4096 units, float32.
    assert caveats("--model", "VGG16", "--batch-size", "8") == {"large_variable": 4 * 7 * 7 * 512 * 4096}
    # Models at their own size, whose ledgers are shipped: no Keras build but the frozen one.
    # ConvNeXtTiny: XLA's two dense 7x7x768x768 float32 filters, in full training only.
    assert caveats("--model", "ConvNeXtTiny") == {"large_fixed_request": 2 * 4 * 49 * 768 * 768}
    frozen = caveats("--model", "ConvNeXtTiny", "--image-size", "128", "--frozen-backbone")
    assert list(frozen) == ["inference_layout"] and frozen["inference_layout"] >= 0
    assert caveats("--model", "ResNet50") == {}
    # mixed_float16: ResNet50 at batch 1 peaks at the update, where all updates start together;
    # at batch 32 its activations set the peak in the backward pass.
    together = caveats("--model", "ResNet50", "--batch-size", "1", "--precision", "mixed_float16", "--device", "cpu")
    assert list(together) == ["updates_together"] and together["updates_together"] > 0
    assert caveats("--model", "ResNet50", "--batch-size", "32", "--precision", "mixed_float16", "--device", "cpu") == {}
    # A small mixed_float16 step peaks while a float16 convolution gradient holds its im2col
    # buffer (13-30 MiB whatever the batch, calc.facts.kernels); under mixed_bfloat16 oneDNN has none.
    small = ("--model", "MobileNetV3Small", "--batch-size", "2")
    buffer = caveats(*small, "--precision", "mixed_float16", "--device", "cpu")
    assert list(buffer) == ["float16_buffer"] and 16 * 2**20 < buffer["float16_buffer"] <= 40 * 2**20
    assert caveats(*small, "--precision", "mixed_bfloat16") == {}
    # On a GPU neither exists: cuDNN computes float16 and runs grouped convs itself.
    assert "float16_buffer" not in caveats(*small, "--precision", "mixed_float16", "--device", "gpu")
    assert caveats("--model", "ConvNeXtTiny", "--device", "gpu") == {}
    assert main(["estimate", "--model", "VGG16", "--batch-size", "8"]) == 0
    note = next(line for line in capsys.readouterr().out.splitlines() if "note:" in line)
    assert "note: One variable of this model holds 0.383 GiB" in note
    # followed by how the estimate fared on the measured steps with such a variable
    from calc.validation import caveat_record, load_report

    record = caveat_record(load_report(), "large_variable")
    assert f"on {record.cases} measured steps with such a variable" in note
    assert f"a safety margin of {record.margin_for_every_run:.0%} covers every single run" in note


@pytest.mark.keras
def test_keras_spellings_of_the_options_mean_the_same_step(capsys):
    def peak(*args):
        assert main(["estimate", "--model", "MobileNetV2", "--image-size", "96", "--batch-size", "8", *args,
                     "--json"]) == 0
        return json.loads(capsys.readouterr().out)["peak_bytes"]

    # Keras writes SGD(momentum=0.9), optimizer names in any case, use_ema, gradient_accumulation_steps.
    momentum = peak("--optimizer", "sgd", "--momentum")
    assert peak("--optimizer", "SGD", "--momentum", "0.9") == momentum
    assert peak("--optimizer", "sgd", "--momentum", "0") == peak("--optimizer", "sgd") < momentum
    assert peak("--optimizer", "Adam", "--use-ema") == peak("--optimizer", "adam", "--ema")
    assert peak("--gradient-accumulation-steps", "2") == peak("--grad-accum", "2")
    assert peak("--last-n-layers", "5") == peak("--last-n", "5")
    assert peak("--num-gpus", "2") == peak("--gpus", "2")


@pytest.mark.keras
def test_estimate_defaults_to_the_kernels_measure_runs_here(capsys, monkeypatch):
    import calc.workers.measure

    def estimate(*args):
        assert main(["estimate", "--model", "MobileNetV3Small", "--image-size", "128", "--batch-size", "2",
                     "--precision", "mixed_float16", *args, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        return out["device"], out["peak_bytes"]

    # The float16 CPU kernels' im2col buffers exist only where oneDNN lacks AVX512-FP16.
    cpu, fp16 = estimate("--device", "cpu"), estimate("--device", "cpu_fp16")
    assert cpu[0] == "cpu" and fp16[0] == "cpu_fp16" and cpu[1] > fp16[1]
    for kind, expected in ((Device.CPU, cpu), (Device.CPU_FP16, fp16)):
        monkeypatch.setattr(calc.workers.measure, "local_cpu_device", lambda kind=kind: kind)
        assert estimate() == expected


@pytest.mark.measure
def test_measure_with_gradient_accumulation_measures_an_update_step():
    # Keras' ``iterations`` is steps // N under accumulation, a new tensor on each read:
    # the protocol once read it only once and never saw an update applied.
    r = run("measure", "--file", SMALL_FILE, "--batch-size", "4", "--optimizer", "sgd", "--grad-accum", "3",
            "--repeats", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["gradient_accumulation_steps"] == 3
    assert out["peak_bytes"] == sum(out["components"].values())


@pytest.mark.measure
def test_measure_runs_the_graph_executor_unless_asked_for_xla():
    # Keras 3's jit_compile="auto" turns XLA on by itself on a GPU; the engine models the
    # executor, so measure pins jit_compile=False unless --xla asks for it.
    args = ("measure", "--file", SMALL_FILE, "--batch-size", "2", "--optimizer", "sgd", "--repeats", "1", "--json")
    plain, xla = run(*args), run(*args, "--xla")
    assert plain.returncode == 0, plain.stderr
    assert xla.returncode == 0, xla.stderr
    graph = json.loads(plain.stdout)
    assert graph["jit_compile"] is False and graph["device"] == "CPU:0"
    assert graph["peak_bytes"] == sum(graph["components"].values()) and graph["components"]["resident_before_step"] > 0
    out = json.loads(xla.stdout)
    assert out["jit_compile"] is True
    assert out["peak_bytes"] == sum(out["components"].values())


@pytest.mark.keras
def test_estimate_and_max_batch_of_your_own_file(tmp_path, capsys):
    import keras

    from calc.estimate import estimate_memory, max_batch_size
    from calc.gpus import GPU_PRESETS
    from calc.types import TrainingConfig
    from calc.uploads import profile_upload

    inp = keras.Input((64, 64, 3))
    x = keras.layers.Conv2D(16, 3, activation="relu")(inp)
    out = keras.layers.Dense(10, activation="softmax")(keras.layers.GlobalAveragePooling2D()(x))
    path = tmp_path / "mine.keras"
    keras.Model(inp, out).save(path)
    profile = profile_upload(path.read_bytes(), "mine.keras")
    config = TrainingConfig(batch_size=8, optimizer="sgd")
    assert main(["estimate", "--file", str(path), "--batch-size", "8", "--optimizer", "sgd", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["model"] == "mine.keras" and got["peak_bytes"] == estimate_memory(profile, config).peak_bytes
    from calc.validation import CUSTOM_REPORT, OWN_MODEL_STEPS, load_report, overall_record, record_sentence

    assert main(["estimate", "--file", str(path), "--batch-size", "8", "--optimizer", "sgd"]) == 0
    own = record_sentence(overall_record(load_report(CUSTOM_REPORT)), OWN_MODEL_STEPS)
    assert f"note: Your own model: the engine's rules were measured on Keras applications; {own}" in \
        capsys.readouterr().out
    assert main(["max-batch", "--file", str(path), "--optimizer", "sgd", "--gpu", "t4", "--step", "graph", "--json"]) == 0
    t4 = GPU_PRESETS["t4"]
    assert json.loads(capsys.readouterr().out)["max_batch_size"] == max_batch_size(
        profile, TrainingConfig(batch_size=32, optimizer="sgd"), t4.memory_bytes, overhead_bytes=t4.overhead_bytes)


def test_validate_prints_the_record_of_each_caveat_kind(tmp_path, capsys):
    from calc.validation import CPU_DATA, load_measurements

    data = load_measurements(CPU_DATA)
    picked = [next(c for c in data["cases"] if c["case"].startswith(prefix)) for prefix in
              ("VGG16-224x224x3-top1000 b8 sgd", "ResNet50-224x224x3-head1000 b16 adam float32 frozen",
               "MobileNetV2-224x224x3-top1000 b32 adam")]
    path = tmp_path / "three.json"
    path.write_text(json.dumps(dict(data, cases=picked)))
    assert main(["validate", "--data", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["caveats"]) == {"large_variable", "inference_layout", "none"}
    assert all(record["cases"] == 1 for record in out["caveats"].values())
    vgg = next(c for c in out["cases"] if c["case"].startswith("VGG16"))
    assert out["caveats"]["large_variable"]["lowest_error"] == pytest.approx(vgg["relative_error"], abs=1e-4)
    highest_run = max(picked[0]["peaks_bytes"])
    assert out["caveats"]["large_variable"]["margin_for_every_run"] == pytest.approx(
        max(0.0, 1 - vgg["predicted_bytes"] / highest_run))
    # Each run against the prediction of its case, counted here from the cases themselves.
    assert out["reproducibility"]["runs"] == sum(len(c["peaks_bytes"]) for c in picked)
    predicted = {c["case"]: c["predicted_bytes"] for c in out["cases"]}
    assert out["estimate_against_runs"]["runs_beyond"] == sum(
        abs(predicted[c["case"]] / run - 1) > 0.10 for c in picked for run in c["peaks_bytes"])
    assert main(["validate", "--data", str(path)]) == 0
    text = capsys.readouterr().out
    assert "  large_variable          1 cases:" in text and "covers every run" in text
    assert "TensorFlow against itself" in text and "the estimate against the same single runs" in text


@pytest.mark.keras
def test_gpu_kernels_add_the_h100_record_to_a_note(capsys):
    from calc.validation import GPU_TF_REPORT, caveat_record, load_report, record_sentence

    gpu = record_sentence(caveat_record(load_report(GPU_TF_REPORT), "inference_layout"), "frozen or last-N steps")
    frozen = ["estimate", "--model", "MobileNetV2", "--frozen-backbone", "--batch-size", "16"]
    assert main([*frozen, "--device", "gpu"]) == 0
    assert f"; with TensorFlow on an H100, {gpu}" in capsys.readouterr().out
    assert main(frozen) == 0
    out = capsys.readouterr().out
    assert "part of the model runs in inference" in out and "H100" not in out


@pytest.mark.measure
@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this machine has a GPU")
def test_measure_on_gpu_kernels_says_when_the_machine_has_no_gpu():
    r = run("measure", "--model", "MobileNetV3Small", "--image-size", "32", "--batch-size", "1",
            "--optimizer", "sgd", "--repeats", "1", "--device", "gpu")
    assert r.returncode == 2 and "TensorFlow sees no GPU on this machine" in r.stderr
