"""AppTest: every page, widgets driven by key, chart data checked against the engine."""

import json
import re
import time
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from calc.catalogue import make_spec
from calc.estimate import estimate_memory, max_batch_size, memory_curve
from calc.gpus import GPU_PRESETS
from calc.profiles import get_profile
from tests import fake_work
from calc.types import TrainingConfig
from dashboard.plain import plain
from dashboard.state import Inputs
from tests.tools import displayed, wait_for, xla_margin

pytestmark = pytest.mark.server
APP = "../app.py"
SMALL = {"model": "MobileNetV2", "image_size": "224", "batch_size": "16", "optimizer": "adam", "gpu": "t4"}
# What XLA's verdict keeps free beside SMALL's plan for each sample: a cuDNN workspace as large as MobileNetV2's
# largest convolution's operands (block_1_depthwise: 113x113x96 zero-padded in, 56x56x96 out), in float32.
SMALL_KEPT = (113 * 113 * 96 + 56 * 56 * 96) * 4
# And beside HUB's (Gemma 2 2B, 512 tokens, bfloat16): one sequence's logits, 512 tokens x 256,000 words x 2 bytes.
HUB_KEPT = 512 * 256_000 * 2


def dashboard_config(**fields) -> TrainingConfig:
    """The engine's config for what the dashboard shows by default: its kernels are a GPU's."""
    return TrainingConfig(device=Inputs().device, **fields)


@pytest.fixture(autouse=True)
def _clear_caches():
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture(autouse=True)
def _own_xla_plans(tmp_path, monkeypatch):
    """Plans come only from what a test puts in its own plan cache: none shipped, none from
    other runs, and the XLA packages' versions fixed so no test depends on what is installed.
    CALC_XLA_COMPILES is off for every test (tests/conftest.py)."""
    import calc.service
    from calc import xla
    from calc.cluster import worker
    from calc.xla import cache
    from tests import fake_work

    monkeypatch.setattr(cache, "cache_dir", lambda: tmp_path / "xla-plans")
    monkeypatch.setattr(cache, "shipped_plans", lambda: {})
    for module in (cache, xla):  # where the plan reads them, and where the pages do
        monkeypatch.setattr(module, "plan_versions", lambda: {"jax": "test", "keras": "test"})
        monkeypatch.setattr(module, "unavailable_reason", lambda: None)
    fake_work.reset()
    # Each test's pages meet a work service of their own, on workers in this process: real Keras builds
    # (a page at a size nobody built asks for one), compiles by the test's formula (``compiles``).
    service = calc.service.WorkService(fake_work.local_engine, functions={"plan": fake_work.plan,
                                                                         "build": worker.build}, lease_s=30)
    monkeypatch.setattr(calc.service, "_service", service)
    yield service
    service.shutdown()
    fake_work.reset()


def app(params=None, page=None):
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in (params or SMALL).items():
        at.query_params[k] = v
    at.run()
    if page:
        at.switch_page(page).run()
    built(at)
    assert not at.exception, [e.value for e in at.exception]
    return at


BUILDING = "built once (weights=None)"  # the progress line of a build a page waits for


def built(at, timeout_s=300.0):
    """Reruns the page once the builds it waits for are done, as its progress fragment does in a browser."""
    import calc.service

    for _ in range(4):
        if not any(BUILDING in e.value for e in [*at.caption, *at.info]):
            return
        wait_for(lambda: calc.service.service().pending("build") == 0, timeout_s)
        time.sleep(0.2)
        at.run()


def metric(at, label_start):
    return next(m.value for m in at.metric if m.label.startswith(label_start))


def charts(at) -> dict[str, dict]:
    """The page's Plotly figures by widget key, as the browser receives them (dashboard/charts.py)."""
    out = {}
    for c in at.get("bidi_component"):
        data = json.loads(c.proto.json)
        if "figure" in data:
            out[c.proto.id.rsplit("-", 1)[-1]] = json.loads(data["figure"])
    return out


def engine_max_batch(batch=16, margin=0.05):
    profile = get_profile(make_spec("MobileNetV2", 224))
    gpu = GPU_PRESETS["t4"]
    config = dashboard_config(batch_size=batch, optimizer="adam")
    return profile, config, gpu, max_batch_size(profile, config, gpu.memory_bytes, overhead_bytes=gpu.overhead_bytes,
                                                safety_margin=margin, limit=1 << 16)


def test_estimator_shows_engine_numbers():
    at = app({**SMALL, "step": "graph"})
    profile, config, gpu, best = engine_max_batch()
    assert metric(at, "Largest batch") == f"{best:,}"
    assert at.success and at.success[0].value.startswith("Fits")


def test_verdict_flips_at_the_max_batch():
    _, _, _, best = engine_max_batch()
    at = app({**SMALL, "step": "graph", "batch_size": str(best)})
    assert at.success and not at.error
    at.number_input(key="batch_size").set_value(best + 1).run()
    assert at.error and at.error[0].value.startswith("Does not fit")


def test_curve_crosses_the_usable_line_at_the_max_batch():
    profile, config, gpu, best = engine_max_batch()
    at = app()
    curve = curve_chart(at)
    xs, ys = curve["data"][0]["x"], curve["data"][0]["y"]
    usable = gpu.memory_bytes * 0.95 / 1024**3
    y_at = dict(zip(xs, ys))
    assert y_at[best] <= usable < y_at[best + 1]
    expected = memory_curve(profile, config, [best])[0] + gpu.overhead_bytes
    assert abs(y_at[best] - expected / 1024**3) < 1e-9


def test_breakdown_bars_sum_to_the_peak_plus_overhead():
    at = app()
    bars = bar_chart(at)
    total = sum(trace["y"][0] for trace in bars["data"])
    profile, config, gpu, _ = engine_max_batch()
    from calc.estimate import estimate_memory

    assert abs(total - (estimate_memory(profile, config).peak_bytes + gpu.overhead_bytes) / 1024**3) < 1e-9


def test_url_round_trip():
    at = app()
    at.selectbox(key="optimizer").set_value("sgd").run()
    at.number_input(key="batch_size").set_value(24).run()
    at.selectbox(key="precision").set_value("mixed_bfloat16").run()
    params = {k: at.query_params[k] for k in ("model", "image_size", "batch_size", "optimizer", "precision", "gpu")}
    params = {k: v[0] if isinstance(v, list) else v for k, v in params.items()}
    assert params["optimizer"] == "sgd" and params["batch_size"] == "24"
    again = app(params)
    assert again.selectbox(key="optimizer").value == "sgd"
    assert again.number_input(key="batch_size").value == 24
    assert again.selectbox(key="precision").value == "mixed_bfloat16"
    assert metric(again, "Predicted peak") == metric(at, "Predicted peak")


@pytest.mark.parametrize(
    "params",
    [
        {"batch_size": "0"}, {"batch_size": "-3"}, {"batch_size": "2.5"}, {"batch_size": "abc"},
        {"batch_size": "1000000000000"}, {"model": "NotANet"}, {"optimizer": "sgdx"}, {"precision": "fp8"},
        {"gpu": "a9000"}, {"image_size": "100000"}, {"margin": "nan"}, {"gpu_memory_gib": "inf"},
        {"step": "jit"}, {"remat": "bogus"},
    ],
)
def test_bad_query_values_warn_and_fall_back(params):
    at = app({**SMALL, **params})
    assert at.warning and "Ignored" in at.warning[0].value


def test_too_small_image_is_an_error_not_a_traceback():
    at = app({**SMALL, "model": "InceptionV3", "image_size": "40"})
    assert at.error and "at least 75x75" in at.error[0].value


@pytest.mark.parametrize("page", ["pages/layers.py", "pages/formula.py", "pages/compare.py", "pages/validation.py"])
def test_every_page_renders(page):
    at = app(page=page)
    assert not at.error


def test_validation_page_compares_the_error_with_the_spread_of_the_runs():
    from calc.validation import CPU_REPORT, load_report

    s = load_report(CPU_REPORT)["summary"]
    line = next(c.value for c in app(page="pages/validation.py").caption if "lie within their case's runs" in c.value)
    assert f"{s['within_measured_runs']} of {s['cases']} predictions" in line
    assert f"{s['max_abs_error_from_nearest_run']:.1%}" in line
    repro = s["reproducibility"]
    assert f"{repro['runs_beyond']} of {repro['runs']} runs" in line
    single = s["estimate_against_runs"]
    assert f"the estimate against the same runs: a median {single['median_deviation']:.1%}" in line


def test_validation_page_groups_the_cases_by_what_makes_their_runs_differ():
    from calc.validation import load_report

    report = load_report()
    at = app(page="pages/validation.py")
    table = next(d.value for d in at.dataframe if "margin that covered every run" in d.value.columns)
    by_cases = {c["case"]: c for c in report["cases"]}
    assert table["cases"].sum() >= len(by_cases)  # a case with two kinds counts in both
    frozen = table[table["steps with"].str.startswith("frozen backbone")].iloc[0]
    group = [c for c in by_cases.values() if "inference_layout" in c["caveats"]]
    assert frozen["cases"] == len(group)
    assert frozen["lowest error"] == min(c["relative_error"] for c in group)
    highest_run = max(max(c["runs_bytes"]) / c["predicted_bytes"] for c in group)
    assert frozen["margin that covered every run"] == pytest.approx(1 - 1 / highest_run)
    plain = table[table["steps with"].str.startswith("none")].iloc[0]
    assert plain["cases"] == sum(not c["caveats"] for c in by_cases.values())


def test_validation_page_shows_the_own_model_and_gpu_slices_with_and_without_xla():
    from calc.validation import CUSTOM_REPORT, GPU_TF_REPORT, GPU_TF_XLA_REPORT, load_report

    at = app(page="pages/validation.py")
    tables = [d.value for d in at.dataframe if list(d.value.columns)[:2] == ["case", "measured_bytes"]]
    lines = [m.value for m in at.markdown]
    for path, what in ((GPU_TF_REPORT, "Graph executor"), (GPU_TF_XLA_REPORT, "XLA"), (CUSTOM_REPORT, "Own models")):
        report = load_report(path)
        s = report["summary"]
        assert any(line.startswith(what) and f"{s['cases']} steps, median error {s['median_abs_error']:.1%}" in line
                   for line in lines)
        assert any(list(t["case"]) == [c["case"] for c in report["cases"]]
                   and list(t["relative_error"]) == [c["relative_error"] for c in report["cases"]] for t in tables)


def test_layers_table_shares_sum_to_one():
    at = app(page="pages/layers.py")
    df = at.dataframe[1].value  # after the walk's peak by part
    assert abs(df["share of kept"].sum() - 1) < 1e-9
    assert (df["bytes kept per sample"] >= 0).all()


def test_formula_reproduces_the_sources_worked_examples():
    at = app(page="pages/formula.py")
    text = " ".join(m.value for m in at.markdown)
    assert "2,083,672,896 bytes" in text and "742.34 MB" in text and "6,297,168 bytes" in text
    shown = text + " ".join(c.value for c in at.caption) + " ".join(h.value for h in at.header)
    assert "seed" not in shown.lower() and "product(s)" not in shown


def _saved_model_bytes(tmp_path, lam=False, ext=".keras"):
    import keras

    inp = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(8, 3)(inp)
    if lam:
        x = keras.layers.Lambda(lambda t: t * 2)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    out = keras.layers.Dense(3, activation="softmax")(x)
    path = tmp_path / f"model{ext}"
    keras.Model(inp, out).save(path)
    return path.read_bytes()


def test_upload_a_model_file(tmp_path, monkeypatch):
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager

    from calc import uploads

    reads, released = [], []
    read, remove = uploads.profile_upload, MemoryUploadedFileManager.remove_file
    monkeypatch.setattr(uploads, "profile_upload", lambda *a, **k: reads.append(1) or read(*a, **k))
    monkeypatch.setattr(MemoryUploadedFileManager, "remove_file",
                        lambda self, session, file_id: released.append(file_id) or remove(self, session, file_id))
    at = app({"source": "upload", "batch_size": "8"})
    assert at.info and "Upload" in at.info[0].value
    saved = _saved_model_bytes(tmp_path)
    at.file_uploader(key="upload_file").set_value(("mine.keras", saved, "application/zip")).run()
    assert not at.exception and not at.error
    assert metric(at, "Largest batch")
    # Read once; its bytes leave Streamlit's upload manager at once, the ledger stays for the reruns.
    assert len(reads) == 1 and len(released) == 1
    at.number_input(key="batch_size").set_value(16).run()
    assert not at.exception and not at.error and metric(at, "Largest batch") and len(reads) == 1
    # The file is kept, by its content, for XLA's plan (the default step), which compiles from it.
    from calc.catalogue import ModelFile
    from dashboard.pagekit import UPLOAD_KEPT

    _, kept = at.session_state[UPLOAD_KEPT]
    assert isinstance(kept, ModelFile) and open(kept.resolved(), "rb").read() == saved
    assert metric(at, "Predicted peak (walk, until XLA's plan)")  # no plan of it yet, and compiles are off in tests
    assert any(i.value.startswith("XLA's plan of this batch is not known yet") for i in at.info)
    put_plan(plan_analysis(16), spec=kept)
    at.run()
    assert metric(at, "Planned peak (XLA)")
    # Beside the plan, the file's largest convolution, from the ledger the page read (the file is not read again):
    # Conv2D, 32x32x3 in and 30x30x8 out, float32, 16 samples.
    from dashboard.figures import LABELS

    bars = {t["name"]: t["y"][0] for t in bar_chart(at)["data"]}
    assert bars[LABELS["kept_free"]] == pytest.approx(16 * (32 * 32 * 3 + 30 * 30 * 8) * 4 / GIB) and len(reads) == 1


@pytest.mark.parametrize(
    "name, payload, needle",
    [
        ("lambda.keras", "lambda", "Lambda"),
        ("truncated.keras", "truncated", "truncated"),
        ("notamodel.h5", b"just text", "HDF5"),
    ],
)
def test_bad_uploads_are_clear_errors(tmp_path, monkeypatch, name, payload, needle):
    if payload == "lambda":
        payload = _saved_model_bytes(tmp_path, lam=True)
    elif payload == "truncated":
        data = _saved_model_bytes(tmp_path)
        payload = data[: len(data) // 2]
    at = app({"source": "upload"})
    at.file_uploader(key="upload_file").set_value((name, payload, "application/octet-stream")).run()
    assert not at.exception
    assert at.error and needle in at.error[0].value
    # A rerun says the same without reading the file again.
    monkeypatch.setattr("calc.uploads.profile_upload", lambda *a, **k: pytest.fail("read again"))
    at.number_input(key="batch_size").set_value(16).run()
    assert not at.exception and at.error and needle in at.error[0].value


def test_pasted_summary(tmp_path):
    from tests.test_summary_text import KERAS2

    at = app({"source": "summary", "batch_size": "8"})
    assert at.info and "Paste" in at.info[0].value
    at.text_area(key="summary_text").input(KERAS2).run()
    assert not at.exception and not at.error
    assert metric(at, "Largest batch")
    # A model the user brings carries the own-model slice's record; a catalogue model does not.
    from calc.validation import CUSTOM_REPORT, OWN_MODEL_STEPS, load_report, overall_record, record_sentence

    own = record_sentence(overall_record(load_report(CUSTOM_REPORT)), OWN_MODEL_STEPS)
    assert any(w.value.startswith("Your own model") and own in w.value for w in at.warning)
    assert not any("Your own model" in w.value for w in app().warning)
    at.text_area(key="summary_text").input("not a summary").run()
    assert at.error and "No layer rows" in at.error[0].value


def test_pasted_functional_summary_is_wired_and_its_activation_choice_counts():
    from calc.summary_text import read_summary
    from tests.test_summary_text import KERAS3_FUNCTIONAL

    text = KERAS3_FUNCTIONAL.replace("(None, 8, 8,", "(None, 64, 64,")  # maps big enough to matter
    at = app({"source": "summary", "batch_size": "8", "gpu": "t4"})
    at.text_area(key="summary_text").input(text).run()
    assert not at.exception and not at.error
    assert any("Connected to' column (7 connections)" in c.value for c in at.caption)
    assert any("1 Activation rows" in w.value and "relu" in w.value for w in at.warning)
    shown = []
    for activation in ("relu", "gelu"):
        at.selectbox(key="summary_activation").set_value(activation).run()
        profile = read_summary(text, activation=activation).profile
        gpu = GPU_PRESETS["t4"]
        best = max_batch_size(profile, dashboard_config(batch_size=8), gpu.memory_bytes,
                              overhead_bytes=gpu.overhead_bytes, safety_margin=0.05, limit=1 << 16)
        assert metric(at, "Largest batch") == f"{best:,}"
        shown.append(best)
    assert shown[0] > shown[1]  # gelu keeps its input, relu only its output


def test_pasted_sequential_summary_asks_for_the_input_shape():
    from tests.test_summary_text import KERAS2

    text = "\n".join(l for l in KERAS2.splitlines() if "InputLayer" not in l)  # as Keras prints a Sequential
    at = app({"source": "summary", "batch_size": "8"})
    at.text_area(key="summary_text").input(text).run()
    assert at.error and "no InputLayer row" in at.error[0].value
    at.text_input(key="summary_input_shape").input("32, 32, three").run()
    assert at.error and "positive integers" in at.error[0].value
    at.text_input(key="summary_input_shape").input("32, 32, 3").run()
    assert not at.error and not at.exception and metric(at, "Largest batch")


def test_compare_table_is_the_engines_max_batch_per_model_and_gpu():
    at = app({**SMALL, "step": "graph"}, page="pages/compare.py")
    at.multiselect(key="compare_models").set_value(["MobileNetV2", "ResNet50"]).run()
    at.multiselect(key="compare_gpus").set_value(["t4", "a100-80"]).run()
    table = at.dataframe[0].value
    config = dashboard_config(batch_size=16, optimizer="adam")
    for _, row in table.iterrows():
        profile = get_profile(make_spec(row["model"], 224))
        peak = estimate_memory(profile, config).peak_bytes
        assert row["peak at batch 16 (GiB, framework overhead not included)"] == round(peak / 1024**3, 3)
        for key in ("t4", "a100-80"):
            gpu = GPU_PRESETS[key]
            assert row[gpu.name] == max_batch_size(profile, config, gpu.memory_bytes, overhead_bytes=gpu.overhead_bytes,
                                                   safety_margin=0.05, limit=1 << 16)


def test_compare_under_the_xla_step_marks_the_walks_numbers_where_no_plan_is_known():
    from calc import xla
    from dashboard.views import fmt

    put_plan(plan_analysis(16))  # one plan only: no line, no search settled
    at = app({**SMALL, "models": "MobileNetV2,ResNet50", "gpus": "t4"}, page="pages/compare.py")
    table = at.dataframe[0].value
    config = dashboard_config(batch_size=16, optimizer="adam")
    gpu = GPU_PRESETS["t4"]
    resnet = table[table["model"] == "ResNet50"].iloc[0]
    walk = max_batch_size(get_profile(make_spec("ResNet50", 224)), config, gpu.memory_bytes,
                          overhead_bytes=gpu.overhead_bytes, safety_margin=0.05, limit=1 << 16)
    assert resnet[gpu.name] == f"{walk:,} (walk)"
    assert table[table["model"] == "MobileNetV2"].iloc[0][gpu.name] == "≥ 16"  # the one plan fits: at least 16
    # The peaks and the curves are XLA's too, named as the Estimator names its peak (no framework overhead);
    # a model none of whose plans is known is drawn from the walk, marked so.
    plan = xla.known_plans(*small_step(), "t4").plans[16]
    peaks = at.dataframe[1].value
    assert peaks[peaks["model"] == "MobileNetV2"].iloc[0][gpu.name] == fmt(plan.peak_bytes, Inputs()) == metric(
        app(), "Planned peak (XLA)")
    assert peaks[peaks["model"] == "ResNet50"].iloc[0][gpu.name] in ("planning…", "not planned")
    assert "peak at batch 16 (GiB, framework overhead not included)" not in table.columns
    chart = charts(at)["compare_chart"]
    names = {t["name"]: t for t in chart["data"]}
    assert names[f"MobileNetV2 · {gpu.name}"]["y"] == [pytest.approx(plan.peak_bytes / GIB)]
    assert "ResNet50 (walk)" in names and "MobileNetV2 (walk)" not in names
    assert chart["layout"]["xaxis"]["range"][0] == 0  # a log axis from batch 1: no batch is smaller
    # Compare lists catalogue models whatever the sidebar's model comes from: a pasted summary's
    # sidebar still gets XLA's answers for them (and never the sidebar's own model's).
    pasted = app({**SMALL, "source": "summary", "models": "MobileNetV2", "gpus": "t4"}, page="pages/compare.py")
    assert pasted.dataframe[0].value.iloc[0][gpu.name] == "≥ 16"


def test_compare_searches_the_largest_batch_in_the_background_without_the_estimator(compiles):
    """A model and card never opened on the Estimator: Compare shows the walk's number, marked, and asks
    for the plans; once the search has run, the cell is XLA's largest batch, as the search over the fake
    plans gives it by hand."""
    import threading

    from calc import xla

    gate = threading.Event()  # no compile ends before the page has shown what it has meanwhile
    service = compiles(gate=gate)
    link = {**SMALL, "models": "MobileNetV2", "gpus": "t4"}
    try:
        at = app(link, page="pages/compare.py")
        assert at.dataframe[0].value[GPU_PRESETS["t4"].name][0].endswith("(walk)")
        assert any("XLA's plan at batch 16" in c.value for c in at.caption)  # the compile it waits for
    finally:
        gate.set()
    gpu = GPU_PRESETS["t4"]
    budget = int(gpu.memory_bytes * (1 - xla_margin())) - gpu.overhead_bytes
    peak = lambda b: xla.plan_from_analysis(plan_analysis(b), "t4").peak_bytes  # noqa: E731
    expected = max(b for b in range(1, 2000) if peak(b) + b * SMALL_KEPT <= budget)
    for _ in range(20):  # each run asks for the compiles the plans known so far call for
        _wait_idle(service)
        at.run()
        if at.dataframe[0].value[gpu.name][0] == f"{expected:,}":
            break
    assert at.dataframe[0].value[gpu.name][0] == f"{expected:,}"
    assert {r["config"]["batch_size"] for r in fake_work.REQUESTS} >= {16, expected}


def _latex_terms(at) -> list[float]:
    """The signed values of the Formula page's sum, its total last."""
    import re

    substituted = next(l.value for l in at.latex if "M_{peak} &= " in l.value)
    return [float(sign.replace(" ", "") + value) for sign, value in
            re.findall(r"([-+] )?(\d+\.\d+)\\,\\mathrm\{GiB\}", substituted)]


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop", "adadelta"])
def test_formula_terms_are_their_arithmetic_and_add_up_to_the_peak(optimizer):
    from calc.facts.optimizers import slots_per_variable

    at = app({**SMALL, "optimizer": optimizer}, page="pages/formula.py")
    *terms, total = _latex_terms(at)
    profile = get_profile(make_spec("MobileNetV2", 224))
    config = dashboard_config(batch_size=16, optimizer=optimizer)
    b = estimate_memory(profile, config)
    gib = 1024**3
    # W, S and X are printed as products; each shown value is that product, worked out here.
    weights = profile.total_params * 4
    slots = slots_per_variable(config.optimizer, config.optimizer_options, 1)
    state = slots * profile.trainable_params * 4
    batch = 16 * (224 * 224 * 3 * 4 + profile.label_elements * 8)
    assert terms[0] == round(weights / gib, 3) and terms[1] == round(state / gib, 3) and terms[6] == round(batch / gib, 3)
    text = " ".join(m.value for m in at.markdown)
    assert f"{profile.total_params:,} × 4 B → **{weights / gib:.3f} GiB**" in text
    # The allocator's rounding is a term of its own: W + S + X as the walk counts them, less the products.
    rounding = b.weights_bytes + b.optimizer_state_bytes + b.input_batch_bytes - weights - state - batch
    assert terms[7] == round(rounding / gib, 3) or terms[7] == -round(-rounding / gib, 3)
    assert len(terms) == len(b.components()) + 1
    assert abs(sum(terms) - total) <= 0.0005 * len(terms)  # rounding of the shown terms only
    assert total == round(b.peak_bytes / 1024**3, 3)


@pytest.mark.parametrize("params", [{"step": "graph"}, {"step": "graph", "num_gpus": "2", "batch_size": "32"},
                                    {"step": "graph", "margin": "20"}])
def test_formula_says_the_estimators_largest_batch_for_the_graph_executor(params):
    import re

    link = {**SMALL, **params}
    estimator = metric(app(link), "Largest batch that fits")
    formula = app(link, page="pages/formula.py")
    text = " ".join(m.value for m in formula.markdown)
    assert re.search(r"Largest batch that fits .*\*\*" + re.escape(estimator) + r"\*\*", text)
    assert f"this tool's graph-executor walk says **{estimator}**" in text
    if "num_gpus" in params:
        assert any("Every term, peak and measurement on this page is one GPU's" in i.value for i in formula.info)


def test_formula_under_the_xla_step_teaches_the_walk_and_says_so():
    _, _, _, walk = engine_max_batch()
    formula = app(SMALL, page="pages/formula.py")
    text = " ".join(m.value for m in formula.markdown)
    assert f"by this formula** (the graph executor's step, global, with the 5% safety margin): **{walk:,}**" in text
    assert any("not known on this server yet" in i.value and "every number here is the walk's" in i.value
               for i in formula.info)
    plan = put_plan(plan_analysis(16))
    again = app(SMALL, page="pages/formula.py")
    from dashboard.views import fmt

    assert any(f"XLA's own plan, {fmt(plan.peak_bytes, Inputs())} at this batch (compiled)" in i.value
               for i in again.info)


def test_formula_compares_with_a_measurement_of_one_device_on_the_chosen_kernels():
    from calc.validation import GPU_TF_DATA, load_measurements

    h100 = {c["case"]: c["peak_bytes"] for c in load_measurements(GPU_TF_DATA)["cases"] if "peak_bytes" in c}
    cpu = {c["case"]: c["peak_bytes"] for c in load_measurements()["cases"] if "peak_bytes" in c}
    case = "MobileNetV2-224x224x3-top1000 b32 adam float32"

    def rows(params):
        at = app({**SMALL, **params}, page="pages/formula.py")
        return {r["rule"]: r["bytes"] for r in at.dataframe[0].value.to_dict("records")}

    # Two GPUs at a global 64: each runs batch 32, which an H100 measured alone.
    two = rows({"batch_size": "64", "num_gpus": "2"})
    measured = next(k for k in two if k.startswith("Measured"))
    assert "H100" in measured and "batch 32" in measured and two[measured] == h100[case]
    # Two GPUs at a global 32 (16 each): nothing of that was measured, so no row.
    assert not any(k.startswith("Measured") for k in rows({"batch_size": "32", "num_gpus": "2"}))
    on_cpu = rows({"batch_size": "32", "device": "cpu"})
    measured = next(k for k in on_cpu if k.startswith("Measured"))
    assert "CPU" in measured and on_cpu[measured] == cpu[case] != h100[case]


def test_presentation_mode_reveals_one_term_at_a_time_and_hands_out_the_same_lesson():
    at = app({**SMALL, "present": "true"}, page="pages/formula.py")
    assert len([m for m in at.markdown if m.value.startswith("- **")]) == 1
    assert not at.dataframe  # the rules come after the last term
    at.button(key="present_next").click().run()
    assert len([m for m in at.markdown if m.value.startswith("- **")]) == 2
    at.button(key="present_all").click().run()
    assert len([m for m in at.markdown if m.value.startswith("- **")]) == 9
    assert any("Largest batch that fits" in m.value for m in at.markdown)
    at.toggle(key="present").set_value(False).run()
    assert at.dataframe and at.query_params["present"] == "False"


def test_the_handout_holds_every_term_with_its_value_and_shows_text_as_text():
    from dashboard import lesson, views

    inputs = Inputs(model="MobileNetV2", batch_size=16)
    profile = get_profile(make_spec("MobileNetV2", 224))
    fit = views.fit_of(profile, inputs, GPU_PRESETS["t4"])
    n = lesson.formula_numbers(profile, inputs, GPU_PRESETS["t4"], None, fit, fit.max_batch)
    terms = lesson.terms(n, inputs)
    html = lesson.handout_html(n, inputs, terms, "<img src=x onerror=alert(1)>",
                               link='?model=MobileNetV2&x="><script>', made="2026-11-28", version="1.0.0")
    assert "<img" not in html and "&lt;img src=x" in html and "<script>" not in html
    assert "2026-11-28 · keras-memory-calc 1.0.0" in html and "step TensorFlow&#x27;s graph executor runs" in html
    sections = re.findall(r"<h2>(\d+)\. ", html)
    assert sections == [str(i + 1) for i in range(len(sections))] and sections[0] == "1"  # numbered from 1
    assert "<th>rule</th><th>bytes</th>" in html  # the rules table has its header row
    for term in terms:
        assert f"<td class=n>{lesson.fmt(term.nbytes, inputs, 3)}</td>" in html
    assert sum(t.nbytes for t in terms) == n.breakdown.peak_bytes


def test_formula_names_the_float16_kernel_buffers_of_the_peak_layer():
    import re

    from calc.estimate import float16_kernel_bytes

    # A small step (96 px, batch 2), where a float16 kernel's buffer is a large part of the peak.
    step = {**SMALL, "image_size": "96", "batch_size": "2", "optimizer": "adadelta", "precision": "mixed_float16"}
    at = app({**step, "device": "cpu"}, page="pages/formula.py")
    profile = get_profile(make_spec("MobileNetV2", 96))
    config = TrainingConfig(batch_size=2, optimizer="adadelta", precision="mixed_float16", device="cpu")
    b = estimate_memory(profile, config)
    assert b.peak_phase.startswith("backward ")
    buffers = float16_kernel_bytes(profile, config)[b.peak_phase.removeprefix("backward ")][1]
    assert buffers > 20 * 2**20  # the im2col buffer of a 1x1 conv's gradient (calc.facts.kernels)
    text = next(m.value for m in at.markdown if "T, backward transients" in m.value)
    line = next(l for l in text.splitlines() if "T, backward transients" in l)
    assert "float16 CPU kernels" in line and "im2col" in line
    shown = re.search(r"at the peak; ([\d.]+) GiB of it", line)
    assert shown and float(shown.group(1)) == round(buffers / 1024**3, 3)
    # A GPU (the dashboard's default) runs the step on cuDNN, which has no such buffer.
    gpu = app(step, page="pages/formula.py")
    assert not any("float16 CPU kernels" in m.value for m in gpu.markdown)
    plain = app({**step, "precision": "float32"}, page="pages/formula.py")
    assert "float16 CPU kernels" not in next(m.value for m in plain.markdown if "T, backward transients" in m.value)


def test_formula_shows_the_accumulators_and_their_reset_constants():
    from calc.estimate import accumulator_reset_parameters

    at = app({**SMALL, "optimizer": "adam", "grad_accum": "4"}, page="pages/formula.py")
    profile = get_profile(make_spec("MobileNetV2", 224))
    config = dashboard_config(batch_size=16, optimizer="adam", gradient_accumulation_steps=4)
    resets = accumulator_reset_parameters(profile, config)
    assert 0 < resets <= profile.trainable_params
    line = next(m.value for m in at.markdown if "S, optimizer state" in m.value)
    assert f"3 × {profile.trainable_params:,} + {resets:,} × 4 B" in line and "gradient accumulator" in line
    plain = app({**SMALL, "optimizer": "adam"}, page="pages/formula.py")
    assert "accumulator" not in next(m.value for m in plain.markdown if "S, optimizer state" in m.value)


def test_optimizer_options_reach_the_engine_and_the_link():
    from calc.types import OptimizerOptions

    at = app({**SMALL, "optimizer": "sgd"})
    assert not at.checkbox(key="momentum").value
    at.checkbox(key="momentum").check().run()
    at.checkbox(key="ema").check().run()
    at.number_input(key="grad_accum").set_value(4).run()
    profile = get_profile(make_spec("MobileNetV2", 224))
    gpu = GPU_PRESETS["t4"]
    config = dashboard_config(batch_size=16, optimizer="sgd", gradient_accumulation_steps=4,
                            optimizer_options=OptimizerOptions(momentum=True, use_ema=True))
    best = max_batch_size(profile, config, gpu.memory_bytes, overhead_bytes=gpu.overhead_bytes, safety_margin=0.05,
                          limit=1 << 16)
    assert metric(at, "Largest batch") == f"{best:,}"
    link = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert link["momentum"] == "True" and link["ema"] == "True" and link["grad_accum"] == "4"
    again = app(link)
    assert metric(again, "Largest batch") == f"{best:,}" and again.checkbox(key="momentum").value
    at.selectbox(key="optimizer").set_value("adam").run()  # momentum is not an Adam option: hidden, ignored
    assert not [c for c in at.checkbox if c.key == "momentum"]



def test_a_model_with_one_huge_variable_warns_that_runs_are_bimodal():
    from calc.validation import load_report

    cases = [c for c in load_report()["cases"] if "large_variable" in c["caveats"]]
    assert cases and all(c["case"].startswith("VGG") and "-top" in c["case"] for c in cases)
    at = app({**SMALL, "step": "graph", "model": "VGG16", "image_size": "224", "batch_size": "8", "optimizer": "sgd"})
    note = next(w.value for w in at.warning if "One variable of this model holds" in w.value)
    assert f"holds {4 * 7 * 7 * 512 * 4096 / 2**30:.2f} GiB" in note  # fc1: 7x7x512 inputs x 4096 units
    assert f"on {len(cases)} measured steps with such a variable" in note
    assert _record_text("large_variable", "steps with such a variable") in note
    assert not any("One variable of this model" in w.value for w in app().warning)


def test_convnext_warns_that_its_filter_gradient_request_splits_runs_and_gives_the_measured_margin():
    from calc.validation import load_report

    cases = [c for c in load_report()["cases"] if "large_fixed_request" in c["caveats"]]
    # Every ConvNeXt size has one (its widest stage's two dense 7x7 filters), in full training only.
    assert {c["case"] for c in cases} == {c["case"] for c in load_report()["cases"] if c["case"].startswith("ConvNeXt")
                                          and "frozen" not in c["case"] and "layers" not in c["case"]}
    highest = max(max(c["runs_bytes"]) / c["predicted_bytes"] - 1 for c in cases)
    step = {**SMALL, "model": "ConvNeXtTiny", "image_size": "128", "batch_size": "8", "optimizer": "adamax"}
    at = app({**step, "device": "cpu"})
    note = next(w.value for w in at.warning if "grouped depthwise convolutions" in w.value)
    assert f"asks for {2 * 4 * 49 * 768 * 768 / 2**30:.2f} GiB at once" in note  # two dense 7x7x768x768 filters
    assert f"on {len(cases)} measured steps with such a request" in note
    assert f"{min(c['relative_error'] for c in cases):+.0%} to {max(c['relative_error'] for c in cases):+.0%}" in note
    assert f"safety margin of {highest / (1 + highest):.0%}" in note
    assert not any("grouped depthwise" in w.value for w in app().warning)
    assert not any("grouped depthwise" in w.value for w in app(step).warning)  # on a GPU, cuDNN's grouped conv
    frozen = app({**SMALL, "model": "ConvNeXtTiny", "image_size": "128", "train_mode": "frozen_backbone",
                  "device": "cpu"})
    assert not any("grouped depthwise" in w.value for w in frozen.warning)


def test_the_estimator_says_it_models_the_step_without_xla_and_how_far_xla_was():
    from calc.validation import GPU_TF_REPORT, GPU_TF_XLA_REPORT, load_report

    executor, xla = load_report(GPU_TF_REPORT)["summary"], load_report(GPU_TF_XLA_REPORT)["summary"]
    lines = [c.value for c in app().caption]
    line = next(v for v in lines if "jit_compile=False" in v)
    assert f"on {executor['cases']} steps without XLA" in line and f"on {xla['cases']} steps with XLA" in line
    for s in (executor, xla):
        assert f"median {s['median_abs_error']:.0%}" in line
        assert f"{s['worst_under_prediction']:+.0%} to {s['worst_over_prediction']:+.0%}" in line


def _record_text(kind, steps):
    from calc.validation import caveat_record, load_report, record_sentence

    return record_sentence(caveat_record(load_report(), kind), steps)


def test_small_float16_steps_warn_of_the_kernel_buffer_and_its_record():
    record = _record_text("float16_buffer", "mixed_float16 steps whose peak is a float16 kernel's buffer")
    small = {**SMALL, "model": "MobileNetV3Small", "image_size": "128", "batch_size": "2", "optimizer": "sgd"}
    at = app({**small, "precision": "mixed_float16", "device": "cpu"})
    assert any("float16 kernels" in w.value and "im2col" in w.value and record in w.value for w in at.warning)
    assert not any("float16 kernels" in w.value for w in app({**small, "precision": "mixed_bfloat16",
                                                               "device": "cpu"}).warning)
    assert not any("float16 kernels" in w.value for w in app({**small, "precision": "mixed_float16"}).warning)


def test_gpu_kernels_add_the_h100_record_to_a_warning():
    from calc.validation import GPU_TF_REPORT, caveat_record, load_report, record_sentence

    gpu = record_sentence(caveat_record(load_report(GPU_TF_REPORT), "inference_layout"), "frozen or last-N steps")
    cpu = _record_text("inference_layout", "frozen or last-N steps")
    frozen = {**SMALL, "step": "graph", "train_mode": "frozen_backbone"}
    assert any(cpu in w.value and f"; with TensorFlow on an H100, {gpu}." in w.value for w in app(frozen).warning)
    on_cpu = app({**frozen, "device": "cpu"}).warning
    assert any(cpu in w.value for w in on_cpu) and not any("on an H100" in w.value for w in on_cpu)


def test_frozen_backbone_estimates_carry_their_measured_record():
    record = _record_text("inference_layout", "frozen or last-N steps")
    at = app({**SMALL, "step": "graph", "train_mode": "frozen_backbone"})
    assert any("Frozen backbone" in w.value and record in w.value for w in at.warning)
    assert not any("Frozen backbone" in w.value for w in app({**SMALL, "step": "graph"}).warning)
    # The walk's caveats are the graph executor's: not shown while the walk only stands in for XLA's plan.
    assert not any("Frozen backbone" in w.value for w in app({**SMALL, "train_mode": "frozen_backbone"}).warning)
    # Training the last N layers runs the rest in inference too (EfficientNetB2's last 40: -12 %).
    last_n = app({**SMALL, "step": "graph", "train_mode": "last_n", "last_n": "20"})
    assert any("last N layers" in w.value and record in w.value for w in last_n.warning)


# --- the XLA step: XLA's plan where one is known, the walk otherwise ------------------------

GIB = 2**30


def small_step(**fields):
    """The spec and engine config of what the dashboard shows for SMALL (plus query fields)."""
    from dashboard.loaders import spec_for
    from dashboard.state import parse_query
    from dashboard.views import config_of

    inputs, warnings = parse_query({**SMALL, **fields})
    assert not warnings
    return spec_for(inputs.model, inputs.image_size, inputs.train_mode == "frozen_backbone"), config_of(inputs)


def plan_analysis(batch, *, per_sample=50 * 2**20, fixed_temp=300 * 2**20, state=40 * 2**20):
    """A child's answer shaped like XLA's (calc.xla.plan_from_analysis): the state donated."""
    x = 96 * 96 * 3 * 4 * batch
    return {"argument_bytes": state + x, "output_bytes": state + 8, "alias_bytes": state,
            "temp_bytes": fixed_temp + per_sample * batch, "trainable_bytes": state // 4,
            "non_trainable_bytes": state // 4, "optimizer_bytes": state // 2 - 4, "metrics_bytes": 4, "batch_bytes": x,
            "build_seconds": 1.0, "compile_seconds": 2.0, "jax": "test", "keras": "test"}


def put_plan(raw, remat="", spec=None, **fields):
    """Puts a plan in the (test's own) plan cache, through calc.xla's own path; returns it."""
    from calc import xla

    small, config = small_step(**fields)
    spec = spec or small
    plan = xla.compute_plan(spec, config, "t4", remat, runner=lambda request: raw)
    assert plan.peak_bytes == raw["argument_bytes"] + raw["temp_bytes"] + raw["output_bytes"] - raw["alias_bytes"]
    return plan


def bar_chart(at):
    return charts(at)["breakdown_chart"]


def curve_chart(at):
    return charts(at)["curve_chart"]


def explained(raw, **kinds):
    """``raw`` with what fills its peak (calc.xla.peak's answer): ``kinds`` and the rest as packing."""
    kinds = {"activations": 0, "gradients": 0, "optimizer": 0, "workspace": 0, "layout_copies": 0, "other": 0,
             **kinds}
    kinds["packing"] = raw["temp_bytes"] - sum(kinds.values())
    return {**raw, "peak": {"format": 1, "temporaries_bytes": raw["temp_bytes"], "live_bytes": 0, "kinds": kinds,
                            "moment": {"instruction": "fusion.7", "layer": "conv1", "phase": "backward"},
                            "layers": [["conv1", {k: v for k, v in kinds.items() if v and k != "packing"}]]}}


def test_a_plan_that_says_what_fills_its_peak_stacks_its_kinds_in_the_bar():
    from dashboard.figures import LABELS
    from dashboard.views import fmt

    gpu = GPU_PRESETS["t4"]
    raw = plan_analysis(16)
    plan = put_plan(explained(raw, activations=raw["temp_bytes"] // 2, gradients=raw["temp_bytes"] // 8,
                              workspace=4 * 2**20))
    assert plan.explained is not None
    at = app()
    assert metric(at, "Planned peak (XLA)") == fmt(plan.peak_bytes, Inputs())
    names = [t["name"] for t in bar_chart(at)["data"]]
    assert LABELS["xla_temporaries"] not in names  # the block is split
    assert [LABELS[k] for k in ("xla_activations", "xla_gradients", "xla_workspace", "xla_packing")] == \
        [n for n in names if n in {LABELS["xla_activations"], LABELS["xla_gradients"], LABELS["xla_workspace"],
                                   LABELS["xla_packing"]}]
    assert LABELS["xla_layout_copies"] not in names  # 0 bytes: no legend entry
    needed = plan.peak_bytes + gpu.overhead_bytes + 16 * SMALL_KEPT
    assert abs(sum(t["y"][0] for t in bar_chart(at)["data"]) - needed / GIB) < 1e-9


def test_the_layers_page_shows_xla_s_plan_by_layer_and_its_totals_are_the_plans_peak():
    from dashboard.views import fmt

    raw = plan_analysis(16)
    plan = put_plan(explained(raw, activations=raw["temp_bytes"] // 2, gradients=raw["temp_bytes"] // 8))
    at = app(page="pages/layers.py")
    assert any("The first table is XLA's plan by layer" in i.value for i in at.info)
    assert any(c.value.startswith("XLA's plan peaks in the backward pass of conv1.") and
               fmt(plan.peak_bytes, Inputs()) in c.value for c in at.caption)
    table = at.dataframe[0].value
    rows = dict(zip(table["layer"], table["total (GiB)"]))
    assert rows["conv1"] == pytest.approx((raw["temp_bytes"] // 2 + raw["temp_bytes"] // 8) / GIB, abs=1e-4)
    assert set(rows) == {"conv1", "(weights)", "(optimizer state)", "(input batch)", "(heap packing)",
                         "(step outputs)"}
    assert sum(rows.values()) == pytest.approx(plan.peak_bytes / GIB, abs=1e-3)


def test_the_formula_page_teaches_xla_s_plan_term_by_term_adding_up_to_its_peak():
    from dashboard.views import fmt

    raw = plan_analysis(16)
    plan = put_plan(explained(raw, activations=raw["temp_bytes"] // 2, gradients=raw["temp_bytes"] // 8))
    at = app(page="pages/formula.py")
    assert any(h.value == "XLA's plan, with your numbers" for h in at.header)
    assert any(m.value.startswith("- **A_XLA, activations**: the forward values live when XLA's temporaries peak "
                                  "(in the backward pass of conv1)") for m in at.markdown)
    total = fmt(plan.peak_bytes, Inputs(), 3).replace(",", "{,}").replace(" GiB", r"\,\mathrm{GiB}")
    assert any(r"M_{peak} = W + O + X + A_{XLA} + G_{XLA} + H + Y" in x.value for x in at.latex)
    assert any(r"\begin{aligned} M_{peak} &= " in x.value and ("&= " + total + r"\end{aligned}") in x.value
               for x in at.latex)
    from calc import xla
    from calc.xla import plan_budget
    from dashboard import lesson, views
    from dashboard.state import parse_query
    from dashboard.xla_view import xla_answer, xla_lesson

    inputs, _ = parse_query(SMALL)
    spec, config = small_step()
    profile = get_profile(spec)
    fit = views.fit_of(profile, inputs, GPU_PRESETS["t4"])
    n = lesson.formula_numbers(profile, inputs, GPU_PRESETS["t4"], None, fit, fit.max_batch)
    answer = xla_answer(xla.known_plans(spec, config, "t4"), config.per_replica_batch,
                        plan_budget(GPU_PRESETS["t4"], 0.05))
    html = lesson.handout_html(n, inputs, lesson.terms(n, inputs), "Tesla T4",
                               xla=xla_lesson(answer, n.breakdown, inputs))
    assert "<h2>3. XLA&#x27;s plan, with your numbers</h2>" in html and "section 3 is XLA" in html
    assert f"<b>{fmt(plan.peak_bytes, inputs, 3)}</b></td></tr></table><h3>" in html
    assert "<h3>Why it differs from the walk</h3>" in html
    graph = app({**SMALL, "step": "graph"}, page="pages/formula.py")
    assert not any(h.value == "XLA's plan, with your numbers" for h in graph.header)


def test_each_step_shows_one_peak_on_the_bar_the_layers_page_and_the_formula():
    """The graph step: the walk's peak everywhere; the XLA step with a plan that says what fills it:
    the plan's peak everywhere, and the walk beside it part by part."""
    from dashboard.views import fmt

    profile, config, gpu, _ = engine_max_batch()
    walk = estimate_memory(profile, config)
    graph = {**SMALL, "step": "graph"}
    bar = sum(t["y"][0] for t in bar_chart(app(graph))["data"])
    assert bar == pytest.approx((walk.peak_bytes + gpu.overhead_bytes) / GIB, abs=1e-9)
    layers = app(graph, page="pages/layers.py")
    assert any(c.value.startswith(f"The graph executor's step peaks at {walk.peak_phase};") for c in layers.caption)
    parts = layers.dataframe[0].value
    assert list(parts["component"])[-1] == "Predicted peak (graph executor)"
    assert list(parts["bytes"])[-1] == walk.peak_bytes == sum(list(parts["bytes"])[:-1])
    formula = app(graph, page="pages/formula.py")
    assert _latex_terms(formula)[-1] == round(walk.peak_bytes / GIB, 3)
    assert not any(h.value == "Why it differs from the walk" for h in formula.subheader)

    raw = plan_analysis(16)
    activations, gradients = raw["temp_bytes"] // 2, raw["temp_bytes"] // 8
    plan = put_plan(explained(raw, activations=activations, gradients=gradients))
    bar = sum(t["y"][0] for t in bar_chart(app())["data"])
    assert bar == pytest.approx((plan.peak_bytes + gpu.overhead_bytes + 16 * SMALL_KEPT) / GIB, abs=1e-9)
    totals = app(page="pages/layers.py").dataframe[0].value["total (GiB)"]
    assert sum(totals) == pytest.approx(plan.peak_bytes / GIB, abs=1e-3)
    formula = app(page="pages/formula.py")
    assert _latex_terms(formula)[-1] == round(plan.peak_bytes / GIB, 3)  # XLA's section comes first
    versus = formula.dataframe[0].value
    rows = {part: (w, x, d) for part, w, x, d in zip(versus["part"], versus["graph-executor walk"],
                                                      versus["XLA's plan"], versus["XLA − walk"])}
    inputs = Inputs()
    assert rows["peak"][:2] == (fmt(walk.peak_bytes, inputs, 3), fmt(plan.peak_bytes, inputs, 3))
    assert rows["activations"] == (fmt(walk.activations_bytes, inputs, 3), fmt(activations, inputs, 3),
                                   "−" + fmt(walk.activations_bytes - activations, inputs, 3))
    assert rows["gradients, and the backward's temporaries"][:2] == (
        fmt(walk.gradients_bytes + walk.backward_transient_bytes, inputs, 3), fmt(gradients, inputs, 3))
    assert "cuDNN and cuBLAS workspace" not in rows  # neither holds any
    why = next(m.value for m in formula.markdown if m.value.startswith("XLA's plan ("))
    assert f"the walk keeps {fmt(walk.activations_bytes, inputs, 3)} of activations" in why
    assert f"{fmt(walk.activations_bytes - activations, inputs, 3)} fewer" in why


def test_presentation_mode_teaches_the_step_the_sidebar_chose():
    raw = plan_analysis(16)
    plan = put_plan(explained(raw, activations=raw["temp_bytes"] // 2, gradients=raw["temp_bytes"] // 8))
    kinds = [k for k, v in plan.breakdown().items() if v]
    at = app({**SMALL, "present": "true"}, page="pages/formula.py")
    assert [h.value for h in at.header] == ["XLA's plan, with your numbers"]
    assert any(c.value == f"Term 1 of {len(kinds)}" for c in at.caption)
    at.button(key="present_all").click().run()
    assert any(c.value == f"Term {len(kinds)} of {len(kinds)}" for c in at.caption)
    assert _latex_terms(at)[-1] == round(plan.peak_bytes / GIB, 3)
    assert any(m.value.startswith("XLA's plan (") for m in at.markdown)
    graph = app({**SMALL, "step": "graph", "present": "true"}, page="pages/formula.py")
    assert [h.value for h in graph.header] == ["1. What this tool computes"]
    assert any(c.value == "Term 1 of 9" for c in graph.caption)


def test_a_known_plan_replaces_the_walk_in_the_metrics_verdict_and_charts():
    from dashboard.figures import LABELS
    from dashboard.views import fmt

    gpu = GPU_PRESETS["t4"]
    plan = put_plan(plan_analysis(16, fixed_temp=20 * GIB))  # more than a T4: the walk says it fits
    other = put_plan(plan_analysis(8, fixed_temp=20 * GIB), batch_size="8")  # a cached plan at another batch
    at = app()
    assert metric(at, "Planned peak (XLA)") == fmt(plan.peak_bytes, Inputs())
    assert not [m for m in at.metric if m.label.startswith("Predicted peak")]
    needed = plan.peak_bytes + gpu.overhead_bytes + 16 * SMALL_KEPT
    usable = int(gpu.memory_bytes * (1 - xla_margin()))
    assert needed > usable and at.error and at.error[0].value.startswith("Does not fit")
    assert (f"framework overhead (CUDA context, libraries) + {fmt(16 * SMALL_KEPT, Inputs())} kept free for what the "
            f"card adds to XLA's plan = {fmt(needed, Inputs())}") in at.error[0].value
    assert f"of {fmt(usable, Inputs())}" not in at.error[0].value and fmt(usable, Inputs()) in at.error[0].value
    # Neither known plan fits: the largest batch is the plans' bound; compiles are off here, so no search is
    # under way and the label does not say one is.
    assert metric(at, "Largest batch that fits (XLA plans known, not settled)") == "< 8"  # the smallest does not fit
    bars = bar_chart(at)
    assert {t["name"] for t in bars["data"]} == {LABELS[k] for k, v in plan.components().items() if v} | {
        LABELS["framework_overhead"], LABELS["kept_free"]}  # no part of 0 bytes (nothing outside the step here)
    assert LABELS["xla_temporaries"] == "XLA temporaries (activations, gradients, scratch)"
    assert abs(sum(t["y"][0] for t in bars["data"]) - needed / GIB) < 1e-9
    curve = curve_chart(at)
    assert curve["data"][0]["name"] == "graph-executor walk (jit_compile=False)"
    assert curve["layout"]["xaxis"].get("type") in (None, "linear")  # a line looks like a line
    points = next(t for t in curve["data"] if t["name"] == "XLA plan (compiled)")
    expected = {8: (other.peak_bytes + gpu.overhead_bytes + 8 * SMALL_KEPT) / GIB, 16: needed / GIB}
    assert dict(zip(points["x"], points["y"])) == pytest.approx(expected)
    assert any("XLA's own memory plan" in c.value and "jit_compile=True" in c.value for c in at.caption)
    assert any("circles are plans compiled at that batch (2 so far)" in c.value for c in at.caption)
    # The walk's caveats and accuracy describe the graph executor: not shown beside the plan.
    assert not any(c.value.startswith("Accuracy on") for c in at.caption)


def test_between_two_compiled_plans_the_plan_is_drawn_and_says_so():
    from dashboard.views import fmt

    low, high = put_plan(plan_analysis(8), batch_size="8"), put_plan(plan_analysis(32), batch_size="32")
    at = app({**SMALL, "batch_size": "20"})
    drawn = low.peak_bytes + (high.peak_bytes - low.peak_bytes) * (20 - 8) // (32 - 8)
    assert metric(at, "Planned peak (XLA, drawn from 8 and 32)") == fmt(drawn, Inputs())
    assert at.success and at.success[0].value.startswith("Fits")
    line = next(t for t in curve_chart(at)["data"] if t["name"] == "XLA plan, drawn between compiled plans")
    assert 20 in line["x"] and line["y"][line["x"].index(20)] == pytest.approx(
        (drawn + GPU_PRESETS["t4"].overhead_bytes + 20 * SMALL_KEPT) / GIB)
    # The Formula and Layers pages explain the drawn plan from the two compiled plans, with their numbers.
    per = (high.peak_bytes - low.peak_bytes) / (32 - 8)
    said = (f"XLA's plan at batch 20 is drawn, not compiled, on the line through the plans compiled at batches 8 "
            f"({fmt(low.peak_bytes, Inputs(), 3)}) and 32 ({fmt(high.peak_bytes, Inputs(), 3)}): each sample adds "
            f"({fmt(high.peak_bytes, Inputs(), 3)} − {fmt(low.peak_bytes, Inputs(), 3)}) ÷ (32 − 8) = "
            f"{fmt(per, Inputs(), 4)}, so batch 20 plans {fmt(low.peak_bytes, Inputs(), 3)} + (20 − 8) × "
            f"{fmt(per, Inputs(), 4)} = {fmt(drawn, Inputs(), 3)}.")
    for page in ("pages/formula.py", "pages/layers.py"):
        assert any(said in i.value for i in app({**SMALL, "batch_size": "20"}, page=page).info), page


def test_step_graph_shows_the_walk_even_where_a_plan_is_known():
    from dashboard.views import fmt

    put_plan(plan_analysis(16))
    at = app({**SMALL, "step": "graph"})
    profile, config, _, best = engine_max_batch()
    assert metric(at, "Predicted peak (graph executor)") == fmt(estimate_memory(profile, config).peak_bytes, Inputs())
    assert metric(at, "Largest batch") == f"{best:,}"
    assert not [m for m in at.metric if m.label.startswith("Planned")]
    assert not [s for s in at.selectbox if s.key == "remat"]  # remat is the XLA step's
    assert not [t for t in curve_chart(at)["data"] if t["name"] == "XLA plan (compiled)"]
    assert at.radio(key="step").value == "graph"
    at.radio(key="step").set_value("xla").run()
    assert metric(at, "Planned peak (XLA)") and at.selectbox(key="remat").value == "none"


def test_remat_shows_its_saving_against_the_plan_without_it():
    from dashboard.views import fmt

    base = put_plan(plan_analysis(16))
    remat = put_plan(plan_analysis(16, per_sample=20 * 2**20), "full")
    at = app({**SMALL, "remat": "full"})
    shown = next(m for m in at.metric if m.label == "Planned peak (XLA, remat full)")
    assert shown.value == fmt(remat.peak_bytes, Inputs())
    saving = base.peak_bytes - remat.peak_bytes
    assert shown.delta == f"{-saving / GIB:+,.2f} GiB against no remat"
    assert any(f"{fmt(saving, Inputs())} ({saving / base.peak_bytes:.1%}) less" in c.value for c in at.caption)


def test_bad_remat_in_the_link_falls_back_to_none():
    at = app({**SMALL, "remat": "bogus"})
    assert any(displayed(w.value) == "Ignored remat='bogus' from the link: using 'none'." for w in at.warning)
    assert at.selectbox(key="remat").value == "none"


@pytest.mark.parametrize("params, why", [
    ({"source": "summary"}, "a pasted summary is only its table"),
    ({"device": "cpu"}, "with CPU kernels"),
    ({"gpu": "custom", "gpu_memory_gib": "16"}, "a custom size names none"),
])
def test_where_no_plan_applies_the_walk_is_shown_with_one_line_why(params, why):
    put_plan(plan_analysis(16))
    at = app({**SMALL, **params})
    if params.get("source") == "summary":
        from tests.test_summary_text import KERAS2

        at.text_area(key="summary_text").input(KERAS2).run()
    assert not at.exception
    assert any(why in i.value and "graph-executor walk" in i.value for i in at.info)
    assert metric(at, "Predicted peak (graph executor)")
    assert (at.success or at.error) and metric(at, "Largest batch that fits (graph-executor walk)")


def test_without_a_plan_the_walk_stands_in_named_as_such_and_a_verdict_comes_only_on_a_bound():
    at = app()
    assert any("CALC_XLA_COMPILES=off" in i.value for i in at.info)
    assert metric(at, "Predicted peak (walk, until XLA's plan)")
    assert metric(at, "Largest batch (walk, until XLA's plans)")  # compiles are off: no plan will come
    # Batch 16 fits a T4 even at the most XLA's step took of the walk's peak on the steps measured: said at once.
    assert at.success and at.success[0].value.startswith("Fits: on the 32 steps measured on an H100, TensorFlow's "
                                                         "XLA step took at most")
    # At 250 the walk's peak is about 15 GiB: within that range the step may fit a T4 or not, so no verdict yet.
    edge = app({**SMALL, "batch_size": "250"})
    assert not edge.success and not edge.error
    assert any(i.value.startswith("XLA's plan of this batch is not known yet") and "no verdict" in i.value
               for i in edge.info)


@pytest.fixture
def compiles(monkeypatch, _own_xla_plans):
    """Compiles on, each answered by ``answer(batch)`` (once ``gate`` opens) on the test's own work service;
    ``fake_work.REQUESTS`` holds what was asked."""
    from tests import fake_work

    def start(answer=plan_analysis, gate=None):
        fake_work.ANSWER, fake_work.GATE = answer, gate
        return _own_xla_plans

    monkeypatch.setenv("CALC_XLA_COMPILES", "on")
    yield start


def _wait_idle(service, timeout_s=60.0):
    assert service.wait_idle(timeout_s)


def test_a_compile_runs_in_the_background_and_its_plan_replaces_the_walk(compiles):
    import threading

    from calc import xla
    from dashboard.views import fmt

    gate = threading.Event()
    service = compiles(gate=gate)
    try:
        at = app()
        progress = [c.value for c in at.caption if "XLA's plan at batch 16" in c.value]
        assert progress and (progress[0].startswith("Compiling") or progress[0].startswith("Queued"))
        assert metric(at, "Predicted peak (walk, until XLA's plan)")  # the walk meanwhile; the verdict on the
        assert at.success and "took at most" in at.success[0].value  # range XLA's step took of it, said so
        assert metric(at, "Largest batch that fits (XLA, searching)") == "…"  # not the walk's number meanwhile
    finally:
        gate.set()
    wait_for(lambda: service.finished >= 1, timeout_s=30)
    first = fake_work.REQUESTS[0]
    assert first["target"] == "t4" and first["remat"] is None and first["config"]["batch_size"] == 16
    at.run()
    assert not at.exception
    expected = xla.plan_from_analysis(plan_analysis(16), "t4").peak_bytes
    assert metric(at, "Planned peak (XLA)") == fmt(expected, Inputs())


def test_the_largest_batch_is_xlas_searched_without_a_button_and_every_page_agrees(compiles):
    from calc import xla
    from calc.xla import settle_width
    import calc.service

    service = compiles()
    at = app()
    assert not [b for b in at.button if b.key == "xla_max_batch"]
    _wait_idle(service)
    at.run()
    at.run()  # the search's compiles were asked on the first run; the page now reads them all
    _wait_idle(service)
    at.run()
    # The fake plan grows linearly: peak(b) = fixed part + b x (per-sample temporaries + input).
    gpu = GPU_PRESETS["t4"]
    budget = int(gpu.memory_bytes * (1 - xla_margin())) - gpu.overhead_bytes
    peak = lambda b: xla.plan_from_analysis(plan_analysis(b), "t4").peak_bytes  # noqa: E731
    expected = max(b for b in range(1, 2000) if peak(b) + b * SMALL_KEPT <= budget)
    assert metric(at, "Largest batch that fits (XLA plans, compiled)") == f"{expected:,}"
    assert f"largest that fits: {expected:,}" in [t["name"] for t in curve_chart(at)["data"]]
    points = next(t for t in curve_chart(at)["data"] if t["name"] == "XLA plan (compiled)")
    assert expected in points["x"] and any(expected < b <= expected + settle_width(expected) for b in points["x"])
    # Every page gives the same answer for the same link, also after a restart (a new service,
    # no Streamlit cache): the plans are on disk.
    from calc.cluster import worker

    restarted = calc.service.WorkService(fake_work.local_engine, functions={"plan": fake_work.plan,
                                                                           "build": worker.build})
    calc.service._service, old = restarted, calc.service._service
    try:
        st.cache_data.clear()
        st.cache_resource.clear()
        again = app()
        assert metric(again, "Largest batch that fits (XLA plans, compiled)") == f"{expected:,}"
        formula = app(page="pages/formula.py")
        assert any(f"its largest batch on {gpu.name}, {expected:,}," in i.value for i in formula.info)
        compare = app({**SMALL, "models": "MobileNetV2", "gpus": "t4"}, page="pages/compare.py")
        assert compare.dataframe[0].value[gpu.name][0] == f"{expected:,}"
        layers = app(page="pages/layers.py")
        assert any("walk's ledger" in i.value and "its plan for this batch is" in i.value for i in layers.info)
    finally:
        restarted.shutdown()
        calc.service._service = old


def test_every_page_says_which_step_its_numbers_describe():
    from calc.validation import GPU_TF_XLA_DATA, load_report, plan_report_path

    assert any("graph executor runs it" in c.value and "jit_compile=False" in c.value
               for c in app(page="pages/formula.py").caption)
    assert any("graph-executor walk" in c.value for c in app({**SMALL, "step": "graph"}, page="pages/compare.py").caption)
    assert any("The largest batches are XLA's" in c.value and "`jit_compile=False`" in c.value
               for c in app(page="pages/compare.py").caption)
    at = app(page="pages/validation.py")
    assert any(c.value.startswith("Which step each table describes") for c in at.caption)
    # It starts with what a newcomer asks: how good the number shown is, for the step chosen.
    assert at.subheader[0].value == "How good is the number you are shown?"
    cpu = app({**SMALL, "step": "graph", "device": "cpu"}, page="pages/validation.py")
    assert cpu.info[0].value.startswith("Accuracy on") and "TensorFlow CPU allocator peak" in cpu.info[0].value
    try:
        report = load_report(plan_report_path(GPU_TF_XLA_DATA))
    except OSError:
        assert any("not scored here yet" in c.value for c in at.caption)
        return
    s = report["summary"]
    assert any(m.value.startswith("XLA, jit_compile=True, against XLA's own plan")
               and f"{s['cases']} steps, median error {s['median_abs_error']:.1%}" in m.value for m in at.markdown)
    assert any(list(d.value.columns)[:2] == ["case", "measured_bytes"]
               and list(d.value["predicted_bytes"]) == [c["predicted_bytes"] for c in report["cases"]]
               for d in at.dataframe)


def test_a_failed_compile_is_one_line_and_the_walk_stays(compiles):
    from calc import xla

    def refused(batch):
        raise xla.PlanError("XLA could not compile this step: out of registers")

    service = compiles(answer=refused)
    at = app()
    _wait_idle(service)
    at.run()
    assert not at.exception
    assert "No XLA plan for this step: XLA could not compile this step: out of registers. This shows the " \
           "graph-executor walk (jit_compile=False)." in [w.value for w in at.warning]
    assert metric(at, "Predicted peak (graph executor)")


def test_compare_keeps_its_models_and_gpus_in_the_link_and_across_pages():
    at = app({**SMALL, "models": "ResNet50,VGG16", "gpus": "t4,h100-80"}, page="pages/compare.py")
    assert at.multiselect(key="compare_models").value == ["ResNet50", "VGG16"]
    assert at.multiselect(key="compare_gpus").value == ["t4", "h100-80"]
    assert [c for c in at.dataframe[0].value.columns][-2:] == [GPU_PRESETS["t4"].name, GPU_PRESETS["h100-80"].name]
    at.multiselect(key="compare_models").select("MobileNetV2").run()
    assert at.query_params["models"] == "ResNet50,VGG16,MobileNetV2"
    at.switch_page("pages/estimator.py").run()
    at.switch_page("pages/compare.py").run()
    assert at.multiselect(key="compare_models").value == ["ResNet50", "VGG16", "MobileNetV2"]
    assert at.query_params["gpus"] == "t4,h100-80"
    # A bad list in a link falls back to the page's choice, with the one-line warning.
    bad = app({**SMALL, "models": "ResNet50,NoSuchNet"}, page="pages/compare.py")
    assert any("Ignored models=" in w.value for w in bad.warning)
    assert bad.multiselect(key="compare_models").value == ["MobileNetV2", "EfficientNetB0"]


def test_a_warning_about_a_link_value_goes_once_the_visitor_sets_it():
    at = app({**SMALL, "batch_size": "abc", "optimizer": "nope"})
    assert sum("Ignored" in w.value for w in at.warning) == 2
    at.number_input(key="batch_size").set_value(24).run()
    assert [w.value for w in at.warning if "Ignored" in w.value] == [
        next(w.value for w in at.warning if "optimizer" in w.value)]
    at.selectbox(key="optimizer").set_value("sgd").run()
    at.switch_page("pages/layers.py").run()
    assert not any("Ignored" in w.value for w in at.warning)


def breakdown_rows(at) -> list[list[str]]:
    """The cells of the Estimator's breakdown table (a Markdown table), header first."""
    table = next(m.value for m in at.markdown if m.value.startswith("| component |"))
    lines = table.splitlines()
    assert re.fullmatch(r"\| :--- \| ---: \| ---: \|", lines[1]), lines[1]  # names left, numbers right
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in [lines[0], *lines[2:]]]


def test_the_breakdown_table_names_its_rows_as_the_chart_and_shows_every_row():
    at = app()
    header, *rows = breakdown_rows(at)
    assert header == ["component", "bytes", "GiB"]
    *rows, last = rows
    assert all(cell.startswith("**") and cell.endswith("**") for cell in last)  # what the GPU must hold, in bold
    rows.append([cell.strip("*") for cell in last])
    bars = bar_chart(at)
    peak_label, needed_label = at.metric[0].label, plain("Needed on the GPU (peak + overhead)")
    labels = [r[0] for r in rows]
    # The parts under the legend's names, in its order, then the peak and what the GPU must hold.
    assert [name for name in labels if name not in (plain(peak_label), needed_label)] == \
        [plain(t["name"]) for t in bars["data"]]
    assert labels[-1] == needed_label and labels[-2] == plain("Framework overhead (CUDA context, libraries)")
    # Bytes with thousands separators, the unit with 3 decimals.
    assert all(re.fullmatch(r"\d{1,3}(,\d{3})*", r[1]) and re.fullmatch(r"\d+\.\d{3}", r[2]) for r in rows)
    by_name = {r[0]: int(r[1].replace(",", "")) for r in rows}
    for trace in bars["data"]:
        assert by_name[plain(trace["name"])] / GIB == pytest.approx(trace["y"][0])
    assert by_name[needed_label] == by_name[plain(peak_label)] + \
        by_name[plain("Framework overhead (CUDA context, libraries)")]
    assert [r[2] for r in rows] == [f"{int(r[1].replace(',', '')) / GIB:.3f}" for r in rows]


def test_measure_now_answers_under_its_button_and_stars_its_point_in_the_chart(monkeypatch):
    from types import SimpleNamespace

    from calc.types import Device
    from dashboard import measure_now

    measured = 900 * 2**20
    monkeypatch.setenv("CALC_MEASURE_NOW", "on")
    monkeypatch.setattr(measure_now, "measure_training_step",
                        lambda spec, config, **kw: SimpleNamespace(peak_bytes=measured, kernels="cpu"))
    at = app({**SMALL, "device": "cpu"}, page="pages/validation.py")
    at.button(key="measure_now").click().run()
    assert not at.exception, [e.value for e in at.exception]
    predicted = estimate_memory(get_profile(make_spec("MobileNetV2", 224)),
                                TrainingConfig(batch_size=16, optimizer="adam", device=Device.CPU)).peak_bytes
    # Right under the button (and the status box that folds up), not inside the box.
    below = list(at.main.children.values())
    button = next(i for i, e in enumerate(below) if getattr(e, "key", None) == "measure_now")
    assert [e.type for e in below[button + 1:]] == ["status", "success"]
    assert below[-1].value.startswith(f"Measured 0.879 GiB ({measured:,} bytes); predicted "
                                      f"{predicted / GIB:,.3f} GiB ({predicted:,} bytes), "
                                      f"{(predicted - measured) / measured:+.1%} against the measurement.")
    # The chart at the top has the point in the same run, starred and labelled.
    chart = next(iter(charts(at).values()))
    point = next(t for t in chart["data"] if t["name"] == "measured now")
    assert point["x"] == pytest.approx([measured / GIB]) and point["y"] == pytest.approx([predicted / GIB])
    assert point["marker"]["symbol"] == "star" and "text" in point["mode"]
    assert point["text"] == ["MobileNetV2 224px b16 adam float32 on cpu"]


def test_the_small_model_is_worked_out_by_hand_beside_its_measurement():
    import re
    from math import prod

    from calc.validation import CUSTOM_DATA, load_measurements

    at = app(page="pages/formula.py")
    table = at.dataframe[-1].value
    assert list(table["layer"])[:2] == ["conv2d (Conv2D)", "conv2d_1 (Conv2D)"]
    for row in table.to_dict("records"):  # every cell is its own arithmetic
        assert row["parameters"] == sum(int(e.replace(",", "")) for e in row["weights (elements)"].split(" + "))
        *factors, product = re.split(r" × | = ", row["values per sample"])
        assert int(product.replace(",", "")) == prod(int(f) for f in factors or [product.replace(",", "")])
    params = int(table["parameters"].sum())
    text = " ".join(m.value for m in at.markdown)
    assert f"{params:,} × 4 B → **{params * 4:,} B**" in text and f"2 × {params:,} × 4 B → **{params * 8:,} B**" in text
    assert "128 × 784 × 4 B, and the integer labels 128 × 1 × 8 B → **402,432 B**" in text
    measured = next(c["peak_bytes"] for c in load_measurements(CUSTOM_DATA)["cases"]
                    if c["case"] == "mnist_cnn.keras b128 adam float32")
    assert f"TensorFlow measured **{measured:,} B** on a CPU" in text


# --- KerasHub models: XLA's plan alone ----------------------------------------------------

HUB = {"source": "hub", "hub": "gemma2_2b_en", "seq_len": "512", "lora_rank": "4", "batch_size": "1",
       "optimizer": "adamw", "gpu": "l4"}
# Gemma 2 2B: 26 layers over 2,304, 8 query heads and 4 key-value heads of 256. LoRA rank 4 on query
# (8, 2304, 256) and value (4, 2304, 256): A of (heads, 2304, 4) and B of (4, 256) each.
HUB_LORA = 26 * 4 * ((8 * 2304 + 256) + (4 * 2304 + 256))


def put_hub_plan(raw, **fields):
    from calc import xla
    from dashboard.state import parse_query
    from dashboard.views import config_of
    from dashboard.xla_step import hub_spec_of

    inputs, warnings = parse_query({**HUB, **fields})
    assert not warnings
    return xla.compute_plan(hub_spec_of(inputs), config_of(inputs), inputs.gpu, runner=lambda request: raw)


def hub_analysis(batch):
    """A child's answer shaped like a KerasHub LoRA step's: frozen bfloat16 weights, float32 adapters."""
    trainable, frozen = 4 * HUB_LORA, 2 * 2_614_341_888
    state = trainable + frozen + 2 * trainable + 8 + 16
    tokens = 2 * 4 * 512 * batch + 512 * batch  # token ids, padding mask, labels; the sample weights
    return {"argument_bytes": state + tokens, "output_bytes": state + 8, "alias_bytes": state,
            "temp_bytes": 1_500_000_000 * batch, "trainable_bytes": trainable, "non_trainable_bytes": frozen,
            "optimizer_bytes": 2 * trainable + 8, "metrics_bytes": 16, "batch_bytes": tokens,
            "build_seconds": 4.0, "compile_seconds": 20.0, "jax": "test", "keras": "test"}


def test_a_kerashub_link_shows_xla_s_plan_with_what_trains_and_what_stays_frozen():
    from dashboard.figures import LABELS
    from dashboard.views import fmt

    plan = put_hub_plan(hub_analysis(1))
    at = app(HUB)
    assert not at.exception
    assert metric(at, "Planned peak (XLA)") == fmt(plan.peak_bytes, Inputs())
    assert any(c.value.startswith("gemma2_2b_en: 2,614,341,888 parameters (Gemma); 512 tokens per example; LoRA "
                                  f"rank 4 on every layer's query and value: {HUB_LORA:,} parameters train in "
                                  "float32") for c in at.caption)
    bars = {t["name"]: t["y"][0] for t in bar_chart(at)["data"]}
    assert bars[LABELS["trainable_weights"]] == pytest.approx(4 * HUB_LORA / GIB)
    assert bars[LABELS["frozen_weights"]] == pytest.approx(2 * 2_614_341_888 / GIB)
    assert LABELS["weights"] not in bars
    gpu = GPU_PRESETS["l4"]
    assert sum(bars.values()) == pytest.approx((plan.peak_bytes + gpu.overhead_bytes + HUB_KEPT) / GIB, abs=1e-9)
    # The verdict keeps free one logits buffer, then what the KerasHub steps measured on an H200 took beyond
    # their plans on record and that buffer, then the user's 5 %.
    planned = {c["case"]: c["predicted_peak_bytes"] for c in json.loads(Path("validation/planned.json").read_text())[
        "cases"] if c.get("set") == "hub_gpu"}
    vocabulary = {m["preset"]: m["backbone"].get("vocabulary_size", 0) if m["task"] == "causal_lm" else 0
                  for m in json.loads(Path("calc/data/hub_models.json").read_text())["models"]}
    runs = json.loads(Path("calc/data/hub_gpu_h200.json").read_text())["cases"]
    logits = {c["case"]: c["config"]["batch_size"] * c["spec"]["hub"]["sequence_length"] * 2
              * vocabulary[c["spec"]["hub"]["preset"]] for c in runs}
    residual = max(0.0, *(1 - planned[c["case"]] / (c["peak_bytes"] - logits[c["case"]]) for c in runs))
    assert any(c.value.startswith(f"XLA's verdict and largest batch keep free, beside the plan: "
                                  f"{fmt(HUB_KEPT, Inputs())} for one buffer of the step's logits") and
               f"{residual:.1%} of the card, the most the {len(runs)} KerasHub steps measured on an H200" in c.value
               and "your 5% margin on top" in c.value for c in at.caption)
    assert f"{residual + 0.05:.1%}" in at.success[0].value + "".join(e.value for e in at.error)  # the verdict's
    assert {k: at.query_params[k][0] if isinstance(at.query_params[k], list) else at.query_params[k]
            for k in ("source", "hub", "seq_len", "lora_rank")} == {"source": "hub", "hub": "gemma2_2b_en",
                                                                    "seq_len": "512", "lora_rank": "4"}
    layers = app(HUB, page="pages/layers.py")
    assert any("What fills this KerasHub model's plan is not known on this server yet" in i.value
               for i in layers.info)
    compare = app(HUB, page="pages/compare.py")
    assert not compare.exception and pd_rows(compare.dataframe[1].value)["gemma2_2b_en"][gpu.name] == \
        fmt(plan.peak_bytes, Inputs())  # Compare: the same plan as the Estimator's metric, beside other presets
    validation = app(HUB, page="pages/validation.py")
    assert not validation.exception and any("On an H200, 8 KerasHub steps ran as a user runs them" in i.value
                                            for i in validation.info)
    # The KerasHub steps predicted before a GPU measures them, as validation/planned.json has them.
    planned = {c["case"]: c["predicted_peak_bytes"] for c in json.loads(Path("validation/planned.json").read_text())[
        "cases"] if c.get("set") == "hub_gpu"}
    shown = validation.dataframe[0].value
    assert dict(zip(shown["case"], shown["predicted_bytes"])) == planned and len(planned) >= 6
    # Beside each, what the H200 measured, as the measurement files hold it.
    for name, column in (("hub_gpu_h200.json", "measured, autotuner on"),
                         ("hub_gpu_h200_noautotune.json", "measured, autotuner off")):
        measured = {c["case"]: c["peak_bytes"] for c in json.loads(Path("calc/data", name).read_text())["cases"]}
        assert {c: v for c, v in zip(shown["case"], shown[column]) if v == v and v is not None} == measured
    assert not any(s.value == "Measure this configuration now" for s in validation.subheader)
    for lang, start in (("ja", "gemma2_2b_en: パラメータ 2,614,341,888 個 (Gemma)"),
                        ("ko", "gemma2_2b_en: 파라미터 2,614,341,888개 (Gemma)")):
        there = app({**HUB, "lang": lang})
        assert any(c.value.startswith(start) for c in there.caption) and len(bar_chart(there)["data"]) == len(bars)


def test_a_kerashub_mesh_link_shows_one_cards_plan_and_says_what_the_mesh_is():
    """``model_parallel=2&num_gpus=2``: a 2x2 mesh of four L4s. The plan is one card's (as the worker's SPMD plan
    says it), the verdict is each card's, and the caption names the mesh and what its axes do."""
    from dashboard.views import fmt

    mesh = {"model_parallel": "2", "num_gpus": "2", "batch_size": "2"}
    plan = put_hub_plan(hub_analysis(1), **mesh)
    at = app({**HUB, **mesh})
    assert metric(at, "Planned peak (XLA)") == fmt(plan.peak_bytes, Inputs())
    assert any(c.value.startswith("A 2x2 mesh of 4 GPUs on 1 host(s): 2 replica(s) of the batch, each over 2 cards "
                                  "that share the weights by the preset's layout map") for c in at.caption)
    assert any("each of the 4 GPUs (batch 1 each)" in v.value for v in [*at.success, *at.error])
    # A catalogue model has no layout map: its mesh is data parallel, whatever the link says.
    assert views_config({**SMALL, **mesh}).model_parallel == 1
    # On a 1x2 mesh a card keeps half of the logits free: the model axis splits Gemma's head, its token embedding.
    put_hub_plan(hub_analysis(1), model_parallel="2")
    split = app({**HUB, "model_parallel": "2"})
    assert any(f"{fmt(HUB_KEPT // 2, Inputs())} for one buffer of the step's logits" in c.value
               and "on this mesh one card's share, 1/2 × a replica's logits" in c.value for c in split.caption)


def test_a_quantized_kerashub_plan_shows_its_kernels_and_scales_apart():
    """int8: the bar splits the frozen weights into the 8-bit kernels and their scales, as the plan says, and the
    caption says the backbone was quantized as Keras quantizes it."""
    from dashboard.figures import LABELS

    raw = {**hub_analysis(1), "quantized_bytes": 2_600_000_000, "scale_bytes": 1_900_000}
    raw["non_trainable_bytes"] = 2_600_000_000 + 1_900_000 + 5_000_000
    plan = put_hub_plan(raw, quantize="int8")
    at = app({**HUB, "quantize": "int8"})
    bars = {t["name"]: t["y"][0] for t in bar_chart(at)["data"]}
    assert bars[LABELS["quantized_weights"]] == pytest.approx(2_600_000_000 / GIB)
    assert bars[LABELS["quantization_scales"]] == pytest.approx(1_900_000 / GIB)
    assert bars[LABELS["frozen_weights"]] == pytest.approx(5_000_000 / GIB)
    assert bars[LABELS["trainable_weights"]] == pytest.approx(4 * HUB_LORA / GIB)
    assert sum(bars.values()) == pytest.approx((plan.peak_bytes + GPU_PRESETS["l4"].overhead_bytes + HUB_KEPT) / GIB)
    assert any('quantized first as model.quantize("int8") quantizes it (its frozen kernels in 8-bit integers'
               in c.value for c in at.caption)


def test_the_estimator_names_the_fewest_cards_the_compiled_plans_say_fit():
    """Plans compiled for one card (30 GB a card: too much for an L4) and for a 1x2 mesh (fits): the Estimator says
    two L4s are the fewest, with one card's bytes on the mesh; with the 1x2 plan unknown it says nothing."""
    from dashboard.views import fmt

    one = {**hub_analysis(1), "temp_bytes": 30 * 10**9}
    put_hub_plan(one)
    assert not any(c.value.startswith("Fewest") for c in app(HUB).caption)
    two = put_hub_plan(hub_analysis(1), model_parallel="2")
    at = app(HUB)
    kept = HUB_KEPT // 2  # on the 1x2 mesh a card's half of the logits: the model axis splits Gemma's tied head
    assert any(c.value.startswith(f"Fewest L4 24 GB that train this at batch 1: 2 (a 1x2 mesh, "
                                  f"{fmt(two.peak_bytes + kept, Inputs())} a card with the bytes kept free), from "
                                  "XLA's plans compiled for 1, 2 card(s)") for c in at.caption)


def test_the_formula_teaches_a_quantized_step_on_a_mesh_term_by_term():
    """int8 on a 1x2 mesh: the quantized kernels, their scales and the other weights are terms of their own, the
    terms still add up to the plan's peak, and the lesson says what the mesh splits and what it leaves whole."""
    from dashboard.hub_lesson import hub_lesson
    from dashboard.state import parse_query
    from dashboard.views import config_of
    from dashboard.xla_step import hub_spec_of, xla_answer_for

    fields = {"quantize": "int8", "model_parallel": "2"}
    raw = {**hub_analysis(1), "quantized_bytes": 1_300_000_000, "scale_bytes": 900_000}
    raw["non_trainable_bytes"] = 1_300_000_000 + 900_000 + 2_000_000
    plan = put_hub_plan(raw, **fields)
    inputs, _ = parse_query({**HUB, **fields})
    taught = hub_lesson(xla_answer_for(inputs, GPU_PRESETS["l4"]), hub_spec_of(inputs), config_of(inputs), inputs)
    terms = {t.symbol: t.nbytes for t in taught.terms}
    assert (terms["W_q"], terms["S_q"], terms["W"]) == (1_300_000_000, 900_000, 2_000_000 + 4 * HUB_LORA)
    assert sum(terms.values()) == plan.peak_bytes == taught.peak_bytes
    assert "On this 1x2 mesh every number is one card's" in taught.why
    at = app({**HUB, **fields}, page="pages/formula.py")
    assert _latex_terms(at)[-1] == round(plan.peak_bytes / GIB, 3)


def test_compare_answers_kerashub_presets_on_the_sidebars_mesh_and_quantization():
    """Compare takes the sidebar's mesh and quantization for every preset: it says the numbers are one card's of
    the mesh, and its "trains" column names the quantized weights LoRA trains on."""
    at = app({**HUB, "model_parallel": "2", "quantize": "int8"}, page="pages/compare.py")
    assert any(c.value.startswith("A 1x2 mesh of 2 GPUs on 1 host(s)") for c in at.caption)
    trains = pd_rows(at.dataframe[0].value)["gemma2_2b_en"]["trains"]
    assert trains == f"LoRA 4: {HUB_LORA:,} trainable, on int8 weights"


def test_compare_doubles_the_cards_sharing_the_weights_until_one_fits():
    """Compare's cards x count: one L4 plans 30 GB (too much), a 1x2 mesh fits; each cell is one card's plan and
    the bytes kept free beside it, as the Estimator's verdict reckons it (on the 1x2 mesh half of the logits: the
    model axis splits Gemma's head, its token embedding); the larger meshes are not planned, and a card with no
    plan yet says it is not planned (compiles are off here)."""
    from dashboard.views import fmt

    one = put_hub_plan({**hub_analysis(1), "temp_bytes": 30 * 10**9})
    two = put_hub_plan(hub_analysis(1), model_parallel="2")
    at = app({**HUB, "hubs": "gemma2_2b_en", "gpus": "l4,t4"}, page="pages/compare.py")
    assert any(h.value == "Cards sharing the weights" for h in at.subheader)
    grid = {row["card"]: row for row in at.dataframe[-1].value.to_dict("records")}
    assert grid["L4 24 GB"] == {"model": "gemma2_2b_en", "card": "L4 24 GB",
                                "1 card": f"{fmt(one.peak_bytes + HUB_KEPT, Inputs())}: too much",
                                "1x2 mesh: 2 cards": f"{fmt(two.peak_bytes + HUB_KEPT // 2, Inputs())}: fits",
                                "1x4 mesh: 4 cards": "—", "1x8 mesh: 8 cards": "—"}
    t4 = grid[GPU_PRESETS["t4"].name]
    assert t4["1 card"] == "not planned" and t4["1x2 mesh: 2 cards"] == "—"
    # Two data-parallel replicas keep their batch of one each: the mesh's columns name the data axis too.
    replicas = app({**HUB, "hubs": "gemma2_2b_en", "gpus": "l4", "num_gpus": "2", "batch_size": "2"},
                   page="pages/compare.py")
    assert list(replicas.dataframe[-1].value.columns)[2:] == ["2x1 mesh: 2 cards", "2x2 mesh: 4 cards",
                                                             "2x4 mesh: 8 cards", "2x8 mesh: 16 cards"]


def test_the_cards_x_count_grid_wants_the_next_mesh_only_where_the_last_does_not_fit():
    """The grid asks for one plan a card at a time: the 1x2 mesh's where one card is too much, nothing more where
    a mesh fits; a card whose compile failed says refused, with XLA's one line."""
    from dataclasses import replace

    from calc.service import Kind, Progress
    from dashboard.hub_compare import mesh_cell
    from dashboard.state import parse_query
    from dashboard.views import config_of
    from dashboard.xla_step import compare_cell, hub_spec_of, mesh_grid

    put_hub_plan({**hub_analysis(1), "temp_bytes": 30 * 10**9})
    inputs, _ = parse_query({**HUB, "hubs": "gemma2_2b_en"})
    spec = hub_spec_of(inputs)
    grid, wants = mesh_grid({"gemma2_2b_en": spec}, [GPU_PRESETS["l4"]], inputs)
    assert sorted(grid) == [("gemma2_2b_en", "l4", 1), ("gemma2_2b_en", "l4", 2)]
    assert [(w.kind, w.batch, w.setup.config.mesh) for w in wants] == [(Kind.PLAN, 1, "1x2")]
    assert wants[0].setup.config == replace(config_of(inputs), model_parallel=2)
    setup, answer = grid["gemma2_2b_en", "l4", 2]
    cell = compare_cell(answer, wants, {wants[0]: Progress("failed", message="Query, key and value should have same "
                                                                          "sharding")})
    assert (cell.state, cell.error) == ("failed", "Query, key and value should have same sharding")
    assert mesh_cell(cell, 1, inputs) == "refused"
    put_hub_plan(hub_analysis(1), model_parallel="2")
    grid, wants = mesh_grid({"gemma2_2b_en": spec}, [GPU_PRESETS["l4"]], inputs)
    assert not wants and sorted(grid) == [("gemma2_2b_en", "l4", 1), ("gemma2_2b_en", "l4", 2)]


def views_config(params):
    from dashboard.state import parse_query
    from dashboard.views import config_of

    return config_of(parse_query(params)[0])


def test_a_kerashub_link_with_no_plan_known_shows_no_number_and_says_why():
    at = app(HUB)
    assert not at.exception and not at.metric
    assert any("a KerasHub model shows only the plans already compiled here" in i.value for i in at.info)
    short = app({**HUB, "hub": "gpt2_base_en", "seq_len": "4096"})  # GPT-2 takes 1,024 tokens
    assert not short.exception and short.number_input(key="seq_len").value == 1024
    bert = app({**HUB, "hub": "bert_base_en_uncased", "hub_classes": "5"})  # a classifier: its head's classes
    assert not bert.exception and bert.number_input(key="hub_classes").value == 5
    assert any("a new head of 5 classes trains too" in c.value for c in bert.caption)
    assert not any(n.key == "hub_classes" for n in app(HUB).number_input)  # a causal LM has no head to add
    frozen = app({**HUB, "hub": "bert_base_en_uncased", "hub_frozen": "true"})  # the head alone: no LoRA to set
    assert any("the backbone is frozen, in float32; a new head of 2 classes alone trains" in c.value
               for c in frozen.caption) and not any(n.key == "lora_rank" for n in frozen.number_input)
    resnet = app({**HUB, "hub": "resnet_50_imagenet"})  # no attention: no LoRA, whatever the link says
    assert not resnet.exception and not resnet.error and not any(n.key == "lora_rank" for n in resnet.number_input)
    assert any("every weight trains, in float32" in c.value for c in resnet.caption)


def test_a_kerashub_plan_that_says_what_fills_its_peak_is_shown_by_layer():
    raw = hub_analysis(1)
    plan = put_hub_plan(explained(raw, activations=raw["temp_bytes"] // 2, gradients=raw["temp_bytes"] // 4))
    layers = app(HUB, page="pages/layers.py")
    assert not layers.exception
    rows = dict(zip(layers.dataframe[0].value["layer"], layers.dataframe[0].value["total (GiB)"]))
    assert rows["conv1"] == pytest.approx((raw["temp_bytes"] // 2 + raw["temp_bytes"] // 4) / GIB, abs=1e-4)
    assert sum(rows.values()) == pytest.approx(plan.peak_bytes / GIB, abs=1e-3)


def test_a_kerashub_text_model_shows_its_longest_sequence_from_the_plans_compiled_at_its_batch():
    """The page's length, then each length the search asks for, planned at the page's batch (put here as
    the scheduler would compile them): the line gives the longest that fits and the shortest read that
    does not, and the chart marks every compiled length, the page's and the longest."""
    from dataclasses import replace

    from calc import xla
    from calc.gpus import GPU_PRESETS
    from calc.xla import plan_budget
    from calc.xla.search import XlaMaxSequence, sequence_search
    from dashboard.state import parse_query
    from dashboard.views import config_of
    from dashboard.xla_step import hub_spec_of
    from dashboard.xla_view import xla_answer

    def analysis(tokens):  # 1.5 GB of temporaries for every 512 tokens
        return {**hub_analysis(1), "temp_bytes": 1_500_000_000 * tokens // 512}

    put_hub_plan(analysis(512))
    waiting = app(HUB)
    assert any(c.value == "Longest sequence at batch 1: searching over XLA plans (lengths compiled so far: 1)."
               for c in waiting.caption)
    inputs, _ = parse_query(HUB)
    spec, config = hub_spec_of(inputs), config_of(inputs)
    budget = plan_budget(GPU_PRESETS["l4"], inputs.margin / 100, hub=True)

    def peak_at(n):  # the plan and, beside it, one sequence's logits: n tokens x 256,000 words x 2 bytes
        plan = xla.known_plans(replace(spec, sequence_length=n), config, "l4").plans.get(1)
        return None if plan is None else plan.peak_bytes + n * 256_000 * 2

    peaks = {}  # what the scheduler's sequence want compiles, one length after another
    while not isinstance(step := sequence_search(peak_at, budget.plan_bytes, 512, spec.model.sequence_limit),
                         XlaMaxSequence):
        peaks[step] = put_hub_plan(analysis(step), seq_len=str(step)).peak_bytes
    at = app(HUB)
    line = next(c.value for c in at.caption if c.value.startswith("Longest sequence at batch 1:"))
    fits, exceeds = (int(x.replace(",", "")) for x in re.findall(r"([\d,]+) (?:tokens fit|do not)", line))
    # By hand: the state and the batch, plus 1.5 GB a 512 tokens (the analysis above) and the logits kept free
    # beside the plan, against the plan's budget.
    state = analysis(512)["argument_bytes"] + analysis(512)["output_bytes"] - analysis(512)["alias_bytes"]
    assert (state + 1_500_000_000 * fits // 512 + fits * 512_000 <= budget.plan_bytes
            < state + 1_500_000_000 * exceeds // 512 + exceeds * 512_000)
    assert exceeds - fits <= fits // 64 and f"{len(peaks) + 1} lengths compiled" in line
    chart = charts(at)["sequence_chart"]
    compiled = next(t for t in chart["data"] if t.get("name") == "XLA plan (compiled)")
    assert sorted(compiled["x"]) == sorted([512, *peaks])
    assert any(t.get("name") == f"longest that fits: {fits}" for t in chart["data"])
    assert xla_answer(xla.known_plans(spec, config, "l4"), 1, budget).plan is not None
    ja = app({**HUB, "lang": "ja"})
    assert any(c.value.startswith("バッチ 1 での最長シーケンス") for c in ja.caption)


def test_the_first_kerashub_page_is_the_first_kerashub_setup_shipped():
    """tools/ship_xla_plans.py ships the setup the sidebar opens when "Model from" turns to KerasHub."""
    from dashboard.state import parse_query
    from calc.service import Setup
    from dashboard.xla_step import setup_of
    from tests.tools import load_tool

    ship = load_tool("ship_xla_plans")
    spec, config, gpus, margin = next(ship.hub_setups())
    inputs, warnings = parse_query({"source": "hub"})
    assert not warnings
    assert Setup.of(spec, config, inputs.gpu) == setup_of(inputs) and inputs.gpu in gpus
    assert margin == inputs.margin / 100 and config.batch_size == inputs.batch_size


def test_compare_answers_kerashub_presets_on_every_card_from_xla_s_plans():
    """KerasHub presets x cards, each cell the Estimator's answer for the same setup: Gemma 2 2B's plans on an
    L4 (1.5 GB of temporaries a sample, hub_analysis) give the largest batch by hand, a "≥" until the batch
    above it is compiled; a card with no plan says so (compiles are off here); GPT-2 takes the sidebar's
    2,048 tokens cut to its 1,024 learned positions; the link keeps the presets."""
    from calc.xla import plan_budget
    from dashboard.views import fmt

    trainable, frozen = 4 * HUB_LORA, 2 * 2_614_341_888
    state = trainable + frozen + 2 * trainable + 8 + 16

    def peak(batch):  # arguments (the state, the tokens) + temporaries + outputs - the donated state
        return state + 4_608 * batch + 1_500_000_000 * batch + 8

    budget = plan_budget(GPU_PRESETS["l4"], 0.05, hub=True).plan_bytes
    largest = max(b for b in range(1, 64) if peak(b) + b * HUB_KEPT <= budget)
    for b in (1, 2):
        put_hub_plan(hub_analysis(b), batch_size=str(b))
    link = {**HUB, "hubs": "gemma2_2b_en,gpt2_base_en", "gpus": "l4,t4"}
    at = app(link, page="pages/compare.py")
    table, peaks = (pd_rows(at.dataframe[i].value) for i in (0, 1))
    l4, t4 = GPU_PRESETS["l4"].name, GPU_PRESETS["t4"].name
    assert table["gemma2_2b_en"][l4].startswith("≥ ") and table["gemma2_2b_en"][t4] == "not planned"
    assert peaks["gemma2_2b_en"][l4] == fmt(peak(1), Inputs())  # as the Estimator's metric: no overhead in it
    assert table["gpt2_base_en"][l4] == "not planned" and table["gemma2_2b_en"]["input"] == "512 tokens"
    assert any("a KerasHub model shows only the plans already compiled here" in i.value for i in at.info)
    for b in (largest, largest + 1):  # the search's last two compiles: the answer is settled
        put_hub_plan(hub_analysis(b), batch_size=str(b))
    settled = pd_rows(app(link, page="pages/compare.py").dataframe[0].value)
    assert settled["gemma2_2b_en"][l4] == str(largest)
    long = app({**link, "seq_len": "2048"}, page="pages/compare.py")
    assert {k: v["input"] for k, v in pd_rows(long.dataframe[0].value).items()} == {
        "gemma2_2b_en": "2,048 tokens", "gpt2_base_en": "1,024 tokens"}
    assert long.query_params["hubs"] == "gemma2_2b_en,gpt2_base_en"
    default = app(HUB, page="pages/compare.py").multiselect(key="compare_hubs").value
    assert default[0] == "gemma2_2b_en" and len(default) == 2
    assert not app({**link, "lang": "ja"}, page="pages/compare.py").exception


def pd_rows(frame) -> dict[str, dict]:
    """A Compare table's rows by model."""
    return {row["model"]: row for row in frame.to_dict("records")}


def test_the_formula_teaches_a_kerashub_step_from_its_parameter_counts_and_its_plan():
    """Gemma 2 2B with LoRA 4, batch 1, AdamW on an L4: the frozen weights are the backbone's parameters in
    bfloat16, LoRA's weights its adapters in float32 (Gemma's projections have no bias), the optimizer two
    slots of them and its two scalars; the terms add up to the plan's peak, on the page and projected."""
    from dashboard.views import fmt

    missing = app(HUB, page="pages/formula.py")
    assert any("not known on this server yet" in i.value for i in missing.info) and not missing.latex
    raw = hub_analysis(1)
    plan = put_hub_plan(raw)
    at = app(HUB, page="pages/formula.py")
    text = " ".join(m.value for m in at.markdown)
    assert f"({2_614_341_888:,} - 0) x 2 B = {fmt(2 * 2_614_341_888, Inputs(), 3)}" in text
    assert f"{HUB_LORA:,} x 4 B + 0 x 2 B = {fmt(4 * HUB_LORA, Inputs(), 3)}" in text
    assert f"2 x W_train + 8 B = {2 * 4 * HUB_LORA + 8:,} B; the metrics' variables add 16 B" in text
    assert "batch 1 x 512 tokens x 9 B a token" in text  # token ids and padding mask (int32), labels, weights
    assert _latex_terms(at)[-1] == round(plan.peak_bytes / GIB, 3)
    assert sum(_latex_terms(at)[:-1]) == pytest.approx(plan.peak_bytes / GIB, abs=0.01)
    shown = app({**HUB, "present": "true"}, page="pages/formula.py")
    assert [h.value for h in shown.header] == ["XLA's plan, with your numbers"]
    shown.button(key="present_all").click().run()
    assert _latex_terms(shown)[-1] == round(plan.peak_bytes / GIB, 3)
    assert any(m.value.startswith("Of the plan's") for m in shown.markdown)
    for lang in ("ja", "ko"):
        there = app({**HUB, "lang": lang}, page="pages/formula.py")
        assert _latex_terms(there)[-1] == round(plan.peak_bytes / GIB, 3)
    # The printable handout: every term with its value, the sum, and a link that cannot inject markup.
    from dashboard.hub_lesson import hub_handout_html, hub_lesson
    from dashboard.state import parse_query
    from dashboard.views import config_of
    from dashboard.xla_step import hub_spec_of, xla_answer_for

    inputs, _ = parse_query(HUB)
    taught = hub_lesson(xla_answer_for(inputs, GPU_PRESETS["l4"]), hub_spec_of(inputs), config_of(inputs), inputs)
    html = hub_handout_html(taught, inputs, "gemma2_2b_en <b>", "the step", link='?hub="><script>', made="2026-11-28")
    assert "<script>" not in html and "gemma2_2b_en &lt;b&gt;" in html
    for term in taught.terms:
        assert f"<td class=n>{fmt(term.nbytes, Inputs(), 3)}</td>" in html
    assert f"<b>{fmt(plan.peak_bytes, Inputs(), 3)}</b>" in html and any(b.key == "dl_handout" for b in at.get(
        "download_button"))


def test_a_model_switch_takes_the_models_default_size_unless_the_user_set_one():
    at = app(SMALL)  # MobileNetV2 at 224 px, its default
    at.selectbox(key="model").set_value("EfficientNetB3").run()
    assert at.number_input(key="image_size").value == 300  # EfficientNetB3's default, as its field says
    assert "default 300" in at.number_input(key="image_size").label
    own = app({**SMALL, "model": "EfficientNetB3", "image_size": "224"})  # a size of the user's own
    own.selectbox(key="model").set_value("MobileNetV2").run()
    assert own.number_input(key="image_size").value == 224


def test_the_formula_page_and_its_handout_carry_xlas_largest_batch_as_the_estimator_shows_it():
    from calc import xla
    from calc.xla.budget import step_budget
    from dashboard import lesson, views
    from dashboard.state import parse_query
    from dashboard.xla_view import xla_answer, xla_largest

    put_plan(plan_analysis(16))  # one plan that fits: XLA's largest batch is at least 16 until searched
    estimator = app()
    shown = metric(estimator, "Largest batch that fits (XLA plans known, not settled)")
    assert shown == "≥ 16"
    # The chart's largest batch is the metric's, approximate where the metric is.
    assert "largest that fits: ≥ 16" in [t["name"] for t in curve_chart(estimator)["data"]]
    formula = app(page="pages/formula.py")
    line = next(m.value for m in formula.markdown if "XLA's own, for the step Keras compiles by default" in m.value)
    assert line.endswith("as the Estimator shows it: **at least 16 (not settled yet)**.")
    assert "box at the top" not in line
    inputs, _ = parse_query(SMALL)
    spec, config = small_step()
    profile = get_profile(spec)
    fit = views.fit_of(profile, inputs, GPU_PRESETS["t4"])
    n = lesson.formula_numbers(profile, inputs, GPU_PRESETS["t4"], None, fit, fit.max_batch)
    answer = xla_answer(xla.known_plans(spec, config, "t4"), 16, step_budget(GPU_PRESETS["t4"], 0.05, spec, "float32"))
    html = lesson.handout_html(n, inputs, lesson.terms(n, inputs), "Tesla T4", xla_largest=xla_largest(answer, inputs))
    assert "as the Estimator shows it: <b>at least 16 (not settled yet)</b>" in html
