"""The command line's shared options: parsing them into a profile, a config and a GPU, and printing."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, NoReturn

from calc.catalogue import ModelSpec, make_spec
from calc.gpus import GPU_PRESETS, GpuPreset, custom_gpu, lookup_gpu
from calc.hub import DTYPES, QUANTIZE_MODES, HubSpec, make_hub_spec
from calc.types import Device, ModelProfile, Optimizer, OptimizerOptions, Precision, TrainingConfig, TrainMode
from calc.xla import REMAT_MODES

GIB = 1024**3


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, status 2
        raise UsageError(message)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received {text!r}")
    return value


def momentum_value(text: str) -> float:
    """``--momentum`` alone, or with Keras' value (``--momentum 0.9``; 0 turns it off)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a momentum between 0 and 1, received {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a momentum between 0 and 1, received {text!r}")
    return value


def mesh_shape(text: str) -> tuple[int, int]:
    """``DATAxMODEL``: the data-parallel replicas and the model axis of a ``keras.distribution`` mesh."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and 0 < int(p) <= 64 for p in parts):
        raise argparse.ArgumentTypeError(f"expected DATAxMODEL, such as 4x1, 1x2 or 2x4. Received: {text[:40]!r}")
    return int(parts[0]), int(parts[1])


def _number(text: str, fits, expected: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not fits(value):  # nan fits nothing
        raise argparse.ArgumentTypeError(f"expected {expected}, received {text!r}")
    return value


def fraction(text: str) -> float:
    """``--margin``: a finite fraction in [0, 1)."""
    return _number(text, lambda v: 0.0 <= v < 1.0, "a fraction in [0, 1), e.g. 0.1 for 10%")


def seconds(text: str) -> float:
    """``--timeout``: seconds, more than 0 and at most a day."""
    return _number(text, lambda v: 0.0 < v <= 86_400.0, "seconds in (0, 86400]")


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="a Keras application, e.g. ResNet50, or a KerasHub preset, e.g. gemma2_2b_en "
                                   "(see `models` and `models --hub`)")
    p.add_argument("--file", help="your own saved model (.keras or .h5), read with Keras safe mode instead of --model")
    p.add_argument("--image-size", type=positive, help="square side in pixels (default: the model's own)")
    p.add_argument("--height", type=positive)
    p.add_argument("--width", type=positive)
    p.add_argument("--channels", type=positive, default=3)
    p.add_argument("--classes", type=positive, help="the classifier's outputs (default: 1000; a KerasHub "
                                                     "classifier's: 2)")
    p.add_argument("--no-top", action="store_true", help="backbone + global pooling + new Dense head")
    p.add_argument("--batch-size", type=positive, default=32, help="global batch of one training step")
    p.add_argument("--optimizer", type=str.lower, choices=[o.value for o in Optimizer], default="adam",
                   help="Keras' identifier, any case (sgd, adam, ...)")
    p.add_argument("--momentum", type=momentum_value, nargs="?", const=0.9, default=0.0, metavar="VALUE",
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
    p.add_argument("--last-n", "--last-n-layers", dest="last_n", type=positive, help="train only the last N layers")
    p.add_argument("--grad-accum", "--gradient-accumulation-steps", dest="grad_accum", type=positive, default=1,
                   help="gradient_accumulation_steps")
    p.add_argument("--gpus", "--num-gpus", dest="gpus", type=positive, default=1,
                   help="data-parallel replicas (--mesh Nx1)")
    p.add_argument("--mesh", type=mesh_shape, metavar="DATAxMODEL",
                   help="a keras.distribution mesh: DATA replicas of the batch by a MODEL axis the preset's layout map "
                        "shards the weights over (4x1: data parallel; 1x2, 2x4: model parallel); XLA plans one card's "
                        "step")
    p.add_argument("--hosts", type=positive, default=1, help="the hosts the mesh's cards sit on, as many on each")
    p.add_argument("--quantize", choices=QUANTIZE_MODES,
                   help="a KerasHub model's model.quantize(mode) before LoRA: frozen kernels in 8 or 4 bits")
    p.add_argument("--seq-len", "--sequence-length", dest="seq_len", type=positive,
                   help="a KerasHub text model's tokens per example (default 512)")
    p.add_argument("--lora-rank", type=positive, help="a KerasHub model's backbone.enable_lora(rank): only LoRA's "
                                                     "weights train")
    p.add_argument("--dtype", choices=DTYPES,
                   help="the dtype policy a KerasHub model is built under (default: bfloat16 for a causal LM, as "
                        "Keras's LoRA guides load Gemma; float32 otherwise)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def add_gpu_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", help=f"a preset: {', '.join(GPU_PRESETS)}")
    p.add_argument("--memory-gib", type=float, help="a custom card size in GiB")
    p.add_argument("--margin", type=fraction, default=0.0, help="safety margin, a fraction (0.1 = 10%%)")
    p.add_argument("--step", choices=["xla", "graph"],
                   help="which training step to predict: xla (XLA's own plan of the step Keras compiles on a GPU, "
                        "jit_compile=True, computed without a GPU; the default with --gpu) or graph (the walk of "
                        "TensorFlow's graph executor, jit_compile=False; the default otherwise)")
    p.add_argument("--remat", choices=["none", *REMAT_MODES], default="none",
                   help="keras.RematScope mode the model is built under (with --step xla)")
    p.add_argument("--compile", action="store_true",
                   help="with --step xla: compile this batch's plan even where the curve of known plans draws it")
    p.add_argument("--explain", action="store_true",
                   help="with --step xla: print what fills the plan's peak, by kind and by layer (compiles the "
                        "batch where the known plan does not say)")


LOCAL_FILE_LIMIT = 8 * 2**30  # your own file on your machine: the dashboard's 200 MiB is for strangers


def profile_and_config(args: argparse.Namespace) -> tuple[str, ModelProfile, TrainingConfig]:
    """(name, profile, config) from --model (catalogue) or --file (a saved model)."""
    if not args.file:
        from calc.profiles import get_profile

        spec, config = spec_and_config(args)
        return spec.key, get_profile(spec), config
    config = application_config(args)
    import os

    from calc.catalogue import ModelFile
    from calc.profiles import get_profile

    check_file(args)  # its name, size and readability, before any Keras child reads it
    # Read as an upload is (checked, then safe mode in a child), and cached by the file's
    # content: a second command on the same file reads the cache.
    profile = get_profile(ModelFile(os.path.abspath(args.file)))
    return profile.name, profile, config


def read_file(args: argparse.Namespace) -> bytes:
    """The bytes of --file, after ``check_file``; the bytes themselves are checked as an
    upload's by ``calc.uploads.check_upload`` (``profile_upload`` runs it)."""
    check_file(args)
    try:
        with open(args.file, "rb") as f:
            return f.read(LOCAL_FILE_LIMIT + 1)  # bounded, should it have grown since the check
    except OSError as exc:
        raise ValueError(f"cannot read {args.file}: {exc.strerror or exc}") from None


def check_file(args: argparse.Namespace) -> None:
    """--file's options, name and size are what the command line takes, and it is a regular
    file that can be opened (a link to one is followed)."""
    import os
    import stat

    from calc.uploads import check_extension

    given = [f"--{n.replace('_', '-')}" for n in ("model", "image_size", "height", "width", "no_top")
             if getattr(args, n)]
    if given:
        raise ValueError(f"--file takes the model as saved; drop {', '.join(given)}.")
    check_extension(args.file)
    try:
        # Without blocking: a FIFO would otherwise wait for a writer for ever.
        fd = os.open(args.file, os.O_RDONLY | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise ValueError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):  # /dev/zero, a FIFO, a folder: read for ever or not at all
        raise ValueError(f"{args.file} is not a regular file; --file takes a saved model file.")
    if info.st_size > LOCAL_FILE_LIMIT:
        raise ValueError(f"{args.file} is {info.st_size / 2**30:,.1f} GiB; the limit is {LOCAL_FILE_LIMIT // 2**30} GiB.")


def spec_and_config(args: argparse.Namespace) -> tuple[ModelSpec, TrainingConfig]:
    if not args.model:
        raise ValueError("the following arguments are required: --model (or --file)")
    config = application_config(args)
    spec = make_spec(
        args.model,
        args.image_size,
        height=args.height,
        width=args.width,
        channels=args.channels,
        include_top=not (args.no_top or args.frozen_backbone),
        classes=args.classes or 1000,
    )
    return spec, config


def hub_spec_and_config(args: argparse.Namespace) -> tuple[HubSpec, TrainingConfig]:
    """A KerasHub preset's setup from --model, --seq-len, --lora-rank, --dtype and --classes."""
    given = [f"--{n.replace('_', '-')}" for n in ("file", "image_size", "height", "width", "no_top", "last_n")
             if getattr(args, n)]
    if given:
        raise ValueError(f"a KerasHub model is set up by --seq-len, --lora-rank, --dtype, --classes and "
                         f"--frozen-backbone; drop {', '.join(given)}.")
    spec = make_hub_spec(args.model, args.seq_len, args.lora_rank or 0, args.dtype, args.classes or 2,
                         args.quantize or "")
    if args.frozen_backbone and (spec.lora_rank or spec.model.task == "causal_lm"):
        raise ValueError("--frozen-backbone trains a classifier's new head alone: a causal LM has none, and LoRA's "
                         "weights would be frozen with the backbone.")
    return spec, config_from_args(args)


def is_hub(args: argparse.Namespace) -> bool:
    """Whether --model names a KerasHub preset; its options without one are an error."""
    from calc.hub import is_hub_model

    if args.model and is_hub_model(args.model):
        return True
    given = [f"--{n.replace('_', '-')}" for n in ("seq_len", "lora_rank", "dtype", "quantize") if getattr(args, n, None)]
    if given:
        raise ValueError(f"{', '.join(given)} set up a KerasHub model (`python -m calc models --hub`).")
    return False


def application_config(args: argparse.Namespace) -> TrainingConfig:
    """``config_from_args`` for a Keras application or a saved file, which has no layout map to shard by."""
    config = config_from_args(args)
    if config.model_parallel > 1:
        raise ValueError("a Keras application or a saved file has no layout map to shard its weights by: its mesh is "
                         "data parallel, --mesh Nx1")
    return config


def config_from_args(args: argparse.Namespace) -> TrainingConfig:
    frozen = args.frozen_backbone
    data, model = getattr(args, "mesh", None) or (args.gpus, 1)
    if getattr(args, "mesh", None) and args.gpus != 1:
        raise ValueError("--mesh and --gpus exclude each other: --gpus N is --mesh Nx1.")
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
        num_gpus=data,
        model_parallel=model,
        hosts=getattr(args, "hosts", 1),
        device=device_from_name(args.device),
    )


def device_from_name(name: str) -> Device:
    """``auto`` is this machine's CPU kernels (``calc.workers.measure.local_cpu_device``), so that
    ``estimate`` and ``measure`` with the same options describe the same step: under
    mixed_float16 the two CPU kernels differ by up to 2x on small steps (validation_cpu_fp16)."""
    if name == "auto":
        from calc.workers.measure import local_cpu_device

        return local_cpu_device()
    return Device(name)


def gpu_from_args(args: argparse.Namespace) -> GpuPreset | None:
    if args.gpu and args.memory_gib is not None:
        raise ValueError("--gpu and --memory-gib exclude each other.")
    if args.gpu:
        return lookup_gpu(args.gpu)
    if args.memory_gib is not None:
        return custom_gpu(args.memory_gib)
    return None


def print_out(obj: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    if as_json:
        print(json.dumps(obj))
    else:
        print("\n".join(lines))


