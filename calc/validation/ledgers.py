"""The committed ledger of every validation spec, so that validating reads instead of builds.

``validation/ledgers.json.gz`` (beside the package, in the repository) holds the profile
(``calc.profiles.profile_to_dict``) of every model any validation data file names, keyed by
the spec's key, with the Keras version and profile format they were made with, and for a
saved file the SHA-256 of its bytes. ``committed_profiles()`` serves them when they match the
installed Keras; a spec they lack, or a file whose bytes changed, is built as before.

When Keras, TensorFlow or the adapter changes, ``python -m calc validate --rebuild-ledgers``
builds every ledger afresh, says which differ from the committed ones, and with ``--save``
writes the file again.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calc.catalogue import ModelFile, ModelSpec
from calc.profile_json import PROFILE_FORMAT, profile_from_dict, profile_to_dict
from calc.profiles import get_profile, installed_keras_version
from calc.types import ModelProfile
from calc.validation.data import WALK_DATA, load_measurements
from calc.requests import spec_from_dict

LEDGERS = Path(__file__).resolve().parents[2] / "validation" / "ledgers.json.gz"

Spec = ModelSpec | ModelFile


def _file_digest(spec: ModelFile) -> str:
    with open(spec.resolved(), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def validation_specs(paths: Iterable[Path] = WALK_DATA) -> dict[str, Spec]:
    """Every spec the data files name, by key, sorted."""
    specs: dict[str, Spec] = {}
    for path in paths:
        for case in load_measurements(path)["cases"]:
            spec = spec_from_dict(case["spec"])
            specs[spec.key] = spec
    return dict(sorted(specs.items()))


@dataclass(frozen=True)
class CommittedLedgers:
    keras: str
    profile_format: int
    profiles: dict[str, dict[str, Any]]
    file_digests: dict[str, str]

    def usable(self) -> bool:
        return self.why_unusable() is None

    def why_unusable(self) -> str | None:
        """None when these ledgers fit this Keras and profile format, else why not, in one line."""
        if self.keras == installed_keras_version() and self.profile_format == PROFILE_FORMAT:
            return None
        return (f"the committed ledgers were made with Keras {self.keras} (profile format {self.profile_format}); "
                f"this is Keras {installed_keras_version()}: building every model (python -m calc validate "
                "--rebuild-ledgers --save writes them again)")

    def profile(self, spec: Spec) -> ModelProfile | None:
        data = self.profiles.get(spec.key)
        if data is None or (isinstance(spec, ModelFile) and self.file_digests.get(spec.key) != _file_digest(spec)):
            return None
        return profile_from_dict(data)


def read_ledgers(path: Path = LEDGERS) -> CommittedLedgers | None:
    """The committed ledgers; None when the file is absent (an installed package without the repository)."""
    try:
        with gzip.open(path, "rt") as f:
            raw = json.load(f)
    except FileNotFoundError:
        return None
    return CommittedLedgers(str(raw["keras"]), int(raw["profile_format"]), raw["profiles"], raw.get("file_digests", {}))


def write_ledgers(profiles: dict[str, ModelProfile], specs: dict[str, Spec], path: Path = LEDGERS) -> None:
    digests = {k: _file_digest(s) for k, s in specs.items() if isinstance(s, ModelFile)}
    raw = {"keras": installed_keras_version(), "profile_format": PROFILE_FORMAT,
           "profiles": {k: profile_to_dict(p) for k, p in sorted(profiles.items())},
           "file_digests": dict(sorted(digests.items()))}
    path.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0: the same ledgers give the same bytes
    with open(path, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as f:
        f.write((json.dumps(raw, sort_keys=True, separators=(",", ":")) + "\n").encode())


def committed_profiles(note: Callable[[str], None] | None = None) -> Callable[[Spec], ModelProfile]:
    """A ``profile_for(spec)`` for ``calc.validation.validate``: the committed ledger where it
    fits, else ``calc.profiles.get_profile`` (a Keras build). ``note`` hears, once, why the
    committed ledgers cannot be used."""
    ledgers = read_ledgers()
    if ledgers is not None and (why := ledgers.why_unusable()) is not None:
        if note is not None:
            note(why)
        ledgers = None
    decoded: dict[str, ModelProfile] = {}

    def profile_for(spec: Spec) -> ModelProfile:
        if spec.key not in decoded:
            decoded[spec.key] = (ledgers.profile(spec) if ledgers is not None else None) or get_profile(spec)
        return decoded[spec.key]

    return profile_for


def rebuild(build: Callable[[Spec], ModelProfile], progress: Callable[[int, int, str], None] | None = None,
            only_missing: bool = False) -> tuple[dict[str, ModelProfile], list[str], list[str]]:
    """Builds every validation spec's ledger; returns them, the keys whose ledger differs from
    the committed one, and the keys the committed file lacks. With ``only_missing``, the
    committed ledgers are kept as they are and only the specs they lack are built (newly
    measured cases: minutes instead of the hour a whole rebuild takes)."""
    specs = validation_specs()
    ledgers = read_ledgers()
    committed = ledgers.profiles if ledgers is not None else {}
    if only_missing and ledgers is not None and (why := ledgers.why_unusable()) is not None:
        raise ValueError(f"the committed ledgers cannot be kept: {why}")
    built: dict[str, ModelProfile] = {}
    differ, missing = [], []
    for i, (key, spec) in enumerate(specs.items()):
        if only_missing and key in committed:
            built[key] = profile_from_dict(committed[key])
            continue
        built[key] = build(spec)
        if progress is not None:
            progress(i + 1, len(specs), key)
        if key not in committed:
            missing.append(key)
        elif profile_from_dict(committed[key]) != built[key]:
            differ.append(key)
    return built, differ, missing


def fresh_profile(spec: Spec) -> ModelProfile:
    """A Keras build of ``spec`` that bypasses the shipped ledgers and every cache."""
    from calc.profiles import build_profile
    from calc.uploads import profile_upload

    if isinstance(spec, ModelFile):
        with open(spec.resolved(), "rb") as f:
            data = f.read()
        return profile_upload(data, spec.key, max_bytes=len(data) + 1)
    return build_profile(spec)
