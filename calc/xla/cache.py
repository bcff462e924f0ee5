"""What decides a plan, the keys it is known by, and where known plans are kept.

A request holds everything that changes the plan (the model, or a saved file's content;
the one-device config; the target; the remat mode). Plans are kept by family: the same
request at every batch, one entry a family, so one read gives a configuration's whole curve
(``calc.xla.curve``). A family's key adds the versions of the packages the child compiles
with and ``PLAN_FORMAT``. Plans shipped with the project are read first, then the disk
cache (least recently used families dropped past ``CACHE_ENTRIES``).
"""

from __future__ import annotations

import copy
import fcntl
import functools
import gzip
import hashlib
import json
import os
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from calc.disk_cache import read_entry, write_entry
from calc.catalogue import ModelFile, ModelSpec
from calc.hub import HubSpec
from calc.requests import config_to_dict, spec_to_dict
from calc.types import MAX_DEVICES_PER_HOST, TrainingConfig
from calc.xla.plan import REMAT_MODES, PlanError
from calc.xla.targets import GpuTarget

SHIPPED_PLANS = Path(__file__).parent.parent / "data" / "xla_plans.json.gz"
PLAN_FORMAT = 2  # bump when the child's answer or the request's meaning changes
ATTENTION_FORMAT = 2  # the same for KerasHub models and own files alone (2: attention's kernel is chosen as on the card)
# The packages the child needs; their versions are part of every cache key (XLA's version
# moves plans by 1-2 %).
PLAN_PACKAGES = ("jax", "jaxlib", "jax-cuda12-plugin", "keras")
CACHE_ENTRIES = 2000  # families on disk
# What a kept plan needs (``calc.xla.plan.plan_from_analysis``, ``calc.xla.curve``): the rest of
# the child's answer is left out of the shipped file.
KEPT_FIELDS = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "trainable_bytes",
               "non_trainable_bytes", "optimizer_bytes", "metrics_bytes", "batch_bytes", "build_seconds",
               "compile_seconds", "jax", "keras", "peak", "triton_gemm", "quantized_bytes", "scale_bytes", "mesh")
# Of those, what the shipped file leaves out (it holds hundreds of plans): what fills each peak, but
# for the plan a first visit shows (tools/ship_xla_plans.py), whose largest layers it names.
NOT_SHIPPED = ("peak",)
SHIPPED_LAYERS = 12


def plan_versions() -> dict[str, str] | None:
    """Installed versions of what the child needs, read without importing; None if one is missing."""
    try:
        return {name: metadata.version(name) for name in PLAN_PACKAGES}
    except metadata.PackageNotFoundError:
        return None


def unavailable_reason() -> str | None:
    """Why no plan can be computed here (one line), or None."""
    if sys.version_info < (3, 12):
        return (f"the XLA plan needs Python 3.12 or newer for jax 0.11 (this is {sys.version_info.major}."
                f"{sys.version_info.minor}); install the project in a Python 3.12 environment")
    if plan_versions() is None:
        missing = [n for n in PLAN_PACKAGES if not _installed(n)]
        return f"the XLA plan needs {', '.join(missing)} (pip install -r requirements.txt)"
    return None


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def plan_request(spec: ModelSpec | ModelFile | HubSpec, config: TrainingConfig, target: GpuTarget,
                 remat: str = "") -> dict[str, Any]:
    """The child's request: everything that decides the plan."""
    if remat and remat not in REMAT_MODES:
        raise PlanError(f"remat must be one of {', '.join(REMAT_MODES)} or empty. Received: remat={remat!r}")
    if config.devices // config.hosts > MAX_DEVICES_PER_HOST:
        raise PlanError(f"XLA plans meshes of 1 to {MAX_DEVICES_PER_HOST} cards a host; this one has "
                        f"{config.devices // config.hosts}")
    config_data = config_to_dict(config)
    # The plan is of one device's step: on one card the batch decides it, on a mesh the global batch (each
    # replica's times the replicas) and the mesh; the kernels (calc.types.Device) are the GPU's by construction.
    config_data.update(device="gpu")
    spec_data = spec_to_dict(spec)
    if isinstance(spec, ModelFile):
        spec_data["sha256"] = _file_digest(spec.resolved())
    if isinstance(spec, (HubSpec, ModelFile)):
        spec_data["format"] = ATTENTION_FORMAT
    request = {"spec": spec_data, "config": config_data, "target": target.key,
               "target_config": target.config_text(), "remat": remat or None}
    # XLA's flags reach the child's compiler (calc.cluster.worker.kind_env), and some move the plan
    # (xla_gpu_memory_limit_slop_factor moves the limit XLA rematerialises at): a plan compiled under
    # them is kept apart. Without any, the key is what it always was, so shipped plans are found.
    flags = " ".join(os.environ.get("XLA_FLAGS", "").split())
    if flags:
        request["xla_flags"] = flags
    return request


def request_batch(request: dict[str, Any]) -> int:
    """The one-replica batch a request compiles (one device's, but on a mesh's model axis)."""
    return int(request["config"]["batch_size"]) // int(request["config"].get("num_gpus", 1))


def at_batch(request: dict[str, Any], batch: int) -> dict[str, Any]:
    """The same request at another one-replica batch."""
    moved = copy.deepcopy(request)
    moved["config"]["batch_size"] = batch * int(request["config"].get("num_gpus", 1))
    return moved


def _file_digest(path: str) -> str:
    """The file's sha256, read once for each size and modification time (a page asks for it each second)."""
    stat = os.stat(path)
    return _digest(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def family_key(request: dict[str, Any], versions: dict[str, str]) -> str:
    """A digest of the request at any batch (the file's content, not its path), the versions and the format."""
    spec = dict(request["spec"])
    if "sha256" in spec:
        spec.pop("file", None)
    keyed = {**at_batch(request, 0), "spec": spec, "target": None, "versions": versions, "format": PLAN_FORMAT}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:32]


def cache_dir() -> Path:
    """The disk cache's folder, beside the profiles' (``$CALC_CACHE_DIR``)."""
    from calc.profiles import cache_dir as profiles_cache_dir

    return profiles_cache_dir() / "xla-plans"


@functools.cache
def shipped_plans() -> dict[str, dict[int, dict[str, Any]]]:
    """Plans committed with the project, family key -> one-device batch -> the child's answer."""
    try:
        with gzip.open(SHIPPED_PLANS, "rt") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if data.get("format") != PLAN_FORMAT:
        return {}
    return {key: {int(b): raw for b, raw in family["plans"].items()} for key, family in data["families"].items()}


@functools.cache
def shipped_seconds() -> dict[str, tuple[float, float]]:
    """What the shipped plans record of their compiles, by model kind (a catalogue name, a KerasHub preset):
    (the median seconds of a fresh worker's task: building the model, tracing and XLA's compile; the median
    of XLA's compile alone, a worker's task that held the model). Measured on the 2-core machine that
    shipped them (``tools/ship_xla_plans.py``)."""
    import statistics

    try:
        with gzip.open(SHIPPED_PLANS, "rt") as f:
            families = json.load(f)["families"]
    except (OSError, ValueError, KeyError):
        return {}
    times: dict[str, list[tuple[float, float]]] = {}
    for family in families.values():
        model = str(family.get("label", "")).split(" ")[0].split("-")[0]
        for raw in family.get("plans", {}).values():
            if "build_seconds" in raw and "compile_seconds" in raw:
                times.setdefault(model, []).append((raw["build_seconds"], raw["compile_seconds"]))
    return {model: (statistics.median(b + c for b, c in seen), statistics.median(c for _, c in seen))
            for model, seen in times.items() if model}


# This process's plans by (cache folder, family), should the disk refuse them.
_compiled_here: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
_compiled_guard = threading.Lock()
MEMORY_FAMILIES = 256


def read_family(key: str) -> dict[int, dict[str, Any]]:
    """Every known plan of a family: one-device batch -> the child's answer (shipped, compiled by this
    process, then on disk)."""
    plans = dict(shipped_plans().get(key, {}))
    with _compiled_guard:
        plans.update(_compiled_here.get((str(cache_dir()), key), {}))
    text = read_entry(cache_dir() / f"{key}.json")
    if text is not None:
        try:
            plans.update({int(b): raw for b, raw in json.loads(text)["plans"].items()})
        except (ValueError, KeyError, TypeError, AttributeError):
            pass  # a damaged entry costs its compiles again
    return plans


def read_cached(key: str, batch: int) -> dict[str, Any] | None:
    """The child's answer for ``batch`` in family ``key``; None if unknown."""
    return read_family(key).get(batch)


def write_cached(key: str, batch: int, raw: dict[str, Any]) -> None:
    """Adds the child's answer for ``batch`` to family ``key`` on disk (one writer at a time across
    processes, the file replaced atomically), dropping the oldest families past ``CACHE_ENTRIES``.
    This process keeps it too (its last ``MEMORY_FAMILIES`` families), so a read-only or full disk
    costs no compile twice here."""
    where = (str(cache_dir()), key)
    with _compiled_guard:
        _compiled_here.setdefault(where, {})[batch] = {k: raw[k] for k in KEPT_FIELDS if k in raw}
        _compiled_here[where] = _compiled_here.pop(where)  # the most recent last
        while len(_compiled_here) > MEMORY_FAMILIES:
            _compiled_here.pop(next(iter(_compiled_here)))
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "families.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            plans: dict[str, Any] = {}
            text = read_entry(folder / f"{key}.json")
            if text is not None:
                try:
                    plans = dict(json.loads(text)["plans"])
                except (ValueError, KeyError, TypeError):
                    plans = {}
            plans[str(batch)] = {k: raw[k] for k in KEPT_FIELDS if k in raw}
            write_entry(folder / f"{key}.json", json.dumps({"plans": plans}, sort_keys=True), CACHE_ENTRIES)
    except OSError:
        pass  # a read-only or full disk only costs the compile again next time
