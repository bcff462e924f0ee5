"""Grappler's memory optimizer rewrites some gradient sums on the CPU: a study, not the engine.

    python benchmarks/probe_addn_rewrite.py [--batch 64]
    python benchmarks/probe_addn_rewrite.py --cases SUBSTRING [SUBSTRING ...]

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

``--cases`` measures the first validation case (catalogue, then own models) whose id
contains each SUBSTRING twice, by the validation protocol and again with grappler's memory
optimizer off (``RewriterConfig.NO_MEM_OPT``, which removes the rewrite), and prints both
peaks, what was in use before each step, and the engine's prediction: how much of a case's
error the rewrite accounts for.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calc.catalogue import ModelFile  # noqa: E402
from calc.measure import child_env, measure_once  # noqa: E402
from calc.requests import config_to_dict, spec_to_dict  # noqa: E402
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


def measure_without_memory_optimizer(spec, config: TrainingConfig, *, trace: bool = False,
                                     timeout_s: float = 600.0) -> dict:
    """``calc.measure.measure_once`` with grappler's memory optimizer off in the child."""
    request = json.dumps({"spec": spec_to_dict(spec), "config": config_to_dict(config), "xla": False,
                          "trace": bool(trace)})
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", request], capture_output=True,
                          text=True, env=child_env(), stdin=subprocess.DEVNULL, timeout=timeout_s)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("MEASURED ")]
    if not lines:
        raise SystemExit(f"the child failed: {(proc.stderr or proc.stdout).strip().splitlines()[-3:]}")
    return json.loads(lines[0][len("MEASURED "):])


def _child(request: str) -> None:
    """``calc.keras_adapter``'s measurement child, its session config without the memory optimizer."""
    from tensorflow.core.protobuf import rewriter_config_pb2
    from tensorflow.python.eager import context

    config = context.Context.config.fget

    def without_memory_optimizer(self):
        proto = config(self)
        proto.graph_options.rewrite_options.memory_optimization = rewriter_config_pb2.RewriterConfig.NO_MEM_OPT
        return proto

    context.Context.config = property(without_memory_optimizer)
    sys.argv = ["calc.keras_adapter", request]
    runpy.run_module("calc.keras_adapter", run_name="__main__")


def _cases(substrings: list[str]) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from trace_step import find_case

    from calc.estimate import estimate_memory
    from calc.profiles import get_profile
    from calc.validation import case_id

    for substring in substrings:
        spec, config = find_case(substring)
        predicted = estimate_memory(get_profile(spec), config).peak_bytes
        on, off = measure_once(spec, config), measure_without_memory_optimizer(spec, config)
        line = ", ".join(f"{label} {r['peak_bytes'] / MIB:.1f} MiB ({(predicted / r['peak_bytes'] - 1) * 100:+.1f} %, "
                         f"{r['current_before_bytes'] / MIB:.1f} before)" for label, r in (("as measured", on),
                                                                                           ("without", off)))
        print(f"{case_id(spec, config)}: engine {predicted / MIB:.1f} MiB; {line}", flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--cases", nargs="+", metavar="SUBSTRING")
    args = parser.parse_args()
    if args.cases:
        _cases(args.cases)
        return
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
