"""The validation set is what the issue asks for, and the committed report is true."""

import json

import pytest

from calc.catalogue import CATALOGUE
from calc.requests import config_from_dict, spec_from_dict
from calc.validation import CPU_DATA, CPU_REPORT, load_measurements, summarize, validate

DATA = load_measurements(CPU_DATA)


def test_environment_is_recorded():
    env = DATA["environment"]
    assert env["tensorflow"] and env["keras"] and env["device"] and env["threads"] == "inter_op=1 intra_op=1"


def test_every_case_has_three_runs_and_its_median():
    for case in DATA["cases"]:
        runs = sorted(case["peaks_bytes"])
        assert len(runs) >= 3
        assert case["peak_bytes"] == runs[len(runs) // 2]


def test_coverage_of_the_set():
    specs = [spec_from_dict(c["spec"]) for c in DATA["cases"]]
    configs = [config_from_dict(c["config"]) for c in DATA["cases"]]
    assert len(DATA["cases"]) >= 40
    assert len({CATALOGUE[s.name].family for s in specs}) >= 12
    assert min(c.batch_size for c in configs) == 1 and max(c.batch_size for c in configs) == 64
    assert {c.precision.value for c in configs} == {"float32", "mixed_float16", "mixed_bfloat16"}
    assert {c.train_mode.value for c in configs} >= {"all", "frozen_backbone"}
    families = {c.optimizer.value for c in configs}
    assert families >= {"sgd", "adam", "adamw", "nadam", "adamax", "rmsprop", "adagrad", "adadelta", "ftrl",
                        "lion", "adafactor"}


@pytest.mark.slow
def test_committed_report_matches_the_engine():
    """`python -m calc validate --save` was run after the last engine change."""
    rows = validate()
    report = json.loads(CPU_REPORT.read_text())
    assert [c["case"] for c in report["cases"]] == [r.case for r in rows]
    assert [c["predicted_bytes"] for c in report["cases"]] == [r.predicted_bytes for r in rows]
    assert report["summary"]["median_abs_error"] == summarize(rows).median_abs
