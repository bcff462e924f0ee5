"""Uploaded files: checked before Keras sees them, read in safe mode, temp files removed."""

import io
import os
import tempfile
import zipfile

import pytest

from calc.uploads import MAX_UPLOAD_BYTES, check_upload, profile_upload


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
