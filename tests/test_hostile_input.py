"""Anything a stranger can type: a clear message, sane defaults, nothing breaks or runs.

The same bad values go through the Python API, the dashboard's query string and
widgets, and uploads (the command line's are in ``test_cli.py``).
"""

import io
import os
import re
import tempfile
import time
import zipfile
from dataclasses import replace
from html import unescape

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st_

from calc.catalogue import CATALOGUE, MAX_IMAGE_SIDE, make_spec
from calc.gpus import lookup_gpu
from calc.types import MAX_BATCH_SIZE, Optimizer, Precision, TrainingConfig, TrainMode
from calc.uploads import MAX_UPLOAD_BYTES, check_upload, custom_classes, profile_upload
from calc.workers.protocol import resident_bytes
from dashboard.state import DEFAULTS, DEVICES, FIELD_NAMES, GPUS, MAX_BATCH, OPTIMIZERS, PRECISIONS, UNITS, parse_query
from tests.tools import displayed

HOSTILE_TEXT = ["", " ", "0", "-1", "1e309", "nan", "inf", "-inf", "0x20", "2.5", "1_000_000", "３２", "\x00",
                "<script>alert(1)</script>", "' OR 1=1 --", "${jndi:ldap://x}", "../../etc/passwd", "9" * 5000,
                "__import__('os').system('id')", "None", "True", "[]", "{}", "%00", "\u202e"]


# --- the Python API ---------------------------------------------------------------

@pytest.mark.parametrize("batch", [0, -1, 2.5, "8", True, None, 10**12, MAX_BATCH_SIZE + 1])
def test_bad_batch_sizes_are_refused_by_the_api(batch):
    with pytest.raises(ValueError, match="batch_size"):
        TrainingConfig(batch_size=batch)


def test_the_largest_allowed_batch_is_accepted():
    assert TrainingConfig(batch_size=MAX_BATCH_SIZE).batch_size == MAX_BATCH_SIZE


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "ResNet50", "image_size": 1}, "at least 32x32"),
        ({"name": "InceptionV3", "image_size": 74}, "at least 75x75"),
        ({"name": "Xception", "height": 299, "width": 70}, "at least 71x71"),
        ({"name": "ResNet50", "image_size": 100000}, "between 1 and 8192"),
        ({"name": "ResNet50", "image_size": 224.0}, "positive integer"),
        ({"name": "ResNet50", "image_size": "224"}, "positive integer"),
        ({"name": "ResNet50", "image_size": -224}, "between 1"),
        ({"name": "NoSuchNet"}, "Unknown model"),
        ({"name": "resnet5O"}, "Did you mean ResNet50"),
        ({"name": None}, "Unknown model"),
        ({"name": "ResNet50", "channels": 0}, "channels"),
        ({"name": "ResNet50", "classes": 10**9}, "classes"),
    ],
)
def test_bad_model_requests_name_what_was_expected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_spec(**kwargs)


def test_non_square_inputs_are_accepted_down_to_the_minimum():
    # With weights=None every Keras application accepts a non-square input (the
    # square-only checks in keras/src/applications/mobilenet*.py apply to imagenet
    # weights only); the minimum side is the only rule.
    assert make_spec("MobileNetV3Small", height=96, width=320).input_shape == (96, 320, 3)
    assert make_spec("ResNet50", height=32, width=8192).input_shape == (32, 8192, 3)


@pytest.mark.parametrize("enum_type, value", [(Optimizer, "adamx"), (Optimizer, ""), (Precision, "float16"),
                                              (Precision, "fp8"), (TrainMode, "some")])
def test_unknown_names_are_refused(enum_type, value):
    with pytest.raises(ValueError):
        enum_type(value)


@pytest.mark.parametrize("key", ["a200", "", "T4 ", "h100-80; rm -rf /"])
def test_unknown_gpu(key):
    with pytest.raises(ValueError, match="Unknown GPU"):
        lookup_gpu(key)


@pytest.mark.parametrize("name, side", [("VGG16", 8192), ("VGG19", 8192), ("VGG16", 6000)])
def test_absurd_weights_are_refused_at_once_without_allocating(name, side):
    before = resident_bytes(os.getpid())
    start = time.perf_counter()
    with pytest.raises(ValueError, match="parameters"):
        make_spec(name, side)
    assert time.perf_counter() - start < 0.1
    # VGG16 at 8192 with its top would hold 512 GiB of float32 weights; nothing grew.
    assert resident_bytes(os.getpid()) - before < 8 * 2**20


# --- the query string -------------------------------------------------------------

def _in_domain(inputs) -> bool:
    return (inputs.model in CATALOGUE and 1 <= inputs.image_size <= MAX_IMAGE_SIDE
            and 1 <= inputs.batch_size <= MAX_BATCH and inputs.optimizer in OPTIMIZERS
            and inputs.precision in PRECISIONS and inputs.device in DEVICES and inputs.gpu in GPUS
            and inputs.unit in UNITS
            and 0 <= inputs.margin <= 90 and 0.25 <= inputs.gpu_memory_gib <= 4096
            and inputs.batch_size % inputs.num_gpus == 0 and 1 <= inputs.grad_accum <= 1024
            and all(isinstance(getattr(inputs, f), bool) for f in ("momentum", "amsgrad", "centered", "ema")))


query_values = st_.one_of(st_.text(max_size=200), st_.sampled_from(HOSTILE_TEXT),
                          st_.integers(-10**20, 10**20).map(str), st_.floats().map(str))


NUMERIC_FIELDS = ("image_size", "batch_size", "last_n", "gpu_memory_gib", "num_gpus", "margin", "grad_accum")


@settings(max_examples=400, deadline=None)
@given(st_.dictionaries(st_.one_of(st_.sampled_from(FIELD_NAMES), st_.text(max_size=20)), query_values, max_size=20))
def test_any_query_string_gives_valid_inputs_and_a_warning_per_bad_value(params):
    inputs, warnings = parse_query(params)
    assert _in_domain(inputs)
    for w in warnings:  # every warning is about a parameter that came, and is short
        assert len(w) < 300
        assert any(w.startswith(f"Ignored {k}=") for k in params) or "not divisible by num_gpus" in w
    for key in NUMERIC_FIELDS:  # a number field given no digit at all cannot pass silently
        if key in params and not any(c.isdigit() for c in str(params[key])):
            assert any(w.startswith(f"Ignored {key}=") for w in warnings)


def test_the_kernels_come_from_the_link_and_default_to_a_gpu():
    assert parse_query({"device": "cpu"}) == (replace(DEFAULTS, device="cpu"), [])
    inputs, warnings = parse_query({"device": "tpu"})
    assert inputs.device == DEFAULTS.device == "gpu" and [displayed(w) for w in warnings] == ["Ignored device='tpu' from the link: using 'gpu'."]


def test_a_flood_of_parameters_is_cheap():
    params = {f"k{i}": "x" * 10_000 for i in range(2000)} | {"batch_size": "9" * 100_000}
    start = time.perf_counter()
    inputs, warnings = parse_query(params)
    assert time.perf_counter() - start < 0.5
    assert inputs == DEFAULTS and len(warnings) == 1 and len(warnings[0]) < 200


# --- uploads (pure checks) --------------------------------------------------------

def _zip(files: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def _bomb() -> bytes:
    return _zip({"config.json": b"{}", "w.h5": b"\x00" * (300 * 2**20)})  # ~0.3 MiB that unpacks to 300 MiB


def _oversize() -> bytes:
    return b"\x89HDF\r\n\x1a\n" + b"\x00" * MAX_UPLOAD_BYTES


CUSTOM_CONFIG = (b'{"module": "keras.src.models.functional", "class_name": "Functional", "config": {"layers": '
                 b'[{"module": null, "class_name": "Evil", "registered_name": "evil>Evil"}]}}')


@pytest.mark.parametrize(
    "name, make_data, message",
    [
        ("random.keras", lambda: os.urandom(4096), "zip archive"),
        ("model.exe", lambda: b"MZ", "Expected a .keras or .h5"),
        ("model.keras.py", lambda: b"print(1)", "Expected a .keras or .h5"),
        ("../../etc/model.pkl", lambda: b"x", "'model.pkl'"),
        ("big.h5", _oversize, "limit is 200 MiB"),
        ("bomb.keras", _bomb, "unpack"),
        ("deep.keras", lambda: _zip({"config.json": b"[" * 100_000 + b"]" * 100_000}, zipfile.ZIP_STORED), "nested too deeply"),
        ("notjson.keras", lambda: _zip({"config.json": b"\xff\xfe not json"}), "not valid JSON"),
        ("custom.keras", lambda: _zip({"config.json": CUSTOM_CONFIG}), "evil>Evil"),
        ("module.keras", lambda: _zip({"config.json": b'{"module": "os", "class_name": "system"}'}), "os.system"),
    ],
)
def test_bad_uploads_say_what_was_wrong(name, make_data, message):
    with pytest.raises(ValueError, match=message):
        check_upload(make_data(), name)


def test_keras_own_classes_are_not_custom():
    config = {"module": "keras.src.models.functional", "class_name": "Functional", "registered_name": "Functional",
              "config": {"layers": [{"module": "keras.layers", "class_name": "Dense", "registered_name": None,
                                     "config": {"dtype": {"module": "keras", "class_name": "DTypePolicy"}}},
                                    {"module": None, "class_name": "__keras_tensor__"}]}}
    assert custom_classes(config) == []


# --- the dashboard (real app, AppTest) --------------------------------------------

@pytest.fixture
def app_test():
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    st.cache_data.clear()
    st.cache_resource.clear()

    def run(params):
        at = AppTest.from_file("../app.py", default_timeout=300)
        for k, v in params.items():
            at.query_params[k] = v
        at.run()
        return at

    yield run
    st.cache_data.clear()
    st.cache_resource.clear()


SMALL = {"model": "MobileNetV2", "image_size": "224", "batch_size": "16"}


@pytest.mark.server
def test_absurd_weights_in_a_link_are_an_error_and_build_nothing(app_test, monkeypatch):
    from calc.keras import build

    def no_build(spec):
        raise AssertionError(f"{spec.key} was built")

    monkeypatch.setattr(build, "profile_catalogue_model", no_build)
    at = app_test({"model": "VGG16", "image_size": "8192"})
    assert not at.exception
    assert at.error and "parameters" in at.error[0].value and "include_top=False" in displayed(at.error[0].value)


@pytest.mark.server
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(st_.dictionaries(st_.sampled_from([n for n in FIELD_NAMES if n != "image_size"]), query_values, max_size=8))
def test_random_links_never_show_a_traceback(app_test, params):
    at = app_test(params)  # image_size stays the default: no Keras builds in this loop
    assert not at.exception, [e.value for e in at.exception]
    assert at.metric  # the page rendered its numbers with the fallback values


INJECTIONS = ["[Session expired - sign in](https://evil.example/l)", "![x](http://HOST/beacon.png)",
              "www.evil.example <a href='https://evil.example'>x</a>", ":red[alarm] $x^2$ **bold**"]


def _rendered(markdown_text: str) -> str:
    """What CommonMark makes of a message (Streamlit renders messages as Markdown)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").render(markdown_text)


@pytest.mark.parametrize("value", INJECTIONS)
def test_a_visitor_string_is_shown_as_its_characters(value):
    from dashboard.plain import plain, plain_label

    shown = plain(value)
    html = _rendered(shown)
    assert "<a" not in html and "<img" not in html and "<strong>" not in html
    # GFM links a bare URL or www. by itself, Streamlit reads :red[...] and $...$: every mark is escaped.
    assert re.search(r"(?<!\\)[:/.\[\]()!<>$*]", shown) is None, shown
    # What the reader sees is the string itself.
    assert html.startswith("<p>") and html.endswith("</p>\n") and unescape(html[3:-5]) == value
    assert "<a" not in plain_label(value) and unescape(plain_label(value)) == value


@pytest.mark.server
@pytest.mark.parametrize("value", INJECTIONS[:2])
def test_a_link_value_in_markdown_is_echoed_as_text(app_test, value):
    at = app_test({**SMALL, "model": value})
    assert not at.exception
    warnings = [w.value for w in at.warning if "Ignored model=" in w.value]
    assert len(warnings) == 1
    html = _rendered(warnings[0])
    assert "<a" not in html and "<img" not in html and "://" not in warnings[0]


@pytest.mark.server
@pytest.mark.parametrize("value", [0, -5, 10**12, 2.5])
def test_out_of_range_widget_values_are_kept_in_range(app_test, value):
    # A browser cannot send these, a hand-written websocket client can: Streamlit
    # keeps the widget's bounds on the server, and the page keeps working.
    at = app_test(SMALL)
    at.number_input(key="batch_size").set_value(value).run()
    assert not at.exception
    assert 1 <= at.number_input(key="batch_size").value <= MAX_BATCH
    assert at.metric


@pytest.mark.server
def test_image_size_below_the_minimum_in_the_widget_is_an_error(app_test):
    at = app_test({**SMALL, "model": "Xception"})
    at.number_input(key="image_size").set_value(1).run()
    assert not at.exception
    assert at.error and "at least 71x71" in at.error[0].value


def _evil_layer_class():
    """A layer class defined by "user code": registered once per test process."""
    import keras

    if "Evil" not in globals():
        @keras.saving.register_keras_serializable(package="evil")
        class Evil(keras.layers.Layer):
            def call(self, x):
                return x * 3

        globals()["Evil"] = Evil
    return globals()["Evil"]


def _upload_dirs():
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("calc-upload-")}


@pytest.mark.server
@pytest.mark.parametrize("kind", ["h5_lambda", "custom_keras", "custom_h5", "bomb", "oversize"])
def test_hostile_uploads_in_the_dashboard(app_test, tmp_path, kind, monkeypatch):
    import keras

    # Temporary folders of this worker's uploads only (other test workers upload too).
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))

    if kind == "h5_lambda":
        inp = keras.Input((8, 8, 3))
        x = keras.layers.Lambda(lambda t: t * 2)(keras.layers.Conv2D(2, 3)(inp))
        keras.Model(inp, keras.layers.GlobalAveragePooling2D()(x)).save(tmp_path / "m.h5")
        name, needle = "m.h5", "Lambda"
    elif kind.startswith("custom"):
        name = "m.keras" if kind == "custom_keras" else "m.h5"
        inp = keras.Input((4,))
        keras.Model(inp, _evil_layer_class()()(keras.layers.Dense(2)(inp))).save(tmp_path / name)
        needle = "evil>Evil"
    elif kind == "bomb":
        name, needle = "bomb.keras", "unpack"
        (tmp_path / name).write_bytes(_bomb())
    else:
        name, needle = "big.h5", "limit is 200 MiB"
        (tmp_path / name).write_bytes(_oversize())
    before = _upload_dirs()
    at = app_test({"source": "upload"})
    at.file_uploader(key="upload_file").set_value((name, (tmp_path / name).read_bytes(), "application/octet-stream"))
    at.run()
    assert not at.exception
    assert at.error and needle in displayed(at.error[0].value), [e.value for e in at.error]
    assert _upload_dirs() == before  # the private temporary directory is gone


@pytest.mark.keras
def test_a_catalogue_model_saved_by_keras_has_no_custom_classes(tmp_path):
    import keras

    keras.applications.MobileNetV3Small(weights=None, input_shape=(64, 64, 3)).save(tmp_path / "m.keras")
    check_upload((tmp_path / "m.keras").read_bytes(), "m.keras")  # does not raise
    assert profile_upload((tmp_path / "m.keras").read_bytes(), "m.keras").total_params > 0
