"""Memory budgets of the child processes, in bytes.

Every child runs under a watchdog (``calc.workers.protocol.Child.ask`` reads its resident
memory every quarter second and stops it past its budget), and a request predicted to
need more than its budget is refused before a child starts. An operator sets each budget
in GiB through the environment (docs/HOSTING.md):

- ``CALC_MEASURE_GIB`` (6): a measurement of a real training step ("Measure now");
- ``CALC_READER_GIB`` (4): reading an uploaded model file;
- ``CALC_BUILD_GIB`` (3): the build worker, replaced after a build leaves it above this;
- ``CALC_COMPILE_GIB`` (8): an XLA compile of the step for a GPU target.
"""

from __future__ import annotations

import math
import os

DEFAULT_GIB = {"measure": 6.0, "reader": 4.0, "build": 3.0, "compile": 8.0}
# What a measurement's process holds besides the allocator's peak: Python, TensorFlow,
# Keras and the traced step (1.16 and 1.33 GiB above the peak for MobileNetV2 96 px b16
# and ResNet50 128 px b32 on the CPU, polled resident size).
TENSORFLOW_RESIDENT_BYTES = 3 * 2**29  # 1.5 GiB


def budget_bytes(kind: str) -> int:
    """The budget of one kind of child (``DEFAULT_GIB``'s keys); a setting that is not a
    number of GiB from 0.25 to 1024 leaves the default."""
    default = DEFAULT_GIB[kind]
    try:
        gib = float(os.environ.get(f"CALC_{kind.upper()}_GIB", default))
    except ValueError:
        gib = default
    if not (math.isfinite(gib) and 0.25 <= gib <= 1024):
        gib = default
    return int(gib * 2**30)


def gib(nbytes: int) -> str:
    """``nbytes`` in GiB for a message, one decimal."""
    return f"{nbytes / 2**30:,.1f} GiB"
