"""What skipping XLA's machine code saves a plan's compile, and that the plan stays the same.

    python benchmarks/xla_codegen.py [--only N]

For each configuration below (five compute capabilities, both precisions, Adam and SGD, a frozen
backbone, a KerasHub LoRA step), one warm compile worker of the engine (``calc.cluster``) compiles
the plan three ways, in an order
that turns with each configuration (``calc.keras.codegen``): as the dashboard does (XLA stops
before its first kernel, the bytes read from the assignment it dumped), with the kernels emitted
but neither optimised by LLVM nor assembled, and with XLA's full code generation. Prints each
compile's seconds, whether every byte of the memory analyses and what fills their peak
(``calc.xla.peak``) are the same, and the ratios of the totals; exits 1 if anything differs or
the dashboard's compile emitted kernels.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from calc import xla
from calc.catalogue import make_spec
from calc.hub import HubSpec
from calc.keras.codegen import CODEGEN
from calc.types import Device, TrainingConfig
from calc.cluster.engine import run_plan

CASES = (  # (what, spec, config, card)
    ("ResNet50 224 b32 Adam float32", make_spec("ResNet50"), TrainingConfig(batch_size=32), "t4"),
    ("MobileNetV2 224 b64 Adam mixed_float16", make_spec("MobileNetV2"),
     TrainingConfig(batch_size=64, precision="mixed_float16"), "l4"),
    ("EfficientNetB0 224 b32 SGD float32", make_spec("EfficientNetB0"), TrainingConfig(batch_size=32, optimizer="sgd"),
     "a10"),
    ("DenseNet121 224 b32 Adam float32", make_spec("DenseNet121"), TrainingConfig(batch_size=32), "a100-40"),
    ("InceptionV3 299 b32 Adam mixed_float16", make_spec("InceptionV3"),
     TrainingConfig(batch_size=32, precision="mixed_float16"), "h100-80"),
    ("VGG16 224 b16 Adam float32, frozen backbone", make_spec("VGG16", include_top=False),
     TrainingConfig(batch_size=16, train_mode="frozen_backbone"), "rtx-4090"),
    ("Qwen 2.5 0.5B LoRA 4, 256 tokens, b4", HubSpec("qwen2.5_0.5b_en", 256, 4), TrainingConfig(batch_size=4), "l4"),
)


def _plan(answer: dict) -> dict:
    """Every byte of the memory analysis and what fills the peak: all that a plan keeps of its compile."""
    return {k: v for k, v in answer.items() if (k.endswith("_bytes") and not k.startswith("worker_")) or k == "peak"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", type=int, default=len(CASES), help="the first N configurations")
    args = p.parse_args()
    totals = dict.fromkeys(CODEGEN, 0.0)
    differ = 0
    for i, (what, spec, config, gpu) in enumerate(CASES[:args.only]):
        request, key = xla.family_request(spec, replace(config, device=Device.GPU), gpu)
        try:
            answers = {}
            for codegen in CODEGEN[i % 3:] + CODEGEN[:i % 3]:
                answers[codegen] = run_plan({**request, "codegen": codegen}, f"{key}-{codegen}", timeout_s=1800)
        except xla.PlanError as exc:
            print(f"{what} on {gpu}: {exc}", flush=True)
            return 1
        same = (all(_plan(a) == _plan(answers["full"]) for a in answers.values()) and "peak" in answers["none"]
                and answers["none"]["kernels_emitted"] is False)
        differ += not same
        seconds = {k: a["compile_seconds"] for k, a in answers.items()}
        for k in totals:
            totals[k] += seconds[k]
        print(f"{what} on {gpu}: as planned {seconds['none']:.1f} s, kernels unoptimised {seconds['unoptimised']:.1f} s, "
              f"full code generation {seconds['full']:.1f} s ({seconds['none'] / seconds['unoptimised']:.2f}x, "
              f"{seconds['none'] / seconds['full']:.2f}x); plan {'the same' if same else 'DIFFERS'}", flush=True)
        if not same:
            for k, a in answers.items():
                print(f"  {k:11} {_plan(a)} kernels emitted: {a.get('kernels_emitted')}", flush=True)
    n = min(args.only, len(CASES))
    print(f"XLA's compile, as planned: {totals['none']:.1f} s; kernels unoptimised {totals['unoptimised']:.1f} s "
          f"({totals['none'] / totals['unoptimised']:.2f}x); full code generation {totals['full']:.1f} s "
          f"({totals['none'] / totals['full']:.2f}x); {differ} of {n} plans differ in anything")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
