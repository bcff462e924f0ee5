"""The validation set is what the issue asks for, and the committed report is true."""

import json
import os
import re
import statistics
from pathlib import Path

import pytest

from calc.validation.ledgers import fresh_profile
from calc.validation.ledgers import committed_profiles, read_ledgers, validation_specs
from calc.validation.planned import add_planned, make_case, planned_cases, planned_predictions
from calc.catalogue import CATALOGUE
from calc.requests import config_from_dict, spec_from_dict
from calc.validation import (CPU_DATA, CPU_REPORT, CUSTOM_DATA, FP16_DATA, GPU_JAX_DATA, GPU_JAX_REPORT, GPU_TF_DATA,
                             GPU_TF_XLA_DATA, NO_CAVEAT, WALK_DATA, CaveatRecord, case_id, cases, ValidationRow, caveat_record, caveat_records, load_measurements,
                             load_report, record_sentence, report_path, save_report, summarize, validate)

ROOT = Path(__file__).resolve().parent.parent
DATA = load_measurements(CPU_DATA)
SPEC, CONFIG = cases(CPU_DATA)[0]


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
    assert min(c.batch_size for c in configs) == 1 and max(c.batch_size for c in configs) >= 64
    assert {c.precision.value for c in configs} == {"float32", "mixed_float16", "mixed_bfloat16"}
    assert {c.train_mode.value for c in configs} >= {"all", "frozen_backbone"}
    families = {c.optimizer.value for c in configs}
    assert families >= {"sgd", "adam", "adamw", "nadam", "adamax", "rmsprop", "adagrad", "adadelta", "ftrl",
                        "lion", "adafactor", "lamb"}


SLICES = [(CPU_DATA, i, 4) for i in range(4)] + [(d, 0, 1) for d in (FP16_DATA, CUSTOM_DATA, GPU_TF_DATA,
                                                                     GPU_TF_XLA_DATA, GPU_JAX_DATA)]


@pytest.mark.sweep
@pytest.mark.parametrize("data, index, parts", SLICES, ids=[f"{d.stem}-{i}" for d, i, _ in SLICES])
def test_committed_report_matches_the_engine(data, index, parts):
    """`python -m calc validate [--data ...] --save` was run after the last engine change
    (on the committed ledgers: no Keras build). The CPU set is checked in four slices."""
    rows = validate(data, committed_profiles(note=pytest.fail), (index, parts))
    cases = json.loads(report_path(data).read_text())["cases"][index::parts]
    assert [c["case"] for c in cases] == [r.case for r in rows]
    assert [c["predicted_bytes"] for c in cases] == [r.predicted_bytes for r in rows]
    assert [c["caveats"] for c in cases] == [list(r.caveats) for r in rows]


def test_the_report_summary_is_its_cases():
    for data in (CPU_DATA, CUSTOM_DATA, GPU_TF_DATA):
        report = json.loads(report_path(data).read_text())
        errors = [abs(c["relative_error"]) for c in report["cases"]]
        assert report["summary"]["median_abs_error"] == statistics.median(errors)
        assert report["summary"]["worst_over_prediction"] == max(0.0, max(c["relative_error"] for c in report["cases"]))


def test_every_validation_model_has_a_committed_ledger_for_the_pinned_keras():
    ledgers = read_ledgers()
    assert ledgers is not None and ledgers.usable()
    specs = validation_specs(WALK_DATA)
    assert len(specs) > 400
    assert all(ledgers.profile(spec) is not None for spec in specs.values())


@pytest.mark.keras
@pytest.mark.parametrize("key", ["MobileNetV3Small-128x128x3-head1000", "ResNet50-96x96x3-head10", "mlp.keras"])
def test_a_fresh_keras_build_gives_the_committed_ledger(key):
    """The committed ledgers are what this Keras builds (``validate --rebuild-ledgers`` checks them all)."""
    specs = validation_specs(WALK_DATA)
    assert fresh_profile(specs[key]) == read_ledgers().profile(specs[key])


def test_own_model_cases_are_saved_files_in_the_repository_measured_like_the_set():
    data = load_measurements(CUSTOM_DATA)
    assert data["environment"]["threads"] == "inter_op=1 intra_op=1"
    specs = [spec_from_dict(c["spec"]) for c in data["cases"]]
    assert all(s.path.startswith("calc/data/models/") and s.path.endswith(".keras") for s in specs)
    assert all(os.path.isfile(s.resolved()) for s in specs)
    assert len({s.path for s in specs}) >= 5 and len(data["cases"]) >= 16
    for case in data["cases"]:
        runs = sorted(case["peaks_bytes"])
        assert len(runs) >= 3 and case["peak_bytes"] == runs[len(runs) // 2]


def test_each_data_file_has_its_own_report():
    assert report_path(CPU_DATA) == CPU_REPORT
    assert GPU_JAX_REPORT.name == "gpu_jax_h100_noautotune_report.json"
    assert GPU_JAX_REPORT.parent == GPU_JAX_DATA.parent


def test_the_gpu_slice_has_one_run_per_case_and_skips_failed_runs(tmp_path):
    data = load_measurements(GPU_JAX_DATA)
    broken = dict(data, cases=[*data["cases"][:2], {"case": "failed", "error": "out of memory"}])
    path = tmp_path / "slice.json"
    path.write_text(json.dumps(broken))
    rows = validate(path)
    assert [r.case for r in rows] == [c["case"] for c in data["cases"][:2]]
    assert all(r.spread == 0.0 for r in rows)


def test_error_from_the_nearest_run_is_zero_inside_the_runs_and_signed_outside():
    spec, config = SPEC, CONFIG

    def row(predicted, runs=(90, 100, 120)):
        return ValidationRow("c", spec, config, 100, 0.3, predicted, runs)
    assert row(95).error_from_nearest_run == 0.0 and row(120).error_from_nearest_run == 0.0
    assert row(130).error_from_nearest_run == (130 - 120) / 100
    assert row(81).error_from_nearest_run == (81 - 90) / 100
    assert row(101, runs=()).error_from_nearest_run == 1 / 100  # one run: the median itself
    s = summarize([row(95), row(130), row(81), row(110)])
    assert s.within_runs == 2 and s.max_from_runs == (130 - 120) / 100
    assert s.median_from_runs == (0.0 + 0.09) / 2


def test_reproducibility_sets_each_run_against_the_median_of_its_cases_other_runs():
    from calc.validation import Reproducibility, reproducibility

    # (100, 100, 130): 130 is 30 % off the other two; each 100 is off the median of (100, 130),
    # 115, by 100 / 115 - 1 = -13 %. (200, 210, 220): 200 vs 215, 210 vs 210, 220 vs 205.
    # A case with fewer than three runs has no "other runs' median" to speak of and is skipped.
    r = reproducibility([(100, 100, 130), (200, 210, 220), (100, 500)], threshold=0.10)
    deviations = sorted([0.3, 1 - 100 / 115, 1 - 100 / 115, 1 - 200 / 215, 0.0, 220 / 205 - 1])
    assert r == Reproducibility(cases=2, runs=6, runs_beyond=3, cases_with_run_beyond=1,
                                median_deviation=pytest.approx((deviations[2] + deviations[3]) / 2),
                                threshold=0.10)
    assert reproducibility([(200, 210, 220)], threshold=0.05).runs_beyond == 2  # 200: 7.0 %, 220: 7.3 %
    with pytest.raises(ValueError):
        reproducibility([(100, 120)])


def test_the_estimate_is_set_against_the_same_single_runs():
    from calc.validation import reproducibility

    # A prediction of 108 against runs (100, 100, 130): 8 %, 8 % and 108 / 130 - 1 = -16.9 %;
    # 210 against (200, 210, 220): 5 %, 0 % and -4.5 %. The two-run case is skipped, and its
    # prediction must not shift the ones after it.
    r = reproducibility([(100, 100, 130), (100, 500), (200, 210, 220)], threshold=0.10,
                        predictions=[108, 300, 210])
    assert (r.cases, r.runs, r.runs_beyond, r.cases_with_run_beyond) == (2, 6, 1, 1)
    deviations = sorted([0.08, 0.08, 1 - 108 / 130, 210 / 200 - 1, 0.0, 1 - 210 / 220])
    assert r.median_deviation == pytest.approx((deviations[2] + deviations[3]) / 2)


def test_the_saved_report_says_how_far_the_runs_themselves_lie_apart(tmp_path):
    spec, config = SPEC, CONFIG
    rows = [ValidationRow("a", spec, config, 100, 0.0, 120, (100, 100, 130)),
            ValidationRow("b", spec, config, 100, 0.0, 95, (100,))]
    save_report(rows, tmp_path / "report.json")
    repro = load_report(tmp_path / "report.json")["summary"]["reproducibility"]
    assert (repro["cases"], repro["runs"], repro["runs_beyond"]) == (1, 3, 3)
    single = load_report(tmp_path / "report.json")["summary"]["estimate_against_runs"]
    assert single["runs_beyond"] == 2  # 120 against 100 twice; against 130 it is 7.7 % off
    save_report([rows[1]], tmp_path / "gpu.json")  # one run per case, as on the GPU slices
    assert load_report(tmp_path / "gpu.json")["summary"]["reproducibility"] is None


def test_caveat_records_group_cases_by_kind_with_the_margin_that_covers_every_run():
    spec, config = SPEC, CONFIG

    def row(predicted, runs, caveats=()):
        return ValidationRow("c", spec, config, sorted(runs)[1], 0.0, predicted, runs, caveats)
    vgg_low = row(150, (110, 120, 200), ("large_variable",))  # a run 200 above an estimate of 150
    vgg_high = row(150, (100, 110, 120), ("large_variable", "inference_layout"))
    frozen = row(90, (100, 101, 99), ("inference_layout",))
    plain = row(100, (100, 100, 100))
    records = caveat_records([vgg_low, vgg_high, frozen, plain])
    assert set(records) == {"large_variable", "inference_layout", NO_CAVEAT}
    big = records["large_variable"]
    assert big.cases == 2 and big.lowest_error == pytest.approx(150 / 120 - 1)
    assert big.highest_error == pytest.approx(150 / 110 - 1)
    # 200 on an estimate of 150 fits only when the estimate uses at most 150 / 200 of the memory.
    assert big.margin_for_every_run == pytest.approx(1 - 150 / 200)
    layout = records["inference_layout"]
    assert layout.cases == 2 and layout.lowest_error == pytest.approx(90 / 100 - 1)
    assert layout.margin_for_every_run == pytest.approx(1 - 90 / 101)
    assert records[NO_CAVEAT] == CaveatRecord(1, 0.0, 0.0, 0.0)
    sentence = record_sentence(big, "steps with such a variable")
    assert sentence.startswith("on 2 measured steps with such a variable the estimate was off by +25% to +36%")
    assert sentence.endswith("a safety margin of 25% covers every single run")


def test_the_saved_report_keeps_each_cases_caveats_and_their_records(tmp_path):
    spec, config = SPEC, CONFIG
    rows = [ValidationRow("a", spec, config, 100, 0.0, 120, (90, 100, 130), ("large_variable",)),
            ValidationRow("b", spec, config, 100, 0.0, 95, (100,))]
    path = tmp_path / "report.json"
    save_report(rows, path)
    report = load_report(path)
    assert [c["caveats"] for c in report["cases"]] == [["large_variable"], []]
    assert caveat_record(report, "large_variable") == CaveatRecord(1, 0.2, 0.2, pytest.approx(1 - 120 / 130))
    assert caveat_record(report, NO_CAVEAT).lowest_error == pytest.approx(-0.05)
    assert caveat_record(report, "large_fixed_request") is None
    assert caveat_record({}, "large_variable") is None


def test_the_overall_record_covers_every_run_of_every_case():
    from calc.validation import overall_record

    report = {"cases": [
        {"relative_error": 0.10, "predicted_bytes": 110, "measured_bytes": 100, "runs_bytes": [100, 100, 105]},
        {"relative_error": -0.20, "predicted_bytes": 80, "measured_bytes": 100, "runs_bytes": [90, 100, 120]},
    ]}
    record = overall_record(report)
    # The second case's 120-byte run over its 80-byte estimate: 50 % above, so a third of the memory kept free.
    assert (record.cases, record.lowest_error, record.highest_error) == (2, -0.20, 0.10)
    assert record.margin_for_every_run == pytest.approx(0.5 / 1.5)
    assert overall_record({"cases": []}) is None and overall_record({}) is None



def test_a_planned_case_is_written_with_its_prediction_and_read_back(tmp_path):
    path = tmp_path / "planned.json"
    spec, config = make_case("ResNet50", (96, 128), 8, "rmsprop", precision="mixed_bfloat16", mode="frozen_backbone",
                             centered=True)
    assert case_id(spec, config) == "ResNet50-96x128x3-head1000 b8 rmsprop centered mixed_bfloat16 frozen_backbone"
    add_planned([(spec, config, 123, "--seed 1")], "cpu", path)
    add_planned([(spec, config, 456, "--seed 2")], "cpu", path)  # planned again: replaced, not doubled
    assert planned_cases("cpu", path) == [(spec, config)] and planned_cases("custom", path) == []
    assert json.loads(path.read_text())["cases"][0]["predicted_peak_bytes"] == 456


def test_one_step_planned_in_two_sets_keeps_both_predictions(tmp_path):
    """A GPU holdout is planned twice: the walk's graph step (``gpu``) and XLA's plan (``gpu_xla``)."""
    path = tmp_path / "planned.json"
    spec, config = make_case("MobileNetV2", 96, 4, "adam")
    add_planned([(spec, config, 100, "--gpu")], "gpu", path)
    add_planned([(spec, config, 80, "--gpu")], "gpu_xla", path)
    add_planned([(spec, config, 90, "--gpu")], "gpu_xla", path)
    assert planned_cases("gpu", path) == planned_cases("gpu_xla", path) == [(spec, config)]
    by_set = {c["set"]: c["predicted_peak_bytes"] for c in json.loads(path.read_text())["cases"]}
    assert by_set == {"gpu": 100, "gpu_xla": 90}


def test_the_measured_cases_are_what_make_case_builds():
    """The data files are the case lists: every catalogue case is one ``make_case`` call away."""
    for case in DATA["cases"][:50]:
        spec, config = spec_from_dict(case["spec"]), config_from_dict(case["config"])
        opts = {k: v for k, v in vars(config.optimizer_options).items() if v is True}
        size = (spec.height, spec.width)
        again = make_case(spec.name, size, config.batch_size, config.optimizer.value, config.precision.value,
                          config.train_mode.value, config.last_n_layers, config.gradient_accumulation_steps,
                          spec.channels, spec.classes, head=not spec.include_top and config.train_mode.value == "all",
                          **opts)
        assert case_id(*again) == case["case"]


def test_keras_is_pinned_to_the_version_of_the_shipped_and_committed_ledgers():
    pins = re.findall(r"^keras==([\d.]+)$", (ROOT / "requirements.txt").read_text(), re.M)
    shipped = {re.search(r"-keras([\d.]+)-v", p.name).group(1) for p in (ROOT / "calc/data/profiles").iterdir()}
    assert pins == [read_ledgers().keras] and shipped == set(pins)


def test_ledgers_of_another_keras_are_not_used_and_say_why(monkeypatch):
    from calc.validation import ledgers as committed

    other = committed.CommittedLedgers("3.14.0", 2, {"mlp.keras": {}}, {})
    assert not other.usable() and "made with Keras 3.14.0" in other.why_unusable()
    monkeypatch.setattr(committed, "read_ledgers", lambda path=committed.LEDGERS: other)
    heard = []
    monkeypatch.setattr(committed, "get_profile", lambda spec: ("built", spec.key))
    profile_for = committed.committed_profiles(note=heard.append)
    assert profile_for(SPEC) == ("built", SPEC.key) and len(heard) == 1 and "--rebuild-ledgers" in heard[0]


def test_rebuilding_only_the_missing_ledgers_keeps_the_committed_ones(monkeypatch):
    """``validate --rebuild-ledgers --missing-only``: a newly measured model is built, the rest are not."""
    from calc.validation import ledgers as committed

    ledgers = read_ledgers()
    kept_key = next(iter(sorted(ledgers.profiles)))
    new_spec = make_case("MobileNetV2", (96, 80), 4, "adam")[0]
    specs = {kept_key: SPEC, new_spec.key: new_spec}
    monkeypatch.setattr(committed, "validation_specs", lambda paths=None: specs)
    built_for = []

    def build(spec):
        built_for.append(spec.key)
        return ("built", spec.key)

    built, differ, missing = committed.rebuild(build, only_missing=True)
    assert built_for == [new_spec.key] and missing == [new_spec.key] and differ == []
    assert built[kept_key] == committed.profile_from_dict(ledgers.profiles[kept_key])
    assert built[new_spec.key] == ("built", new_spec.key)


def test_a_holdout_is_scored_at_its_recorded_predictions(tmp_path):
    """tools/score_holdout.py: the error of each measured case against the prediction on record."""
    from calc.requests import config_to_dict, spec_to_dict
    from tests.tools import load_tool

    score = load_tool("score_holdout")
    planned = tmp_path / "planned.json"
    measured, waiting = make_case("MobileNetV2", 96, 4, "adam"), make_case("ResNet50", 64, 2, "sgd")
    add_planned([(*measured, 110 << 20, "--gpu"), (*waiting, 50 << 20, "--gpu")], "gpu_xla", planned)
    add_planned([(*measured, 1 << 20, "--gpu")], "gpu", planned)  # another set's prediction is not read
    data = tmp_path / "gpu_xla.json"
    data.write_text(json.dumps({"environment": {"device": "GPU:0 (NVIDIA H100 80GB HBM3)"}, "cases": [
        {"case": case_id(*measured), "spec": spec_to_dict(measured[0]), "config": config_to_dict(measured[1]),
         "peaks_bytes": [100 << 20], "peak_bytes": 100 << 20, "spread": 0.0}]}))
    rows, missing = score.holdout_rows("gpu_xla", data, planned)
    assert [(r.case, r.predicted_bytes, r.measured_bytes) for r in rows] == [
        (case_id(*measured), 110 << 20, 100 << 20)]
    assert rows[0].relative_error == pytest.approx(0.10)
    assert missing == [case_id(*waiting)]


def test_each_holdout_of_a_set_is_told_apart_by_the_seed_it_was_drawn_with(tmp_path, monkeypatch):
    """A second GPU holdout joins the same sets; measuring and scoring take one draw by its seed."""
    from tests.tools import load_tool

    planned = tmp_path / "planned.json"
    first, second = make_case("MobileNetV2", 96, 4, "adam"), make_case("ResNet50", 64, 2, "sgd")
    add_planned([(*first, 100, "--gpu --seed 26 --count 12 --save")], "gpu_xla", planned)
    add_planned([(*second, 200, "--gpu --seed 2612 --count 12 --save")], "gpu_xla", planned)
    add_planned([(*second, 300, "--gpu --seed 2612 --count 12 --save")], "gpu", planned)
    assert planned_cases("gpu_xla", planned, seed=2612) == [second]
    assert planned_cases("gpu_xla", planned, seed=26) == [first]  # not the 26 in 2612
    assert planned_cases("gpu_xla", planned) == [first, second]
    assert planned_predictions("gpu_xla", planned, seed=2612) == {case_id(*second): 200}
    assert planned_cases("gpu_xla", planned, seed=7) == []
    score = load_tool("score_holdout")
    data = tmp_path / "gpu_xla.json"
    data.write_text(json.dumps({"environment": {}, "cases": []}))
    assert score.holdout_rows("gpu_xla", data, planned, seed=26) == ([], [case_id(*first)])
    measure = load_tool("measure_gpu_tf")
    monkeypatch.setattr(measure, "planned_cases", lambda s, seed=None: planned_cases(s, planned, seed=seed))
    monkeypatch.setattr(measure, "planned_predictions", lambda s, seed=None: planned_predictions(s, planned, seed=seed))
    assert measure.holdout_cases(True, 2612) == [second] and measure.holdout_cases(False, 26) == []
    assert measure.holdout_cases(True) == [second, first]  # largest prediction first


def test_the_files_a_gpu_call_cannot_carry_go_aside_and_come_back(tmp_path):
    """tools/gpu_tf/aside.sh: the own-model files and screenshots leave the tree for the GPU calls, then return."""
    import shutil
    import subprocess

    tree, keep = tmp_path / "tree", tmp_path / "keep"
    (tree / "tools" / "gpu_tf").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "gpu_tf" / "aside.sh", tree / "tools" / "gpu_tf" / "aside.sh")
    files = {"calc/data/models/mlp.keras": "weights", "docs/screenshots/estimator.png": "png", "calc/calc.py": "code"}
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    subprocess.run(["git", "add", "-A"], cwd=tree, check=True)

    def aside(*args):
        return subprocess.run(["bash", "tools/gpu_tf/aside.sh", *args], cwd=tree, capture_output=True, text=True,
                              env={**os.environ, "CALC_GPU_ASIDE": str(keep)}, timeout=30)

    out = aside("out")
    assert out.returncode == 0, out.stderr
    assert not (tree / "calc/data/models").exists() and not (tree / "docs/screenshots").exists()
    assert (keep / "calc/data/models/mlp.keras").read_text() == "weights" and (tree / "calc/calc.py").exists()
    assert aside("out").returncode == 1  # not twice: the first copy would be overwritten
    back = aside("back")
    assert back.returncode == 0, back.stderr
    assert {name: (tree / name).read_text() for name in files} == files and not keep.exists()
    assert aside("back").returncode != 0 and aside().returncode == 2


def test_a_gpu_machines_results_merge_into_a_data_file(tmp_path):
    """tools/measure_gpu_tf.py merge: new cases added, a case measured again replaced, another environment refused."""
    from tests.tools import load_tool

    tool = load_tool("measure_gpu_tf")
    env = {"device": "GPU:0 (NVIDIA H100 80GB HBM3)", "tensorflow": "2.21.0", "keras": "3.15.1",
           "threads": "inter_op=1 intra_op=1"}
    def case(name, peak):
        return {"case": name, "spec": {}, "config": {}, "peak_bytes": peak}

    into, source, other = tmp_path / "into.json", tmp_path / "new.json", tmp_path / "other.json"
    into.write_text(json.dumps({"environment": {**env, "jit_compile": True}, "cases": [case("a", 1), case("b", 2)]}))
    source.write_text(json.dumps({"environment": env, "cases": [case("b", 3), case("c", 4)]}))
    tool.merge(source, into)
    merged = json.loads(into.read_text())
    assert merged["environment"]["jit_compile"] is True
    assert [(c["case"], c["peak_bytes"]) for c in merged["cases"]] == [("a", 1), ("b", 3), ("c", 4)]
    other.write_text(json.dumps({"environment": {**env, "tensorflow": "2.20.0"}, "cases": [case("d", 5)]}))
    with pytest.raises(SystemExit, match="another environment"):
        tool.merge(other, into)


def test_the_scaled_limit_steps_on_record_run_as_they_were_planned(tmp_path):
    """Set gpu_xla_scaled (tools/near_limit.py --slop): measure_scaled.sh reads the scale and the region
    from the draw's own line, each model's step inside the bend goes first, and XLA dumps each step
    into a folder of its own."""
    import re

    from calc.validation.planned import load_planned
    from tests.tools import load_tool

    near, measure = load_tool("near_limit"), load_tool("measure_gpu_tf")
    drawn = [c for c in load_planned() if c["set"] == "gpu_xla_scaled"]
    assert drawn, "the scaled steps' predictions are on record"
    for (gpu, slop), seed in near.SCALED_TAGS.items():
        lines = {c["drawn_by"] for c in drawn if f"--seed {seed}" in c["drawn_by"]}
        assert len(lines) == 1  # one scale and one region for the whole draw
        line = lines.pop()
        assert re.search(r"--slop (\d+)", line).group(1) == str(slop)
        assert re.search(r"--region-mib (\d+)", line).group(1) == str(near.scaled_region_mib(gpu, slop))
        order = measure.holdout_cases(True, seed, "gpu_xla_scaled")
        models = {spec.key for spec, _ in order}
        first = order[:len(models)]
        assert {spec.key for spec, _ in first} == models
        assert all(config.batch_size == min(c.batch_size for s, c in order if s.key == spec.key)
                   for spec, config in first)
        folders = {measure.dump_flags(tmp_path, spec, config)["XLA_FLAGS"] for spec, config in order}
        assert len(folders) == len(order) and all("--xla_dump_hlo_as_proto" in f for f in folders)
    assert measure.dump_flags(None, *order[0]) == {}


def test_a_gpu_machines_steps_at_the_limit_are_read_against_the_record(tmp_path, monkeypatch):
    """tools/near_limit.py --report: each step on record with its measured peak, or why its run failed,
    and the card's own compile (xla_dumps.py) beside the plan's."""
    from types import SimpleNamespace

    from calc.validation.planned import planned_cases, planned_predictions
    from tests.tools import load_tool

    near, measure = load_tool("near_limit"), load_tool("measure_gpu_tf")
    seed = near.SCALED_TAGS["h200", 8]
    steps = planned_cases("gpu_xla_scaled", seed=seed)
    predicted = planned_predictions("gpu_xla_scaled", seed=seed)
    ran, oom = steps[0], steps[-1]
    monkeypatch.setattr(near, "compute_plan", lambda spec, config, gpu: SimpleNamespace(
        temporaries_bytes=1000 + config.batch_size))
    (tmp_path / "gpu_xla_scaled.json").write_text(json.dumps(
        {"environment": {}, "cases": [{"case": case_id(*ran), "peak_bytes": 2 * predicted[case_id(*ran)]}]}))
    (tmp_path / "gpu_xla_scaled_failed.json").write_text(json.dumps({case_id(*oom): (
        "measurement of VGG16 failed: exit status 1: Traceback | tensorflow.python.framework.errors_impl."
        "ResourceExhaustedError: Out of memory while trying to allocate 123 bytes.")}))
    (tmp_path / "xla_dumps_scaled.json").write_text(json.dumps({measure.dump_folder(*ran): {
        "temporaries_bytes": 77, "workspace_at_peak_bytes": 5, "rematerialised_instructions": 12}}))
    rows = {r["case"]: r for r in near.report(tmp_path, "gpu_xla_scaled", seed, "h200")}
    assert set(rows) == {case_id(*s) for s in steps}
    first, last = rows[case_id(*ran)], rows[case_id(*oom)]
    assert first["measured_bytes"] == 2 * first["predicted_bytes"] and first["failure"] is None
    assert (first["card_temp_bytes"], first["card_workspace_bytes"], first["card_remat"]) == (77, 5, 12)
    assert first["plan_temp_bytes"] == 1000 + ran[1].batch_size
    assert last["measured_bytes"] is None and last["failure"] == "out of memory" and last["card_remat"] is None
    assert near.failure_reason("measurement of X ran past 420 s and was stopped: warm-up done") == \
        "stopped at its time limit"
    assert near.failure_reason("failed: exit status 1: a | b | RuntimeError: no GPU") == "RuntimeError: no GPU"
    near.print_report(list(rows.values()))  # prints a row for every step, measured or not
