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
import subprocess
import sys
import tempfile
import zipfile

from calc.measure import child_env
from calc.profiles import profile_from_dict
from calc.types import ModelProfile

MAX_UPLOAD_BYTES = 200 * 1024 * 1024
MAX_UNCOMPRESSED_BYTES = 1024 * 1024 * 1024
MAX_RATIO = 100
TIMEOUT_S = 180.0
ALLOWED = (".keras", ".h5")


def check_upload(data: bytes, filename: str) -> str:
    """Returns the file's extension, or raises ``ValueError`` saying what is wrong."""
    ext = os.path.splitext(filename.lower())[1]
    if ext not in ALLOWED:
        raise ValueError(f"Expected a .keras or .h5 file. Received: {os.path.basename(filename)!r}")
    if len(data) > MAX_UPLOAD_BYTES:
        raise ValueError(f"The file is {len(data) / 2**20:,.0f} MiB; the limit is {MAX_UPLOAD_BYTES // 2**20} MiB.")
    if not data:
        raise ValueError("The file is empty.")
    if ext == ".keras":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                total = sum(info.file_size for info in archive.infolist())
                names = archive.namelist()
        except zipfile.BadZipFile:
            raise ValueError("This is not a .keras file (a .keras file is a zip archive); is it truncated?") from None
        if total > MAX_UNCOMPRESSED_BYTES or total > MAX_RATIO * max(len(data), 1):
            raise ValueError(f"The archive would unpack to {total / 2**20:,.0f} MiB from {len(data) / 2**20:,.1f} MiB: refused.")
        if "config.json" not in names:
            raise ValueError("This zip archive has no config.json: it is not a Keras model.")
    elif not data.startswith(b"\x89HDF\r\n\x1a\n"):
        raise ValueError("This is not an HDF5 file (no HDF5 signature).")
    return ext


def profile_upload(data: bytes, filename: str, *, timeout_s: float = TIMEOUT_S) -> ModelProfile:
    """The ledger of an uploaded model, read in a subprocess with Keras safe mode on.

    Raises:
        ValueError: the file is not a model this tool can read, with the reason.
    """
    ext = check_upload(data, filename)
    workdir = tempfile.mkdtemp(prefix="calc-upload-")
    try:
        path = os.path.join(workdir, "model" + ext)
        with open(path, "wb") as f:
            f.write(data)
        env = child_env()
        try:
            proc = subprocess.run([sys.executable, "-m", "calc.keras_adapter", "--profile-file", path],
                                  capture_output=True, text=True, timeout=timeout_s, env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ValueError(f"Reading the model took more than {timeout_s:.0f} s and was stopped.") from None
        for line in proc.stdout.splitlines():
            if line.startswith("PROFILE "):
                profile = profile_from_dict(json.loads(line[len("PROFILE "):]))
                return _renamed(profile, os.path.basename(filename))
            if line.startswith("REFUSED "):
                raise ValueError(json.loads(line[len("REFUSED "):]))
        raise ValueError("The model could not be read (the reader stopped: out of memory or a damaged file).")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _renamed(profile: ModelProfile, name: str) -> ModelProfile:
    from dataclasses import replace

    return replace(profile, name=name[:120])
