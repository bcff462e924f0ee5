"""Profiles of user-supplied model files, read safely.

The file is checked (extension, size, and for ``.keras`` zip archives the total
uncompressed size and the compression ratio, against zip bombs), written to a
private temporary directory, loaded by Keras with safe mode on in a separate
process with a time limit, and the directory is removed whatever happens.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import zipfile
import zlib

from calc.catalogue import ModelFile
from calc.types import ModelProfile
from calc.workers.files import profile_file

MAX_UPLOAD_BYTES = 200 * 1024 * 1024
MAX_UNCOMPRESSED_BYTES = 1024 * 1024 * 1024
MAX_RATIO = 100
TIMEOUT_S = 180.0
ALLOWED = (".keras", ".h5")


def check_extension(filename: str) -> str:
    """Returns the file's extension if it is a model's, or raises ``ValueError``."""
    ext = os.path.splitext(filename.lower())[1]
    if ext not in ALLOWED:
        raise ValueError(f"Expected a .keras or .h5 file. Received: {os.path.basename(filename)!r}")
    return ext


def check_upload(data: bytes, filename: str, *, max_bytes: int = MAX_UPLOAD_BYTES) -> str:
    """Returns the file's extension, or raises ``ValueError`` saying what is wrong."""
    ext = check_extension(filename)
    if len(data) > max_bytes:
        raise ValueError(f"The file is {len(data) / 2**20:,.0f} MiB; the limit is {max_bytes // 2**20} MiB.")
    if not data:
        raise ValueError("The file is empty.")
    if ext == ".keras":
        _check_entries(zip_entry_count(data))  # before ZipFile reads the whole directory
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
        except (zipfile.BadZipFile, EOFError, OSError, ValueError):
            raise ValueError("This is not a .keras file (a .keras file is a zip archive); is it truncated?") from None
        with archive:
            _check_entries(len(archive.infolist()))  # where the end record deferred to a zip64 one
            total = sum(info.file_size for info in archive.infolist())
            if total > MAX_UNCOMPRESSED_BYTES or total > MAX_RATIO * max(len(data), 1):
                raise ValueError(
                    f"The archive would unpack to {_size(total)} from {_size(len(data))} ({total / len(data):,.0f}x): "
                    f"refused as a possible zip bomb (limits {MAX_UNCOMPRESSED_BYTES // 2**30} GiB and {MAX_RATIO}x).")
            if "config.json" not in archive.namelist():
                raise ValueError("This zip archive has no config.json: it is not a Keras model.")
            config = _read_config(archive)
            custom = custom_classes(config)
            check_layer_count(config)
            check_declared_params(config)
        if custom:
            raise ValueError(
                f"The model uses classes defined in its author's Python code ({', '.join(custom[:5])}). Safe mode "
                "loads only Keras's own layers, so this file cannot be read here. Profile it where that code is "
                "importable: calc.keras.profile.profile_model(model).")
    elif not data.startswith(b"\x89HDF\r\n\x1a\n"):
        raise ValueError("This is not an HDF5 file (no HDF5 signature).")
    return ext


MAX_ENTRIES = 64  # Keras writes three: config.json, metadata.json, model.weights.h5
_END_OF_DIRECTORY = b"PK\x05\x06"


def zip_entry_count(data: bytes) -> int | None:
    """The number of files a zip archive's end record announces, read without opening the archive
    (opening reads the whole directory: 600,000 entries cost seconds and hundreds of MiB);
    None where the record is not found or defers to a zip64 record (``ZipFile`` then decides)."""
    at = data.rfind(_END_OF_DIRECTORY, max(0, len(data) - 22 - 65_535))
    if at < 0 or at + 22 > len(data):
        return None
    count = int.from_bytes(data[at + 10:at + 12], "little")
    return None if count == 0xFFFF else count


def _check_entries(entries: int | None) -> None:
    if entries is not None and entries > MAX_ENTRIES:
        raise ValueError(f"The archive holds {entries:,} files; a .keras file holds a few (the limit is {MAX_ENTRIES}).")


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 2**10:,.1f} KiB"


MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a ConvNeXtXLarge config.json is ~1 MiB


def _read_config(archive: zipfile.ZipFile) -> object:
    if archive.getinfo("config.json").file_size > MAX_CONFIG_BYTES:
        raise ValueError(f"config.json is larger than {MAX_CONFIG_BYTES // 2**20} MiB: refused.")
    try:
        raw = archive.read("config.json")
    except NotImplementedError:  # Deflate64, PPMd...: not what Keras writes
        raise ValueError("config.json is compressed with a method this tool does not read; Keras writes "
                         "stored or deflated entries: save the model again with model.save().") from None
    except RuntimeError:  # zipfile's word for an encrypted entry
        raise ValueError("config.json in this archive is encrypted; Keras cannot read it either.") from None
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error, ValueError) as exc:
        raise ValueError(f"The archive is damaged (is it truncated?): {' '.join(str(exc).split())[:200]}") from None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError("config.json in this archive is not valid JSON (or nested too deeply).") from None


MAX_LAYERS = 2000  # NASNetLarge, the largest Keras application, has 1,040 layers


def layer_count(config: object) -> int:
    """The entries of every ``"layers"`` list in a model's config (a nested model counts
    itself and its layers), read before Keras builds anything: ``config.json`` of a
    ``.keras`` file, or an ``.h5`` file's ``model_config``."""
    count, stack = 0, [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            layers = node.get("layers")
            if isinstance(layers, list):
                count += len(layers)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def check_declared_params(config: object) -> None:
    """Raises ``ValueError`` for a model whose weights, counted from its config
    (``calc.config_params``), would take the reader past its memory budget to build."""
    from calc.config_params import declared_params
    from calc.workers.budgets import TENSORFLOW_RESIDENT_BYTES, budget_bytes, gib

    params = declared_params(config)
    need, budget = 4 * params + TENSORFLOW_RESIDENT_BYTES, budget_bytes("reader")
    if need > budget:
        raise ValueError(f"The model's config declares {params:,} parameters: building it to read it takes about "
                         f"{gib(need)}, more than the reader's memory budget of {gib(budget)} (CALC_READER_GIB).")


def check_layer_count(config: object) -> None:
    """Raises ``ValueError`` for a model of more than ``MAX_LAYERS`` layers."""
    if (layers := layer_count(config)) > MAX_LAYERS:
        raise ValueError(f"The model has {layers:,} layers; the limit is {MAX_LAYERS:,} (twice the largest "
                         "Keras application), so that reading it cannot hold the server for minutes.")


def custom_classes(config: object) -> list[str]:
    """Names of classes in a Keras 3 ``config.json`` that Keras itself does not define.

    Keras writes ``module`` ("keras.layers", "keras.src.models.functional", ...) and,
    for classes registered by user code, ``registered_name`` ("package>Name").
    """
    found: list[str] = []
    stack = [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "class_name" in node and node["class_name"] != "__keras_tensor__":
                module = node.get("module")
                registered = node.get("registered_name")
                if (isinstance(registered, str) and ">" in registered) or (
                        module is not None and not str(module).startswith("keras")):
                    name = str(registered or f"{module}.{node['class_name']}")[:80]
                    if name not in found:
                        found.append(name)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def profile_upload(data: bytes, filename: str, *, timeout_s: float = TIMEOUT_S,
                   max_bytes: int = MAX_UPLOAD_BYTES) -> ModelProfile:
    """The ledger of an uploaded model, read in a subprocess with Keras safe mode on.

    Raises:
        ValueError: the file is not a model this tool can read, with the reason.
    """
    ext = check_upload(data, filename, max_bytes=max_bytes)
    workdir = tempfile.mkdtemp(prefix="calc-upload-")
    try:
        path = os.path.join(workdir, "model" + ext)
        with open(path, "wb") as f:
            f.write(data)
        return _renamed(profile_file(path, timeout_s=timeout_s), os.path.basename(filename))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


UPLOADS_KEPT = 16  # uploaded files kept for XLA's plan (the dashboard's own-file step), least recently used dropped
UPLOADS_KEPT_BYTES = 2 * 2**30


def keep_upload(data: bytes, filename: str) -> ModelFile:
    """Keeps a file that has been read (``profile_upload``) for XLA's plan, which compiles from the file.

    Named by its content (the same file from two visitors is one), in a private folder of the
    cache, at most ``UPLOADS_KEPT`` files and ``UPLOADS_KEPT_BYTES`` (the oldest dropped first).
    The plan's child loads it as the reader did: Keras safe mode, its own time and memory limits.

    Raises:
        ValueError: not a model file this tool reads (``check_upload``), or the cache cannot hold it.
    """
    import hashlib

    from calc.disk_cache import cache_root

    ext = check_upload(data, filename)
    folder = cache_root() / "uploads"
    path = folder / (hashlib.sha256(data).hexdigest() + ext)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.exists():
            os.utime(path)
        else:
            tmp = folder / f".{path.name}.{os.getpid()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, path)
        others = sorted((p for p in folder.glob("*.*") if p != path), key=lambda p: p.stat().st_mtime, reverse=True)
        total = path.stat().st_size
        for i, old in enumerate(others, start=1):  # this one first, then the most recently used
            total += old.stat().st_size
            if i >= UPLOADS_KEPT or total > UPLOADS_KEPT_BYTES:
                old.unlink(missing_ok=True)
    except OSError as exc:
        raise ValueError(f"the file cannot be kept for XLA's plan here ({type(exc).__name__})") from None
    return ModelFile(str(path))


def _renamed(profile: ModelProfile, name: str) -> ModelProfile:
    from dataclasses import replace

    return replace(profile, name=name[:120])
