import json
import subprocess
import sys

import pytest

from calc.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "calc", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "args, needle",
    [
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
    ],
)
def test_bad_options_one_line_status_2(args, needle, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and err.startswith("calc: error:")


def test_models_and_gpus_json(capsys):
    assert main(["models", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)["models"]
    assert {"name": "ResNet50", "family": "ResNet", "default_size": 224, "min_size": 32} in models
    assert main(["gpus", "--json"]) == 0
    assert any(g["key"] == "t4" for g in json.loads(capsys.readouterr().out)["gpus"])


def test_estimate_by_subprocess_bad_option_exit_code():
    r = run("estimate", "--model", "ResNet50", "--batch-size", "0")
    assert r.returncode == 2 and "positive integer" in r.stderr


@pytest.mark.slow
def test_estimate_json_real_model():
    r = run("estimate", "--model", "MobileNetV2", "--image-size", "96", "--batch-size", "8",
            "--optimizer", "adamw", "--precision", "mixed_bfloat16", "--gpu", "t4", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["peak_bytes"] == sum(out["components"].values())
    assert out["optimizer"] == "adamw" and out["precision"] == "mixed_bfloat16"
    assert out["fits"] is True and out["max_batch_size"] > 8


@pytest.mark.slow
def test_measure_json_components_sum_to_the_peak():
    r = run("measure", "--model", "MobileNetV2", "--image-size", "64", "--batch-size", "4", "--optimizer", "sgd",
            "--repeats", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["peak_bytes"] == sum(out["components"].values())
    assert out["components"]["resident_before_step"] > 0 and out["device"] == "CPU:0"
