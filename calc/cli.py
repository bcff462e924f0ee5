"""Command line: ``python -m calc {estimate,measure,max-batch,models,gpus,validate}``.

``estimate`` and ``measure`` take the same options; with ``--json`` each prints one
JSON object with ``peak_bytes`` and ``components``. Bad options print one line and
exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from calc.catalogue import CATALOGUE, ModelFile, ModelSpec, make_spec
from calc.gpus import GPU_PRESETS, GpuPreset, custom_gpu, lookup_gpu
from calc.types import Device, ModelProfile, Optimizer, OptimizerOptions, Precision, TrainingConfig, TrainMode
from calc.xla import REMAT_MODES

GIB = 1024**3


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, status 2
        raise UsageError(message)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received {text!r}")
    return value


def _momentum(text: str) -> float:
    """``--momentum`` alone, or with Keras' value (``--momentum 0.9``; 0 turns it off)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a momentum between 0 and 1, received {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a momentum between 0 and 1, received {text!r}")
    return value


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="a Keras application, e.g. ResNet50 (see `models`)")
    p.add_argument("--file", help="your own saved model (.keras or .h5), read with Keras safe mode instead of --model")
    p.add_argument("--image-size", type=_positive, help="square side in pixels (default: the model's own)")
    p.add_argument("--height", type=_positive)
    p.add_argument("--width", type=_positive)
    p.add_argument("--channels", type=_positive, default=3)
    p.add_argument("--classes", type=_positive, default=1000)
    p.add_argument("--no-top", action="store_true", help="backbone + global pooling + new Dense head")
    p.add_argument("--batch-size", type=_positive, default=32, help="global batch of one training step")
    p.add_argument("--optimizer", type=str.lower, choices=[o.value for o in Optimizer], default="adam",
                   help="Keras' identifier, any case (sgd, adam, ...)")
    p.add_argument("--momentum", type=_momentum, nargs="?", const=0.9, default=0.0, metavar="VALUE",
                   help="SGD/RMSprop with momentum (the value, e.g. 0.9, may follow; 0 is none)")
    p.add_argument("--amsgrad", action="store_true")
    p.add_argument("--centered", action="store_true", help="centered RMSprop")
    p.add_argument("--ema", "--use-ema", dest="ema", action="store_true", help="use_ema=True")
    p.add_argument("--precision", choices=[p.value for p in Precision], default="float32")
    p.add_argument("--device", choices=["auto", *(d.value for d in Device)], default="auto",
                   help="the kernels the step runs on: auto (this machine's CPU, as measure runs it: cpu_fp16 "
                        "where the CPU has AVX512-FP16, else cpu), cpu, cpu_fp16, or gpu "
                        "(cuDNN/cuBLAS: no float16 CPU-kernel buffers, no XLA CPU filter for grouped convs)")
    p.add_argument("--frozen-backbone", action="store_true", help="Keras transfer-learning recipe (implies --no-top)")
    p.add_argument("--last-n", "--last-n-layers", dest="last_n", type=_positive, help="train only the last N layers")
    p.add_argument("--grad-accum", "--gradient-accumulation-steps", dest="grad_accum", type=_positive, default=1,
                   help="gradient_accumulation_steps")
    p.add_argument("--gpus", "--num-gpus", dest="gpus", type=_positive, default=1, help="data-parallel replicas")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _add_gpu_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", help=f"a preset: {', '.join(GPU_PRESETS)}")
    p.add_argument("--memory-gib", type=float, help="a custom card size in GiB")
    p.add_argument("--margin", type=float, default=0.0, help="safety margin, a fraction (0.1 = 10%%)")
    p.add_argument("--step", choices=["xla", "graph"],
                   help="which training step to predict: xla (XLA's own plan of the step Keras compiles on a GPU, "
                        "jit_compile=True, computed without a GPU; the default with --gpu) or graph (the walk of "
                        "TensorFlow's graph executor, jit_compile=False; the default otherwise)")
    p.add_argument("--remat", choices=["none", *REMAT_MODES], default="none",
                   help="keras.RematScope mode the model is built under (with --step xla)")


LOCAL_FILE_LIMIT = 8 * 2**30  # your own file on your machine: the dashboard's 200 MiB is for strangers


def _profile_and_config(args: argparse.Namespace) -> tuple[str, ModelProfile, TrainingConfig]:
    """(name, profile, config) from --model (catalogue) or --file (a saved model)."""
    if not args.file:
        from calc.profiles import get_profile

        spec, config = _spec_and_config(args)
        return spec.key, get_profile(spec), config
    import os

    from calc.uploads import profile_upload

    data = _read_file(args)
    profile = profile_upload(data, os.path.basename(args.file), max_bytes=LOCAL_FILE_LIMIT)
    return profile.name, profile, _config(args)


def _read_file(args: argparse.Namespace) -> bytes:
    """The bytes of --file, after its name and size are checked; the bytes themselves are
    checked as an upload's by ``calc.uploads.check_upload`` (``profile_upload`` runs it)."""
    import os

    from calc.uploads import check_extension

    given = [f"--{n.replace('_', '-')}" for n in ("model", "image_size", "height", "width", "no_top")
             if getattr(args, n)]
    if given:
        raise ValueError(f"--file takes the model as saved; drop {', '.join(given)}.")
    check_extension(args.file)
    try:
        size = os.path.getsize(args.file)
        if size > LOCAL_FILE_LIMIT:
            raise ValueError(f"{args.file} is {size / 2**30:,.1f} GiB; the limit is {LOCAL_FILE_LIMIT // 2**30} GiB.")
        with open(args.file, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ValueError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    return data


def _spec_and_config(args: argparse.Namespace) -> tuple[ModelSpec, TrainingConfig]:
    if not args.model:
        raise ValueError("the following arguments are required: --model (or --file)")
    config = _config(args)
    spec = make_spec(
        args.model,
        args.image_size,
        height=args.height,
        width=args.width,
        channels=args.channels,
        include_top=not (args.no_top or args.frozen_backbone),
        classes=args.classes,
    )
    return spec, config


def _config(args: argparse.Namespace) -> TrainingConfig:
    frozen = args.frozen_backbone
    if frozen and args.last_n:
        raise ValueError("--frozen-backbone and --last-n exclude each other.")
    mode = TrainMode.FROZEN_BACKBONE if frozen else TrainMode.LAST_N if args.last_n else TrainMode.ALL
    return TrainingConfig(
        batch_size=args.batch_size,
        optimizer=Optimizer(args.optimizer),
        optimizer_options=OptimizerOptions(
            momentum=args.momentum > 0, amsgrad=args.amsgrad, centered=args.centered, use_ema=args.ema
        ),
        precision=Precision(args.precision),
        train_mode=mode,
        last_n_layers=args.last_n or 0,
        gradient_accumulation_steps=args.grad_accum,
        num_gpus=args.gpus,
        device=_device(args.device),
    )


def _device(name: str) -> Device:
    """``auto`` is this machine's CPU kernels (``calc.workers.measure.local_cpu_device``), so that
    ``estimate`` and ``measure`` with the same options describe the same step: under
    mixed_float16 the two CPU kernels differ by up to 2x on small steps (validation_cpu_fp16)."""
    if name == "auto":
        from calc.workers.measure import local_cpu_device

        return local_cpu_device()
    return Device(name)


def _gpu(args: argparse.Namespace) -> GpuPreset | None:
    if args.gpu and args.memory_gib is not None:
        raise ValueError("--gpu and --memory-gib exclude each other.")
    if args.gpu:
        return lookup_gpu(args.gpu)
    if args.memory_gib is not None:
        return custom_gpu(args.memory_gib)
    return None


def _print(obj: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    if as_json:
        print(json.dumps(obj))
    else:
        print("\n".join(lines))


# What each kind of calc.estimate.spread_caveats means; the measured record that follows a
# note is read from the committed validation report (calc.validation.caveat_record).
CAVEAT_LINES = {
    "large_variable": ("one variable holds {gib:.3f} GiB: when the executor runs its weight gradient decides "
                       "the peak, so repeated runs of such a step can have two modes"),
    "large_fixed_request": ("one request of {gib:.3f} GiB whatever the batch (XLA's dense filter gradient of "
                            "grouped convolutions) may get a chunk up to 128 MiB larger, so runs can have two modes"),
    "inference_layout": ("part of the model runs in inference, where the allocator's whole chunks set the peak "
                         "({gib:.3f} GiB of them simulated here): it jumps between neighbouring batch sizes and "
                         "differs between runs"),
    "updates_together": ("under mixed_float16 every update waits for every gradient, then all start together, "
                         "and that is this step's peak ({gib:.3f} GiB of update temporaries counted): how many are "
                         "alive at once differs between runs"),
    "float16_buffer": ("under mixed_float16 this step peaks while a float16 CPU kernel holds a buffer of {gib:.3f} "
                       "GiB (im2col of a convolution's gradient, or a MatMul's float32 copies), which may get a "
                       "larger chunk; a GPU has no such buffer"),
}


def _caveat_notes(caveats: dict[str, int], device: Device = Device.CPU) -> list[str]:
    """One note per caveat kind, each followed by its measured record when the report has one
    (for GPU kernels, the H100 slice's record too)."""
    from calc.validation import (CAVEAT_STEPS, GPU_TF_REPORT, caveat_record, gpu_record_sentence, load_report,
                                 record_sentence)

    def report_or_nothing(*path):
        try:
            return load_report(*path)
        except (OSError, ValueError):
            return {}

    report = report_or_nothing() if caveats else {}
    gpu_report = report_or_nothing(GPU_TF_REPORT) if caveats and device is Device.GPU else {}
    notes = []
    for kind, nbytes in caveats.items():
        note = CAVEAT_LINES[kind].format(gib=nbytes / GIB)
        if (record := caveat_record(report, kind)) is not None:
            note += f"; {record_sentence(record, CAVEAT_STEPS[kind])}"
        if (gpu := caveat_record(gpu_report, kind)) is not None:
            note += f"; {gpu_record_sentence(gpu, CAVEAT_STEPS[kind])}"
        notes.append(note)
    return notes


def _own_model_note() -> list[str]:
    """How the estimate fared on the own-model slice (architectures the engine was not fitted on)."""
    from calc.validation import CUSTOM_REPORT, OWN_MODEL_STEPS, load_report, overall_record, record_sentence

    try:
        record = overall_record(load_report(CUSTOM_REPORT))
    except (OSError, ValueError):
        return []
    if record is None:
        return []
    return [f"your own model: the engine's rules were measured on Keras applications; "
            f"{record_sentence(record, OWN_MODEL_STEPS)} (calc/data/validation_custom_cpu.json)"]


def _step(args: argparse.Namespace) -> str:
    """``--step``, or what Keras runs by default: XLA on a GPU preset, else the graph executor."""
    step = args.step or ("xla" if args.gpu else "graph")
    if args.remat != "none" and step != "xla":
        raise ValueError("--remat is answered by the XLA plan: add --step xla and --gpu PRESET.")
    return step


def _plan_spec(args: argparse.Namespace) -> ModelSpec | ModelFile:
    import os

    return ModelFile(os.path.abspath(args.file)) if args.file else _spec_and_config(args)[0]


def _xla_plan_or_reason(args: argparse.Namespace, config: TrainingConfig, gpu: GpuPreset | None):
    """(plan, None) or (None, one-line reason the walk is shown instead)."""
    from calc.xla import PlanError, compute_plan

    if gpu is None:
        return None, "the XLA plan compiles for a card: add --gpu PRESET"
    try:
        return compute_plan(_plan_spec(args), config, gpu.key, "" if args.remat == "none" else args.remat), None
    except PlanError as exc:
        return None, str(exc)


def cmd_estimate(args: argparse.Namespace) -> int:
    from calc.estimate import estimate_memory, fit_on_gpu, spread_caveats

    name, profile, config = _profile_and_config(args)
    gpu = _gpu(args)
    step = _step(args)
    if step == "xla":
        plan, reason = _xla_plan_or_reason(args, config, gpu)
        if plan is not None:
            return _print_plan(args, name, config, gpu, plan)
        print(f"calc: the XLA plan is unavailable ({reason}); showing the graph-executor walk instead",
              file=sys.stderr)
    b = estimate_memory(profile, config)
    out: dict[str, Any] = {
        "model": name,
        "step": "graph",
        "batch_size": config.batch_size,
        "per_device_batch": config.per_replica_batch,
        "optimizer": config.optimizer.value,
        "precision": config.precision.value,
        "train_mode": config.train_mode.value,
        "device": config.device.value,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "peak_bytes": b.peak_bytes,
        "components": b.components(),
        "peak_phase": b.peak_phase,
        "unknown_layer_types": list(profile.unknown_layer_types),
        "caveats": spread_caveats(profile, config),
    }
    if step == "xla":
        out["xla_unavailable"] = reason
    lines = [f"{name}  batch {config.batch_size}  {config.optimizer.value}  {config.precision.value}  "
             f"{config.train_mode.value}  on {config.device.value}  (graph executor, jit_compile=False)"]
    lines += [f"  {k:20s} {v / GIB:10.3f} GiB" for k, v in b.components().items()]
    lines.append(f"  {'predicted peak':20s} {b.peak_bytes / GIB:10.3f} GiB  ({b.peak_bytes:,} bytes, at {b.peak_phase})")
    if gpu is not None:
        fit = fit_on_gpu(profile, config, gpu.memory_bytes, overhead_bytes=gpu.overhead_bytes, safety_margin=args.margin)
        out.update(gpu=gpu.key, gpu_memory_bytes=gpu.memory_bytes, framework_overhead_bytes=gpu.overhead_bytes,
                   fits=fit.fits, max_batch_size=fit.max_batch)
        verdict = "fits" if fit.fits else "does NOT fit"
        lines.append(f"  + framework overhead {gpu.overhead_bytes / GIB:.3f} GiB on {gpu.name}: {verdict} "
                     f"({fit.needed_bytes / GIB:.2f} of {fit.usable_bytes / GIB:.2f} GiB usable); "
                     f"largest batch that fits: {fit.max_batch}")
    lines += [f"  note: {note}" for note in _caveat_notes(out["caveats"], config.device)]
    if args.file:
        lines += [f"  note: {note}" for note in _own_model_note()]
    if profile.unknown_layer_types:
        lines.append(f"  note: layer types without a rule (counted as keeping input and output): {', '.join(profile.unknown_layer_types)}")
    _print(out, args.json, lines)
    return 0


def _print_plan(args: argparse.Namespace, name: str, config: TrainingConfig, gpu: GpuPreset, plan) -> int:
    usable = int(gpu.memory_bytes * (1.0 - args.margin))
    needed = plan.peak_bytes + gpu.overhead_bytes
    out: dict[str, Any] = {
        "model": name,
        "step": "xla",
        "batch_size": config.batch_size,
        "per_device_batch": config.per_replica_batch,
        "optimizer": config.optimizer.value,
        "precision": config.precision.value,
        "train_mode": config.train_mode.value,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "remat": plan.remat or None,
        "peak_bytes": plan.peak_bytes,
        "components": plan.components(),
        "target": plan.target,
        "compile_seconds": plan.compile_seconds,
        "versions": plan.versions,
        "gpu": gpu.key, "gpu_memory_bytes": gpu.memory_bytes, "framework_overhead_bytes": gpu.overhead_bytes,
        "fits": needed <= usable,
    }
    lines = [f"{name}  batch {config.batch_size}  {config.optimizer.value}  {config.precision.value}  "
             f"{config.train_mode.value}  (XLA's plan of the step Keras compiles on {gpu.name}, jit_compile=True"
             f"{', RematScope ' + plan.remat if plan.remat else ''})"]
    lines += [f"  {k:20s} {v / GIB:10.3f} GiB" for k, v in plan.components().items()]
    lines.append(f"  {'planned peak':20s} {plan.peak_bytes / GIB:10.3f} GiB  ({plan.peak_bytes:,} bytes; "
                 f"{plan.versions}, XLA autotuning off)")
    lines.append(f"  + framework overhead {gpu.overhead_bytes / GIB:.3f} GiB on {gpu.name}: "
                 f"{'fits' if out['fits'] else 'does NOT fit'} ({needed / GIB:.2f} of {usable / GIB:.2f} GiB usable); "
                 "`max-batch --step xla` finds the largest batch")
    _print(out, args.json, lines)
    return 0


def cmd_measure(args: argparse.Namespace) -> int:
    from calc.workers.measure import measure_training_step

    if args.file:
        import os

        from calc.uploads import check_upload

        # The checks an upload gets; the child then loads the file with safe mode on.
        check_upload(_read_file(args), os.path.basename(args.file), max_bytes=LOCAL_FILE_LIMIT)
        spec, config = ModelFile(os.path.abspath(args.file)), _config(args)
    else:
        spec, config = _spec_and_config(args)
    if config.num_gpus != 1:
        raise ValueError("measure runs on one device; use --gpus 1 (and the per-device batch).")
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
    _print(out, args.json, lines)
    return 0


def cmd_max_batch(args: argparse.Namespace) -> int:
    from calc.estimate import max_batch_size

    gpu = _gpu(args)
    if gpu is None:
        raise ValueError("max-batch needs --gpu PRESET or --memory-gib N.")
    name, profile, config = _profile_and_config(args)
    fit = max_batch_size(profile, config, gpu.memory_bytes, overhead_bytes=gpu.overhead_bytes, safety_margin=args.margin)
    out = {"model": name, "step": "graph", "gpu": gpu.key, "gpu_memory_bytes": gpu.memory_bytes,
           "framework_overhead_bytes": gpu.overhead_bytes, "safety_margin": args.margin, "max_batch_size": fit}
    if _step(args) == "xla":
        from calc.xla import PlanError, plan_max_batch

        usable = int(gpu.memory_bytes * (1.0 - args.margin)) - gpu.overhead_bytes
        try:
            found = plan_max_batch(_plan_spec(args), config, gpu.key, usable, max(1, fit // config.num_gpus),
                                   "" if args.remat == "none" else args.remat)
        except PlanError as exc:
            print(f"calc: the XLA plan is unavailable ({exc}); showing the graph-executor walk instead",
                  file=sys.stderr)
            out["xla_unavailable"] = str(exc)
        else:
            best = found.max_batch * config.num_gpus
            out.update(step="xla", max_batch_size=best, graph_max_batch_size=fit, compiles=found.compiles,
                       compiled=[{"per_device_batch": b, "needed_bytes": n, "fits": n <= usable}
                                 for b, n in found.compiled])
            edge = (f"batch {found.max_batch} per device planned {dict(found.compiled).get(found.max_batch, 0) / GIB:.2f}"
                    f" GiB and fits, {found.max_batch + 1} planned "
                    f"{dict(found.compiled).get(found.max_batch + 1, 0) / GIB:.2f} GiB and does not"
                    if found.max_batch else "not even batch 1 per device fits")
            _print(out, args.json, [f"{name} on {gpu.name} (margin {args.margin:.0%}), XLA's plan (jit_compile=True): "
                                    f"largest batch {best}; {edge} ({usable / GIB:.2f} GiB usable after the "
                                    f"framework overhead); {found.compiles} plans consulted "
                                    f"(the graph-executor walk says {fit})"])
            return 0
    _print(out, args.json, [f"{name} on {gpu.name} (margin {args.margin:.0%}), graph executor (jit_compile=False): "
                            f"largest batch {fit}"])
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    rows = [{"name": e.name, "family": e.family, "default_size": e.default_size, "min_size": e.min_size}
            for e in CATALOGUE.values()]
    _print({"models": rows}, args.json,
           [f"{r['name']:20s} {r['family']:15s} default {r['default_size']}px, min {r['min_size']}px" for r in rows])
    return 0


def cmd_gpus(args: argparse.Namespace) -> int:
    rows = [{"key": g.key, "name": g.name, "memory_bytes": g.memory_bytes, "architecture": g.architecture,
             "bf16": g.bf16, "framework_overhead_bytes": g.overhead_bytes} for g in GPU_PRESETS.values()]
    _print({"gpus": rows}, args.json,
           [f"{r['key']:16s} {r['name']:40s} {r['memory_bytes'] / GIB:7.2f} GiB  {r['architecture']}" for r in rows])
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from calc.validation import (CPU_DATA, caveat_records, records_as_json, reproducibility_json, summarize,
                                 validate)

    if args.step == "xla":
        return _validate_plan(args)
    data = Path(args.data) if args.data else CPU_DATA
    if not data.is_file():
        raise ValueError(f"no validation data at {data}")
    rows = validate(data)
    s = summarize(rows)
    if args.save:
        from calc.validation import report_path, save_report

        save_report(rows, report_path(data))
    out = _rows_json(rows, s)
    lines = [f"{'case':72s} {'measured':>10s} {'predicted':>10s} {'error':>8s}"]
    lines += [f"{r.case:72s} {r.measured_bytes / 2**20:8.1f}Mi {r.predicted_bytes / 2**20:8.1f}Mi {r.relative_error * 100:+7.1f}%"
              for r in rows]
    lines.append(f"{s.cases} cases: median |error| {s.median_abs * 100:.1f}%, 90th percentile {s.p90_abs * 100:.1f}%, "
                 f"max {s.max_abs * 100:.1f}%; under-predicted {s.under_count} cases, worst {s.worst_under * 100:+.1f}%")
    lines.append(f"measurement noise: {s.within_runs} of {s.cases} predictions lie within their case's measured runs; "
                 f"off the nearest run: median {s.median_from_runs * 100:.1f}%, max {s.max_from_runs * 100:.1f}%")
    out.update(within_measured_runs=s.within_runs, median_abs_error_from_nearest_run=s.median_from_runs,
               max_abs_error_from_nearest_run=s.max_from_runs)
    repro, single = reproducibility_json(rows), reproducibility_json(rows, against_prediction=True)
    out.update(reproducibility=repro, estimate_against_runs=single)
    if repro is not None:
        for what, r in (("TensorFlow against itself, each run against the median of its case's other runs", repro),
                        ("the estimate against the same single runs", single)):
            lines.append(f"{what}: median {r['median_deviation'] * 100:.1f}%; {r['runs_beyond']} of {r['runs']} runs "
                         f"({r['runs_beyond'] / r['runs'] * 100:.1f}%) more than {r['threshold'] * 100:.0f}% off, in "
                         f"{r['cases_with_run_beyond']} of {r['cases']} cases")
    records = caveat_records(rows)
    lines.append("by what makes runs of a step differ (calc.estimate.spread_caveats; a case with two kinds counts in both):")
    out["caveats"] = records_as_json(records)
    for kind, record in records.items():
        lines.append(f"  {kind:20s} {record.cases:4d} cases: {record.lowest_error * 100:+.1f}% to "
                     f"{record.highest_error * 100:+.1f}%, a margin of {record.margin_for_every_run * 100:.1f}% "
                     "covers every run")
    seed = _seed_rule_errors(rows)
    out["seed_000_rule_median_abs_error"] = seed
    lines.append(f"for scale, seed 000's rule (neurons x batch + params) x 8 bytes on the same cases: "
                 f"median |error| {seed * 100:.0f}%")
    _print(out, args.json, lines)
    return 0


def _rows_json(rows, s) -> dict[str, Any]:
    """The cases and the summary of one validation, as ``--json`` prints them."""
    return {
        "cases": [{"case": r.case, "measured_bytes": r.measured_bytes, "predicted_bytes": r.predicted_bytes,
                   "relative_error": round(r.relative_error, 4), "measured_spread": r.spread} for r in rows],
        "median_abs_error": s.median_abs, "p90_abs_error": s.p90_abs, "max_abs_error": s.max_abs,
        "under_predicted": s.under_count, "worst_under_prediction": s.worst_under,
    }


def _validate_plan(args: argparse.Namespace) -> int:
    """XLA's plan against every XLA data file (or --data): the step Keras compiles on a GPU."""
    from pathlib import Path

    from calc.validation import XLA_DATA, XLA_TARGET, plan_report_path, save_report, summarize, validate_plan

    paths = [Path(args.data)] if args.data else list(XLA_DATA)
    lines, out = [], {"step": "xla", "target": XLA_TARGET, "files": []}
    for path in paths:
        if not path.is_file():
            raise ValueError(f"no validation data at {path}")
        rows = validate_plan(path)
        s = summarize(rows)
        if args.save:
            save_report(rows, plan_report_path(path))
        lines.append(f"{path.name}: XLA's plan for {XLA_TARGET} (jit_compile=True, autotuning off) against what was measured")
        lines += [f"  {r.case:72s} {r.measured_bytes / 2**20:8.1f}Mi {r.predicted_bytes / 2**20:8.1f}Mi "
                  f"{r.relative_error * 100:+7.1f}%" for r in rows]
        lines.append(f"  {s.cases} cases: median |error| {s.median_abs * 100:.1f}%, 90th percentile {s.p90_abs * 100:.1f}%, "
                     f"max {s.max_abs * 100:.1f}%; under-predicted {s.under_count} cases, worst {s.worst_under * 100:+.1f}%")
        out["files"].append({"data": path.name, **_rows_json(rows, s)})
    _print(out, args.json, lines)
    return 0


def _seed_rule_errors(rows) -> float:
    import statistics

    from calc.classic import nnc_bytes_for_profile
    from calc.profiles import get_profile

    return statistics.median(
        abs(nnc_bytes_for_profile(get_profile(r.spec), r.config.per_replica_batch) - r.measured_bytes) / r.measured_bytes
        for r in rows
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m calc", description="GPU memory of one Keras training step.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("estimate", help="predict the peak of one training step")
    _add_model_options(p)
    _add_gpu_options(p)
    p.set_defaults(func=cmd_estimate)
    p = sub.add_parser("measure", help="run real training steps and read TensorFlow's allocator peak")
    _add_model_options(p)
    p.add_argument("--repeats", type=_positive, default=3)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    p.add_argument("--xla", action="store_true",
                   help="compile the step with XLA (jit_compile=True, Keras 3's default on a GPU); "
                        "the estimate models the step without it, which measure runs by default")
    p.set_defaults(func=cmd_measure)
    p = sub.add_parser("max-batch", help="largest batch that fits a GPU")
    _add_model_options(p)
    _add_gpu_options(p)
    p.set_defaults(func=cmd_max_batch)
    p = sub.add_parser("models", help="the Keras applications catalogue")
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
