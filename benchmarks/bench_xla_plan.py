"""How long XLA's plan takes here: compile seconds and the worker's peak memory per model,
the cache hit, and ``max-batch --step xla``.

    python benchmarks/bench_xla.py [--models ResNet50,MobileNetV2,...] [--gpu t4]

Each compile runs in a fresh child with an empty cache (a temporary ``CALC_CACHE_DIR``),
at a batch no shipped plan holds, so every figure is a real compile on this machine. The
machines are shared and noisy: the figures are what this run saw, with the walk's time
for the same step as the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

DEFAULT_MODELS = "MobileNetV2,ResNet50,EfficientNetB0,DenseNet121,InceptionV3"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--gpu", default="t4")
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--max-batch-model", default="MobileNetV2")
    args = parser.parse_args()
    os.environ["CALC_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-xla-")

    from calc import xla
    from calc.catalogue import lookup, make_spec
    from calc.estimate import estimate_memory
    from calc.gpus import lookup_gpu
    from calc.profiles import get_profile
    from calc.types import TrainingConfig
    from calc.workers import plans
    from calc.xla import cache, compute

    if (reason := xla.unavailable_reason()) is not None:
        raise SystemExit(reason)
    config = TrainingConfig(batch_size=args.batch, optimizer="adam", device="gpu")
    print(f"XLA plan on {args.gpu}, batch {args.batch}, Adam, float32 ({os.cpu_count()} cores; {xla.plan_versions()})")
    print(f"{'model':16s} {'compile s':>9s} {'of it XLA':>9s} {'worker peak GiB':>15s} {'cache hit ms':>12s} "
          f"{'walk ms':>8s} {'plan MiB':>9s}")
    for name in args.models.split(","):
        spec = make_spec(name, lookup(name).default_size)
        request = cache.plan_request(spec, config, xla.target_for(args.gpu))
        started = time.perf_counter()
        raw = plans.compile_plan(request)
        wall = time.perf_counter() - started
        cache.write_cached(cache.family_key(request, xla.plan_versions()), config.per_replica_batch, raw)
        started = time.perf_counter()
        plan = xla.compute_plan(spec, config, args.gpu)
        hit_ms = (time.perf_counter() - started) * 1000
        profile = get_profile(spec)
        started = time.perf_counter()
        estimate_memory(profile, config)
        walk_ms = (time.perf_counter() - started) * 1000
        print(f"{name:16s} {wall:9.1f} {raw['compile_seconds']:9.1f} {raw['worker_peak_rss_bytes'] / 2**30:15.2f} "
              f"{hit_ms:12.1f} {walk_ms:8.1f} {plan.peak_bytes / 2**20:9.1f}", flush=True)

    from calc.cli import main as cli

    gpu = lookup_gpu(args.gpu)
    before = len(compute.COMPILES)
    started = time.perf_counter()
    cli(["max-batch", "--model", args.max_batch_model, "--optimizer", "adam", "--gpu", gpu.key, "--step", "xla"])
    print(f"max-batch --step xla for {args.max_batch_model} on {gpu.key}: {time.perf_counter() - started:.0f} s, "
          f"{len(compute.COMPILES) - before} compiles")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
