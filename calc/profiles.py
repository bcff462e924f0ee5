"""Getting a ``ModelProfile`` for a catalogue model, cheaply after the first time.

A profile is plain data, so it is cached in memory and as JSON on disk
(``$CALC_CACHE_DIR``, default ``~/.cache/keras-memory-calc``), keyed by the model
request and the Keras version. Only a cache miss imports TensorFlow and builds the
model, once.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections import Counter, OrderedDict
from pathlib import Path

from calc.catalogue import ModelFile, ModelSpec
from calc.disk_cache import cache_root, read_entry, write_entry
from calc.profile_json import PROFILE_FORMAT, profile_from_dict, profile_to_dict
from calc.types import ModelProfile

# Bumped when the adapter reads layers that no Keras application has differently (stop 16:
# MultiHeadAttention as its steps; stop 21: a convolution's dilation and causal padding;
# stop 22: GroupNormalization has a rule, so a cached profile no longer lists it as unknown),
# so the shipped catalogue profiles stay valid while the disk cache of a saved file's
# profile is rebuilt.
FILE_LEDGER = 4
SHIPPED_DIR = Path(__file__).parent / "data" / "profiles"


def cache_dir() -> Path:
    return cache_root()


def installed_keras_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("keras")
    except PackageNotFoundError:
        return "unknown"


_build_lock = threading.Lock()  # one Keras build at a time in the process bounds its memory
_memory: OrderedDict[str, ModelProfile] = OrderedDict()  # recently used profiles, newest last
_memory_guard = threading.Lock()
_key_locks: dict[str, threading.Lock] = {}
MEMORY_ENTRIES = 64
DISK_ENTRIES = 1000  # ledgers on disk, least recently used dropped (MobileNetV2: 51 KiB, NASNetLarge: 358 KiB)
BUILDS: Counter[str] = Counter()  # spec key -> Keras builds done by this process (tests check single flight with it)


def shipped_path(spec: ModelSpec) -> Path:
    return SHIPPED_DIR / f"{spec.key}-keras{installed_keras_version()}-v{PROFILE_FORMAT}.json.gz"


def _read_shipped(spec: ModelSpec) -> ModelProfile | None:
    """A profile shipped with the package (default sizes), when it fits this Keras."""
    import gzip

    path = shipped_path(spec)
    if not path.exists():
        return None
    try:
        with gzip.open(path, "rt") as f:
            return profile_from_dict(json.load(f))
    except (ValueError, OSError, EOFError):
        return None


def get_profile(spec: ModelSpec | ModelFile, *, build: bool = True) -> ModelProfile:
    """The profile of a catalogue model: memory, shipped, disk cache, then one build.

    A ``ModelFile`` is read as an upload is (``calc.uploads.profile_upload``: checked,
    then loaded with safe mode on in a subprocess), cached by its content.

    Single flight: callers asking for the same model at the same time wait for one
    build (a lock per model), whether or not the disk cache can be written; builds of
    different models run one at a time. At most ``MEMORY_ENTRIES`` profiles are kept
    in memory, least recently used dropped first.

    ``build``: False in a server, which never imports TensorFlow: a profile not known yet
    (its build is asked of the work service, ``calc.service``) raises ``ValueError``.
    """
    if isinstance(spec, ModelFile):
        return _file_profile(spec)
    key = spec.key
    with _memory_guard:
        if key in _memory:
            _memory.move_to_end(key)
            return _memory[key]
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:
        with _memory_guard:
            if key in _memory:  # the caller we waited for has built it
                return _memory[key]
        profile = _read_shipped(spec) or _read_or_build(spec, build)
        with _memory_guard:
            _remember(key, profile)
            _key_locks.pop(key, None)  # later callers find the profile in _memory
    return profile


def store_profile(spec: ModelSpec, profile: ModelProfile) -> None:
    """Keeps a profile built elsewhere (a build worker of ``calc.cluster``), in memory and on disk, where
    ``get_profile`` finds it."""
    _write_cached(_cached_path(spec), profile)
    with _memory_guard:
        _remember(spec.key, profile)


def needs_build(spec: ModelSpec) -> bool:
    """Whether ``get_profile(spec)`` would build it: not in memory, not shipped, not in the disk cache."""
    with _memory_guard:
        if spec.key in _memory:
            return False
    return not shipped_path(spec).exists() and not _cached_path(spec).exists()


def _cached_path(spec: ModelSpec) -> Path:
    return cache_dir() / f"{spec.key}-keras{installed_keras_version()}-v{PROFILE_FORMAT}.json"


def _remember(key: str, profile: ModelProfile) -> None:
    """Keeps a profile in memory, the least recently used dropped past ``MEMORY_ENTRIES``
    (the caller holds ``_memory_guard``)."""
    _memory[key] = profile
    while len(_memory) > MEMORY_ENTRIES:
        _memory.popitem(last=False)


@functools.lru_cache(maxsize=64)
def _content_key(resolved: str, size: int, mtime_ns: int, name: str) -> str:
    """A file's profile key, named by its content: hashed once per version of the file (its size and time)."""
    import hashlib

    with open(resolved, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return f"file-{digest[:20]}-{name}"


def _file_key(spec: ModelFile) -> tuple[str, Path]:
    """(the profile's key, its disk-cache path) for a file: a page's every rerun asks, so the file is read and
    hashed only when it changed."""
    resolved = spec.resolved()
    stat = os.stat(resolved)
    key = _content_key(resolved, stat.st_size, stat.st_mtime_ns, spec.key)
    return key, cache_dir() / f"{key}-keras{installed_keras_version()}-v{PROFILE_FORMAT}.{FILE_LEDGER}.json"


def known_file_profile(spec: ModelFile) -> ModelProfile | None:
    """A file's profile where it has been read already (in memory or in the disk cache), else None: never reads
    the model."""
    key, path = _file_key(spec)
    with _memory_guard:
        if key in _memory:
            return _memory[key]
    profile = _read_cached(path)
    if profile is not None:
        with _memory_guard:
            _remember(key, profile)
    return profile


def store_file_profile(spec: ModelFile, profile: ModelProfile) -> None:
    """Keeps a file's profile read elsewhere (the dashboard reads an upload itself), in memory and on disk, where
    ``get_profile`` and ``known_file_profile`` find it."""
    key, path = _file_key(spec)
    _write_cached(path, profile)
    with _memory_guard:
        _remember(key, profile)


def _file_profile(spec: ModelFile) -> ModelProfile:
    from calc.uploads import profile_upload

    key, path = _file_key(spec)
    with _memory_guard:
        if key in _memory:
            _memory.move_to_end(key)
            return _memory[key]
    profile = _read_cached(path)
    if profile is None:
        with open(spec.resolved(), "rb") as f:
            data = f.read()
        profile = profile_upload(data, spec.key, max_bytes=len(data) + 1)
        _write_cached(path, profile)
    with _memory_guard:
        _remember(key, profile)
    return profile


def _write_cached(path: Path, profile: ModelProfile) -> None:
    """A read-only home still works, just without the disk cache."""
    write_entry(path, json.dumps(profile_to_dict(profile)), DISK_ENTRIES)


def _read_or_build(spec: ModelSpec, build: bool = True) -> ModelProfile:
    path = _cached_path(spec)
    cached = _read_cached(path)
    if cached is not None:
        return cached
    if not build:
        raise ValueError(f"{spec.name} at {spec.height}x{spec.width} is not built on this server yet; reload the "
                         "page to have it built")
    with _build_lock:
        profile = build_profile(spec)
        BUILDS[spec.key] += 1
    _write_cached(path, profile)
    return profile


def build_profile(spec: ModelSpec) -> ModelProfile:
    """One Keras build, in this process (the command line; a server asks its build workers, ``calc.service``)."""
    from calc.keras.build import profile_catalogue_model

    return profile_catalogue_model(spec)


def _read_cached(path: Path) -> ModelProfile | None:
    text = read_entry(path)
    try:
        return profile_from_dict(json.loads(text)) if text is not None else None
    except ValueError:
        return None  # a stale or damaged cache entry is rebuilt
