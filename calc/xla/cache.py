"""What decides a plan, the key it is known by, and where known plans are kept.

A request holds everything that changes the plan (the model, or a saved file's content;
the one-device config; the target; the remat mode); its key adds the versions of the
packages the child compiles with and ``PLAN_FORMAT``. Plans shipped with the project are
read first, then the disk cache (least recently used dropped past ``CACHE_ENTRIES``).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from calc.disk_cache import read_entry, write_entry
from calc.catalogue import ModelFile, ModelSpec
from calc.requests import config_to_dict, spec_to_dict
from calc.types import TrainingConfig
from calc.xla.plan import REMAT_MODES, PlanError
from calc.xla.targets import GpuTarget

SHIPPED_PLANS = Path(__file__).parent.parent / "data" / "xla_plans.json.gz"
PLAN_FORMAT = 1  # bump when the child's answer or the request's meaning changes
# The packages the child needs; their versions are part of every cache key (XLA's version
# moves plans by 1-2 %).
PLAN_PACKAGES = ("jax", "jaxlib", "jax-cuda12-plugin", "keras")
CACHE_ENTRIES = 2000


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


def plan_request(spec: ModelSpec | ModelFile, config: TrainingConfig, target: GpuTarget,
                 remat: str = "") -> dict[str, Any]:
    """The child's request: everything that decides the plan."""
    if remat and remat not in REMAT_MODES:
        raise PlanError(f"remat must be one of {', '.join(REMAT_MODES)} or empty. Received: remat={remat!r}")
    config_data = config_to_dict(config)
    # The plan is of one device's step: the per-device batch decides it, and the kernels
    # (calc.types.Device) are the GPU's by construction.
    config_data.update(batch_size=config.per_replica_batch, num_gpus=1, device="gpu")
    spec_data = spec_to_dict(spec)
    if isinstance(spec, ModelFile):
        spec_data["sha256"] = _file_digest(spec.resolved())
    return {"spec": spec_data, "config": config_data, "target": target.key,
            "target_config": target.config_text(), "remat": remat or None}


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_key(request: dict[str, Any], versions: dict[str, str]) -> str:
    """A digest of the request (the file's content, not its path), the versions and the format."""
    spec = dict(request["spec"])
    if "sha256" in spec:
        spec.pop("file", None)
    keyed = {**request, "spec": spec, "target": None, "versions": versions, "format": PLAN_FORMAT}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:32]


def cache_dir() -> Path:
    """The disk cache's folder, beside the profiles' (``$CALC_CACHE_DIR``)."""
    from calc.profiles import cache_dir as profiles_cache_dir

    return profiles_cache_dir() / "xla-plans"


@functools.cache
def shipped_plans() -> dict[str, dict[str, Any]]:
    """Plans committed with the project (the validation cases, the dashboard's first page)."""
    try:
        with gzip.open(SHIPPED_PLANS, "rt") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def read_cached(key: str) -> dict[str, Any] | None:
    """The child's answer for ``key``: shipped, else from the disk cache; None if unknown."""
    if key in shipped_plans():
        return shipped_plans()[key]
    text = read_entry(cache_dir() / f"{key}.json")
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


def write_cached(key: str, raw: dict[str, Any]) -> None:
    """Keeps the child's answer for ``key`` on disk (atomically), dropping the oldest past ``CACHE_ENTRIES``."""
    write_entry(cache_dir() / f"{key}.json", json.dumps(raw), CACHE_ENTRIES)
