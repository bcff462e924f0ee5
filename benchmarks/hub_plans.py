"""XLA's plan of KerasHub fine-tuning steps here: the planned peak, what its parts hold against what
the parameter counts imply, the compile's time and the compile child's peak memory.

    python benchmarks/hub_plans.py [--models gemma2_2b_en,gemma2_9b_en] [--gpus t4,l4,h100-80]
                                   [--seq-len 512] [--lora-rank 4] [--batch 1]

Each plan is compiled in a fresh child (``calc.workers.plans.compile_plan``) with an empty cache,
under the compile budget (``CALC_COMPILE_GIB``, 8 GiB by default): the model is built without its
weights (``calc.keras.hub``), so a 9 B parameter model plans in about what a Keras application
does. The baseline, compiled in the same run and the same way: ResNet50 at 224 px, batch 32, Adam,
float32, on the first card. The machines are shared and noisy: times are given as ratios to it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

GIB = 2**30


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="gemma2_2b_en,gemma2_9b_en")
    parser.add_argument("--gpus", default="t4,l4,h100-80")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--lora-rank", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--optimizer", default="adamw")
    args = parser.parse_args()
    os.environ["CALC_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-hub-")

    from calc import xla
    from calc.catalogue import make_spec
    from calc.facts.optimizers import slots_per_variable
    from calc.gpus import GPU_PRESETS
    from calc.hub import lora_parameters, lora_trainable_bytes, make_hub_spec, optimizer_state_bytes
    from calc.types import Optimizer, TrainingConfig
    from calc.workers.budgets import budget_bytes
    from calc.workers.plans import compile_plan
    from calc.xla import cache, plan_budget, plan_from_analysis

    if (reason := xla.unavailable_reason()) is not None:
        raise SystemExit(f"no XLA plan here: {reason}")
    gpus = args.gpus.split(",")
    config = TrainingConfig(batch_size=args.batch, optimizer=Optimizer(args.optimizer), device="gpu")

    def compile_one(spec, step_config, gpu):
        started = time.perf_counter()
        raw = compile_plan(cache.plan_request(spec, step_config, xla.target_for(gpu)))
        return raw, time.perf_counter() - started

    base, base_s = compile_one(make_spec("ResNet50", 224), TrainingConfig(batch_size=32, optimizer="adam",
                                                                          device="gpu"), gpus[0])
    print(f"baseline: ResNet50 224 px b32 adam float32 on {gpus[0]}: {base_s:.1f} s, child peak "
          f"{base['worker_peak_rss_bytes'] / GIB:.2f} GiB")
    print(f"compile budget {budget_bytes('compile') / GIB:.1f} GiB; {args.seq_len} tokens, LoRA rank {args.lora_rank}, "
          f"batch {args.batch}, {args.optimizer}")
    print(f"{'model':16s} {'card':9s} {'peak GiB':>9s} {'fits':>5s} {'trainable':>12s} {'optimizer':>12s} "
          f"{'formula':>8s} {'seconds':>8s} {'x base':>7s} {'child GiB':>9s}")
    slots = slots_per_variable(config.optimizer, config.optimizer_options, 1)
    for name in args.models.split(","):
        spec = make_hub_spec(name, args.seq_len, args.lora_rank)
        lora = lora_parameters(spec.model, args.lora_rank)
        for gpu in gpus:
            raw, seconds = compile_one(spec, config, gpu)
            plan = plan_from_analysis(raw, gpu)
            assert plan.peak_bytes == sum(plan.components().values())
            trainable = lora_trainable_bytes(spec)
            formula = (raw["trainable_params"] == lora and raw["trainable_bytes"] == trainable
                       and raw["optimizer_bytes"] == optimizer_state_bytes(raw["trainable_bytes"], slots))
            budget = plan_budget(GPU_PRESETS[gpu], 0.0)
            fits = plan.peak_bytes + GPU_PRESETS[gpu].overhead_bytes <= budget.usable_bytes
            print(f"{name:16s} {gpu:9s} {plan.peak_bytes / GIB:9.2f} {'yes' if fits else 'no':>5s} "
                  f"{raw['trainable_bytes']:>12,} {raw['optimizer_bytes']:>12,} {'exact' if formula else 'OFF':>8s} "
                  f"{seconds:8.1f} {seconds / base_s:7.2f} {raw['worker_peak_rss_bytes'] / GIB:9.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
