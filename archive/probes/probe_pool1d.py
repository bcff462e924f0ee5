"""When a pooling layer's input gradient is freed: 1-D pooling against 2-D (a study).

    python benchmarks/probe_pool1d.py [--batch 32] [--no-memory-optimizer] [KIND ...]

Builds small models of three Conv(relu) blocks, each followed by a pooling layer
(KIND: ``1d_max``, ``1d_bn_max`` with BatchNormalization before the pool, ``1d_avg``,
``1d_bn_avg``, ``1d_dense_max`` with a Dense layer in place of the Conv1D, ``1d_nobias_max``
and ``1d_dense_nobias_max`` without their bias, ``2d_bn_max``; all by default), and, with
no pool, four Dense layers on (1024, 32) sequences (``seq_dense``, ``seq_dense_nobias``,
``seq_ln`` without a bias and with LayerNormalization after each, whose every gradient
buffer of 1 MiB or more is listed), trains each one step by the validation
protocol with TensorFlow's profiler on (``calc.measure``'s child, ``trace=True``) and
prints, for every ``MaxPoolGrad``/``AvgPoolGrad`` allocation, the event that made it and
the one that freed it, out of the step's events.

What it shows (stop 21, docs/MEASUREMENTS.md): above a layer with a bias, the 1-D pools'
gradient buffers are freed in the step's last events, after every earlier layer's backward
and the updates; above a layer without one they are freed as the layer below finishes, as
the 2-D pool's are. ``--no-memory-optimizer`` runs the child
with grappler's memory optimizer off (``probe_addn_rewrite.measure_without_memory_optimizer``),
to tell this apart from grappler's rewrite of gradient sums (``benchmarks/probe_addn_rewrite.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from probe_addn_rewrite import measure_without_memory_optimizer  # noqa: E402

from calc.catalogue import ModelFile  # noqa: E402
from calc.measure import measure_once  # noqa: E402
from calc.types import TrainingConfig  # noqa: E402

MIB = 2**20
KINDS = ("1d_max", "1d_bn_max", "1d_avg", "1d_bn_avg", "1d_dense_max", "1d_nobias_max", "1d_dense_nobias_max",
         "2d_bn_max", "seq_dense", "seq_dense_nobias", "seq_ln")


def build(keras, kind: str):
    L = keras.layers
    if kind.startswith("seq_"):  # four Dense layers on (1024, 32) sequences, no pool
        inp = keras.Input((1024, 32))
        x = inp
        for _ in range(4):
            x = L.Dense(32, use_bias=kind == "seq_dense")(x)
            if kind == "seq_ln":
                x = L.LayerNormalization()(x)
        return keras.Model(inp, L.Dense(10, activation="softmax")(L.Flatten()(x)))
    one_d = kind.startswith("1d")
    inp = keras.Input((4000, 1) if one_d else (200, 20, 1))
    x = inp
    for filters in (16, 32, 64):
        bias = "nobias" not in kind
        if "dense" in kind:
            x = L.Dense(filters, use_bias=bias)(x)
        elif one_d:
            x = L.Conv1D(filters, 9, padding="same", activation="relu", use_bias=bias)(x)
        else:
            x = L.Conv2D(filters, 3, padding="same", activation="relu")(x)
        if "_bn_" in kind:
            x = L.BatchNormalization()(x)
        if one_d:
            x = (L.MaxPooling1D(4) if kind.endswith("max") else L.AveragePooling1D(4))(x)
        else:
            x = L.MaxPooling2D((4, 1))(x)
    x = (L.GlobalAveragePooling1D() if one_d else L.GlobalAveragePooling2D())(x)
    return keras.Model(inp, L.Dense(10, activation="softmax")(x))


def measure(path: str, config: TrainingConfig, memory_optimizer: bool) -> dict:
    if memory_optimizer:
        return measure_once(ModelFile(path), config, trace=True)
    return measure_without_memory_optimizer(ModelFile(path), config, trace=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*", metavar="KIND", help=f"any of {', '.join(KINDS)} (all by default)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--no-memory-optimizer", action="store_true")
    args = parser.parse_args()
    if set(args.kinds) - set(KINDS):
        parser.error(f"KIND must be among {', '.join(KINDS)}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    config = TrainingConfig(batch_size=args.batch, optimizer="sgd")
    with tempfile.TemporaryDirectory() as directory:
        for kind in args.kinds or KINDS:
            keras.backend.clear_session()
            path = os.path.join(directory, f"{kind}.keras")
            build(keras, kind).save(path)
            result = measure(path, config, not args.no_memory_optimizer)
            events = result["allocations"]
            print(f"{kind} b{args.batch}: peak {result['peak_bytes'] / MIB:.1f} MiB, {len(events)} events", flush=True)
            made: dict = {}
            for index, event in enumerate(events):
                if event[0] == "a":
                    made[event[3]] = (index, event)
                    continue
                start, alloc = made.pop(event[3], (None, None))
                pooled = alloc and ("MaxPoolGrad" in alloc[4] or "AvgPoolGrad" in alloc[4])
                sequence = alloc and kind.startswith("seq_") and alloc[4].startswith("gradient_tape") and alloc[1] >= MIB
                if pooled or sequence:
                    print(f"  {'/'.join(alloc[4].split('/')[-3:])[-48:]:48s} {alloc[1] / MIB:6.2f} MiB  made at event "
                          f"{start:3d}, freed at {index:3d} of {len(events)}", flush=True)


if __name__ == "__main__":
    main()
