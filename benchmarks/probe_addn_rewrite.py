"""Grappler's memory optimizer rewrites some gradient sums on the CPU: a study, not the engine.

    python benchmarks/probe_addn_rewrite.py [--batch 64]

Two one-block models, 100x80x1 input, Conv2D(16, 3) -> BatchNormalization -> MaxPooling2D,
with a ReLU before the normalization or after it (``conv_relu_bn`` / ``conv_bn_relu``),
trained with Adam; each step is measured by the validation protocol with TensorFlow's
profiler on (``calc.measure.measure_once(..., trace="history")``). For each it prints the
measured peak, what was in use before the measured step beyond the variables and slots,
and the allocations named ``.../tmp_var*``.

What it shows (stop 15, docs/MEASUREMENTS.md): BatchNormalization's input gradient sums
three paths (an ``AddN`` of three). Grappler's ``SchedulingPass``
(``tensorflow/core/grappler/optimizers/memory_optimizer.cc``) rewrites an ``AddN`` of more
than two inputs into a ``TemporaryVariable`` accumulated by ``AssignAdd`` when its inputs
are live at the statically estimated peak and that peak is above 80 % of the device's
memory, which grappler takes from the device's attributes: 256 MiB for TensorFlow's CPU
device. The rewrite adds ``tmp_var_zeros``, a zeros tensor of the sum's size that stays
allocated across steps (measured before the step), and ``tmp_var`` during it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calc.catalogue import ModelFile  # noqa: E402
from calc.measure import measure_once  # noqa: E402
from calc.types import TrainingConfig  # noqa: E402

MIB = 2**20


def _models(keras, directory: str) -> dict[str, str]:
    L = keras.layers
    paths = {}
    for name, relu_first in (("conv_relu_bn", True), ("conv_bn_relu", False)):
        keras.backend.clear_session()
        inp = keras.Input((100, 80, 1))
        x = L.Conv2D(16, 3, padding="same")(inp)
        x = L.BatchNormalization()(L.ReLU()(x)) if relu_first else L.ReLU()(L.BatchNormalization()(x))
        x = L.GlobalAveragePooling2D()(L.MaxPooling2D()(x))
        path = os.path.join(directory, f"{name}.keras")
        keras.Model(inp, L.Dense(12, activation="softmax")(x)).save(path)
        paths[name] = path
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    with tempfile.TemporaryDirectory() as directory:
        for name, path in _models(keras, directory).items():
            r = measure_once(ModelFile(path), TrainingConfig(batch_size=args.batch, optimizer="adam"), trace="history")
            live: dict = {}
            for event in r["allocations_before"]:
                if event[0] == "a":
                    live[event[3]] = event
                else:
                    live.pop(event[3], None)
            kept = sum(e[1] for e in live.values() if "tmp_var" in e[4])
            step = sorted({e[4] for e in r["allocations"] if "tmp_var" in e[4]})
            print(f"{name:14s} b{args.batch}: peak {r['peak_bytes'] / MIB:6.1f} MiB, in use before the step "
                  f"{r['current_before_bytes'] / MIB:5.1f} MiB of which tmp_var {kept / MIB:5.1f}; "
                  f"in the step: {', '.join(step) or 'no tmp_var'}", flush=True)


if __name__ == "__main__":
    main()
