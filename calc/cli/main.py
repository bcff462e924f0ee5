"""Command line: ``python -m calc {estimate,measure,max-batch,max-seq,models,gpus,validate}``.

``estimate`` and ``measure`` take the same options; with ``--json`` each prints one
JSON object with ``peak_bytes`` and ``components``. Bad options print one line and
exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from calc.catalogue import CATALOGUE, ModelFile, ModelSpec
from calc.gpus import GPU_PRESETS
from calc.cli.estimate import cmd_estimate, cmd_fewest_cards, cmd_max_batch, cmd_max_seq
from calc.cli.options import (GIB, LOCAL_FILE_LIMIT, Parser, UsageError, add_gpu_options, add_model_options,
                              config_from_args, positive, read_file, seconds,
                              print_out, spec_and_config)
from calc.cli.validate import cmd_validate

def cmd_measure(args: argparse.Namespace) -> int:
    from calc.workers.measure import measure_training_step

    if args.file:
        import os

        from calc.uploads import check_upload

        # The checks an upload gets; the child then loads the file with safe mode on.
        check_upload(read_file(args), os.path.basename(args.file), max_bytes=LOCAL_FILE_LIMIT)
        spec: ModelSpec | ModelFile = ModelFile(os.path.abspath(args.file))
        config = config_from_args(args)
    else:
        spec, config = spec_and_config(args)
    if config.devices != 1:
        raise ValueError("measure runs on one device; use --gpus 1 and no --mesh (and the per-device batch).")
    m = measure_training_step(spec, config, repeats=args.repeats, timeout_s=args.timeout, xla=args.xla)
    out = {
        "model": spec.key,
        "batch_size": config.batch_size,
        "optimizer": config.optimizer.value,
        "precision": config.precision.value,
        "train_mode": config.train_mode.value,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "peak_bytes": m.peak_bytes,
        "peaks_bytes": list(m.peaks_bytes),
        "components": {"resident_before_step": m.resident_median_bytes,
                       "step": m.peak_bytes - m.resident_median_bytes},
        "device": m.device,
        "tensorflow": m.tensorflow,
        "keras": m.keras,
        "threads": m.threads,
        "jit_compile": m.jit_compile,
        "kernels": m.kernels,
    }
    lines = [f"{spec.key}  batch {config.batch_size}: measured peak {m.peak_bytes / GIB:.3f} GiB "
             f"({m.peak_bytes:,} bytes; median of {len(m.peaks_bytes)} runs, spread {m.spread * 100:.1f}%) "
             f"on {m.device} ({m.kernels} kernels: estimate with --device {m.kernels}), TF {m.tensorflow}, {m.threads}, "
             f"{'XLA (jit_compile=True)' if m.jit_compile else 'graph executor (jit_compile=False)'}"]
    print_out(out, args.json, lines)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    if args.hub:
        from calc.hub import hub_models

        hub = [{"preset": m.preset, "family": m.family, "task": m.task, "params": m.params,
                "description": m.description, "architecture_source": m.architecture_source}
               for m in hub_models().values()]
        print_out({"hub_models": hub}, args.json,
                  [f"{m['preset']:42s} {m['family']:15s} {m['task']:17s} {m['params']:>15,} parameters" for m in hub])
        return 0
    rows = [{"name": e.name, "family": e.family, "default_size": e.default_size, "min_size": e.min_size}
            for e in CATALOGUE.values()]
    print_out({"models": rows}, args.json,
           [f"{r['name']:20s} {r['family']:15s} default {r['default_size']}px, min {r['min_size']}px" for r in rows])
    return 0


def cmd_gpus(args: argparse.Namespace) -> int:
    rows = [{"key": g.key, "name": g.name, "memory_bytes": g.memory_bytes, "architecture": g.architecture,
             "bf16": g.bf16, "framework_overhead_bytes": g.overhead_bytes} for g in GPU_PRESETS.values()]
    print_out({"gpus": rows}, args.json,
              [f"{g.key:16s} {g.name:40s} {g.memory_bytes / GIB:7.2f} GiB  {g.architecture}" for g in GPU_PRESETS.values()])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m calc", description="GPU memory of one Keras training step.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    p = sub.add_parser("estimate", help="predict the peak of one training step")
    add_model_options(p)
    add_gpu_options(p)
    p.set_defaults(func=cmd_estimate)
    p = sub.add_parser("measure", help="run real training steps and read TensorFlow's allocator peak")
    add_model_options(p)
    p.add_argument("--repeats", type=positive, default=3)
    p.add_argument("--timeout", type=seconds, default=600.0, help="seconds per run")
    p.add_argument("--xla", action="store_true",
                   help="compile the step with XLA (jit_compile=True, Keras 3's default on a GPU); "
                        "the estimate models the step without it, which measure runs by default")
    p.set_defaults(func=cmd_measure)
    p = sub.add_parser("max-batch", help="largest batch that fits a GPU")
    add_model_options(p)
    add_gpu_options(p)
    p.set_defaults(func=cmd_max_batch)
    p = sub.add_parser("max-seq", help="longest sequence a KerasHub text model trains on a GPU, by XLA's plans")
    add_model_options(p)
    add_gpu_options(p)
    p.set_defaults(func=cmd_max_seq)
    p = sub.add_parser("fewest-cards", help="fewest cards of a GPU preset that train a KerasHub setup, by XLA's "
                                            "plans of a model-parallel mesh")
    add_model_options(p)
    add_gpu_options(p)
    p.set_defaults(func=cmd_fewest_cards)
    p = sub.add_parser("models", help="the Keras applications catalogue (--hub: the KerasHub presets)")
    p.add_argument("--hub", action="store_true", help="the KerasHub presets, planned by XLA (--model PRESET)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models)
    p = sub.add_parser("gpus", help="GPU presets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gpus)
    p = sub.add_parser("validate", help="estimate every measured case and print the error table")
    p.add_argument("--data", help="a validation JSON file (default: the CPU set; with --step xla, every XLA file)")
    p.add_argument("--step", choices=["graph", "xla"], default="graph",
                   help="graph: the walk of TensorFlow's graph executor (default); xla: XLA's plan, on the H100 "
                        "XLA measurements (TensorFlow's XLA step, JAX with autotuning off and on)")
    p.add_argument("--save", action="store_true",
                   help="write the report the dashboard reads (calc/data/validation_cpu_report.json; "
                        "for --data X.json, X_report.json beside it)")
    p.add_argument("--jobs", type=positive, default=min(4, os.cpu_count() or 1),
                   help="processes estimating the cases (default: this machine's cores, at most 4)")
    p.add_argument("--rebuild-ledgers", action="store_true",
                   help="build every validation model afresh with this Keras and compare with the committed "
                        "ledgers (validation/ledgers.json.gz); with --save, write them (after a Keras, "
                        "TensorFlow or adapter change)")
    p.add_argument("--missing-only", action="store_true",
                   help="with --rebuild-ledgers: keep the committed ledgers and build only the validation models "
                        "they lack (after measuring new cases)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_validate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from calc.workers.measure import MeasurementError

    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (UsageError, ValueError, MeasurementError) as exc:  # calc.xla.PlanError is a ValueError
        print(f"calc: error: {exc}".replace("\n", " "), file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
