"""Writes the shipped profiles: every catalogue model at its default size, with its top.

    python tools/ship_profiles.py [NAME ...]

A shipped profile lets the dashboard's first page and the command line answer
without importing TensorFlow. They are plain ledgers (gzipped JSON), valid for the
Keras version in their file name; ``calc.profiles.get_profile`` ignores them under
another version and builds instead.
"""

from __future__ import annotations

import gzip
import json
import sys

from calc.catalogue import CATALOGUE, make_spec
from calc.keras.build import profile_catalogue_model
from calc.profiles import SHIPPED_DIR, profile_to_dict, shipped_path


def main(names: list[str]) -> None:
    SHIPPED_DIR.mkdir(parents=True, exist_ok=True)
    for name in names or list(CATALOGUE):
        spec = make_spec(name)
        path = shipped_path(spec)
        with gzip.open(path, "wt") as f:
            json.dump(profile_to_dict(profile_catalogue_model(spec)), f, separators=(",", ":"))
        print(f"{path.name}: {path.stat().st_size:,} bytes", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
