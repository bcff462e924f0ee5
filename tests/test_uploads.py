"""Uploaded files: checked before Keras sees them, read in safe mode, temp files removed."""

import io
import json
import os
import struct
import tempfile
import zipfile
from pathlib import Path

import pytest

from calc.uploads import MAX_UPLOAD_BYTES, check_upload, profile_upload, zip_entry_count

ROOT = Path(__file__).resolve().parents[1]


def test_extension_size_and_signatures():
    with pytest.raises(ValueError, match="Expected a .keras or .h5"):
        check_upload(b"abc", "model.pkl")
    with pytest.raises(ValueError, match="empty"):
        check_upload(b"", "model.h5")
    with pytest.raises(ValueError, match="HDF5"):
        check_upload(b"not hdf5", "model.h5")
    with pytest.raises(ValueError, match="zip archive"):
        check_upload(b"PK\x03\x04 broken", "model.keras")
    with pytest.raises(ValueError, match="limit"):
        check_upload(b"\x00" * (MAX_UPLOAD_BYTES + 1), "model.h5")


def test_zip_bomb_is_refused_before_unpacking():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", "{}")
        z.writestr("model.weights.h5", b"\x00" * (50 * 2**20))  # compresses ~1000x
    with pytest.raises(ValueError, match="unpack"):
        check_upload(buf.getvalue(), "bomb.keras")


def _keras_zip(method=zipfile.ZIP_DEFLATED, extra_entries=0) -> bytearray:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as z:
        z.writestr("config.json", json.dumps({"class_name": "Functional", "config": {"layers": []}}))
        for i in range(extra_entries):
            z.writestr(f"extra{i}", b"")
    return bytearray(out.getvalue())


def _patch_headers(data: bytearray, local_at: int, central_at: int, change) -> bytes:
    """Rewrites a 16-bit field of config.json's local and central headers (offsets from each signature)."""
    for signature, offset in ((b"PK\x03\x04", local_at), (b"PK\x01\x02", central_at)):
        i = data.find(signature) + offset
        data[i:i + 2] = struct.pack("<H", change(struct.unpack("<H", data[i:i + 2])[0]))
    return bytes(data)


@pytest.mark.parametrize("make, needle", [
    (lambda: _patch_headers(_keras_zip(), 8, 10, lambda _: 9), "compressed with a method this tool does not read"),
    (lambda: _patch_headers(_keras_zip(), 6, 8, lambda flags: flags | 1), "encrypted"),
    (lambda: _corrupt_stream(_keras_zip()), "The archive is damaged"),
    (lambda: bytes(_keras_zip(zipfile.ZIP_STORED, extra_entries=100)), "holds 101 files"),
], ids=["deflate64", "encrypted", "corrupt_stream", "many_entries"])
def test_archives_keras_cannot_read_are_one_line(make, needle):
    with pytest.raises(ValueError, match=needle) as caught:
        check_upload(make(), "model.keras")
    assert "\n" not in str(caught.value)


def _corrupt_stream(data: bytearray) -> bytes:
    i = data.find(b"PK\x03\x04")
    name_len, extra_len = struct.unpack("<HH", data[i + 26:i + 30])
    start = i + 30 + name_len + extra_len
    data[start:start + 4] = b"\xff\xff\xff\xff"  # an invalid deflate block type
    return bytes(data)


def test_the_entry_count_is_read_from_the_end_record_before_the_archive_is_opened():
    data = bytes(_keras_zip(zipfile.ZIP_STORED, extra_entries=2))
    assert zip_entry_count(data) == 3
    assert zip_entry_count(b"no archive here") is None


@pytest.mark.keras
def test_a_tiny_file_of_a_huge_model_is_refused_by_its_config_and_else_stopped_at_the_budget(tmp_path, monkeypatch):
    """Input(40000) -> Dense(40000) in a 754-byte .keras without weights: building it takes
    6.4 GB (the reader once reached 5 GB in 18 s). Its config says so, and it is refused
    before any reader starts; a model whose config hid it is stopped at the reader's budget."""
    import keras

    from calc import uploads

    inp = keras.Input((4,))
    keras.Model(inp, keras.layers.Dense(4)(inp)).save(tmp_path / "small.keras")
    with zipfile.ZipFile(tmp_path / "small.keras") as small:
        config = small.read("config.json").decode().replace("4]", "40000]").replace('"units": 4', '"units": 40000')
        metadata = small.read("metadata.json")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", config)
        z.writestr("metadata.json", metadata)
    assert len(out.getvalue()) < 1000
    with pytest.raises(ValueError, match=r"declares 1,600,040,000 parameters: building it to read it takes about "
                                         r"7.5 GiB, more than the reader's memory budget of 4.0 GiB") as caught:
        check_upload(out.getvalue(), "huge.keras")
    assert "\n" not in str(caught.value)
    monkeypatch.setattr(uploads, "check_declared_params", lambda config: None)  # as if the config hid its shapes
    monkeypatch.setenv("CALC_READER_GIB", "1.5")
    with pytest.raises(ValueError, match="passed the reader's memory budget of 1.5 GiB and was stopped"):
        profile_upload(out.getvalue(), "huge.keras")


def _config_of_layers(n: int) -> dict:
    return {"class_name": "Sequential", "config": {"name": "deep", "layers": [
        {"module": "keras.layers", "class_name": "Dense", "config": {"name": f"d{i}", "units": 1}} for i in range(n)]}}


def test_a_model_of_more_layers_than_the_limit_is_refused_before_keras_reads_it():
    # Three 15,000-layer uploads once held three readers for their full 180 s.
    from calc.uploads import MAX_LAYERS

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", json.dumps(_config_of_layers(15_000)))
    with pytest.raises(ValueError, match=f"has 15,000 layers; the limit is {MAX_LAYERS:,}"):
        check_upload(out.getvalue(), "deep.keras")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", json.dumps(_config_of_layers(MAX_LAYERS)))
    assert check_upload(out.getvalue(), "deep.keras") == ".keras"


@pytest.mark.keras
def test_an_h5_file_of_more_layers_than_the_limit_is_refused_by_the_reader(tmp_path):
    import h5py

    path = tmp_path / "deep.h5"
    with h5py.File(path, "w") as f:
        f.attrs["model_config"] = json.dumps(_config_of_layers(15_000))
    with pytest.raises(ValueError, match="has 15,000 layers"):
        profile_upload(path.read_bytes(), "deep.h5")


def test_declared_parameters_are_a_floor_of_what_keras_builds():
    """Counted from each shipped own-model file's config: never more than its ledger, and within 10 %
    (BatchNormalization, LayerNormalization and attention weights are not counted)."""
    from calc.config_params import declared_params
    from calc.validation.ledgers import read_ledgers

    ledgers = read_ledgers()
    if ledgers is None or not ledgers.usable():
        pytest.skip("no committed ledgers for this Keras")
    from calc.catalogue import ModelFile

    for path in sorted((ROOT / "calc" / "data" / "models").glob("*.keras")):
        profile = ledgers.profile(ModelFile(f"calc/data/models/{path.name}"))
        if profile is None:
            continue
        with zipfile.ZipFile(path) as archive:
            declared = declared_params(json.loads(archive.read("config.json")))
        assert 0.9 * profile.total_params <= declared <= profile.total_params, path.name


def test_zip_without_config_is_not_a_model():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("hello.txt", "hi")
    with pytest.raises(ValueError, match="config.json"):
        check_upload(buf.getvalue(), "x.keras")


@pytest.mark.keras
def test_safe_mode_refuses_lambda_and_temp_dir_is_removed(tmp_path, monkeypatch):
    import keras

    inp = keras.Input((4,))
    out = keras.layers.Lambda(lambda t: t + 1)(inp)
    path = tmp_path / "lam.keras"
    keras.Model(inp, out).save(path)
    # Temporary folders of this process's uploads only (other test workers upload too).
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    before = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("calc-upload-")}
    with pytest.raises(ValueError, match="Lambda"):
        profile_upload(path.read_bytes(), "lam.keras")
    after = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("calc-upload-")}
    assert after == before


@pytest.mark.keras
@pytest.mark.parametrize("ext", [".keras", ".h5"])
def test_a_saved_model_is_profiled(tmp_path, ext):
    import keras

    inp = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(4, 3)(inp)
    out = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(x))
    model = keras.Model(inp, out)
    path = tmp_path / f"m{ext}"
    model.save(path)
    profile = profile_upload(path.read_bytes(), f"m{ext}")
    assert profile.total_params == model.count_params() == (3 * 3 * 3 * 4 + 4) + (4 * 2 + 2)
    assert profile.name == f"m{ext}"


def test_a_file_kept_for_xlas_plan_is_named_by_its_content_and_the_folder_is_bounded(tmp_path, monkeypatch):
    from calc import uploads

    monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(uploads, "UPLOADS_KEPT", 3)
    monkeypatch.setattr(uploads, "UPLOADS_KEPT_BYTES", 10_000)
    hdf5 = b"\x89HDF\r\n\x1a\n"
    first = uploads.keep_upload(hdf5 + b"a" * 100, "one.h5")
    assert uploads.keep_upload(hdf5 + b"a" * 100, "same-content.h5") == first  # one file for one content
    assert Path(first.path).name.endswith(".h5") and Path(first.path).read_bytes() == hdf5 + b"a" * 100
    os.utime(first.path, (1, 1))  # the oldest
    for i in range(3):  # three more: only the three most recent stay
        kept = uploads.keep_upload(hdf5 + bytes([i]) * 100, f"m{i}.h5")
        os.utime(kept.path, (10 + i, 10 + i))
    assert len(list((tmp_path / "uploads").glob("*.h5"))) == 3 and not Path(first.path).exists()
    big = uploads.keep_upload(hdf5 + b"z" * 9_900, "big.h5")  # and at most 10,000 bytes in all
    assert [p.name for p in (tmp_path / "uploads").glob("*.h5")] == [Path(big.path).name]
    with pytest.raises(ValueError, match="Expected a .keras or .h5"):
        uploads.keep_upload(b"abc", "model.pkl")


def _without_build_configs(node):
    if isinstance(node, dict):
        return {k: _without_build_configs(v) for k, v in node.items() if k != "build_config"}
    if isinstance(node, list):
        return [_without_build_configs(v) for v in node]
    return node


@pytest.mark.keras
def test_a_sequential_model_without_its_build_configs_is_counted_from_its_input_layer():
    """Keras builds each layer of a Sequential model from the shape the layers before it give; a file
    that leaves every ``build_config`` out is counted the same way, to the parameter."""
    import keras
    from keras import layers as L

    from calc.config_params import declared_params

    models = [
        keras.Sequential([keras.Input((40,)), L.Dense(30), L.Dropout(0.1), L.Dense(7, use_bias=False)]),
        keras.Sequential([keras.Input((32, 28, 3)), L.Conv2D(16, 3), L.MaxPooling2D(2), L.Conv2D(8, 5, strides=2,
                          padding="same"), L.AveragePooling2D(3, strides=1), L.Flatten(), L.Dense(10)]),
        keras.Sequential([keras.Input((12,), dtype="int32"), L.Embedding(50, 8), L.LSTM(6, return_sequences=True),
                          L.GRU(5), L.Reshape((5, 1)), L.Conv1D(4, 2, padding="causal"), L.GlobalAveragePooling1D(),
                          L.Dense(3)]),
        keras.Sequential([keras.Input((9, 5)), L.EinsumDense("abc,cd->abd", output_shape=(9, 11), bias_axes="d"),
                          L.SeparableConv1D(6, 3, depth_multiplier=2), L.DepthwiseConv1D(2), L.Flatten(),
                          L.EinsumDense("ab,bc->ac", output_shape=4)]),
    ]
    for model in models:
        config = _without_build_configs(json.loads(json.dumps(keras.saving.serialize_keras_object(model))))
        assert "build_config" not in json.dumps(config)
        assert declared_params(config) == model.count_params(), [layer.name for layer in model.layers]


def test_a_sequential_file_declaring_a_huge_layer_without_its_build_config_is_refused():
    from calc.uploads import check_declared_params

    config = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, 40000]}},
        {"class_name": "Dense", "config": {"units": 40000}}]}}
    with pytest.raises(ValueError, match="1,600,040,000"):
        check_declared_params(config)
