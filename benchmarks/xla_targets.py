"""How much XLA's plan of one step differs between GPU targets.

    python benchmarks/xla_targets.py [--gpus h100-80,a100-40,t4] [--models ResNet50,MobileNetV2]

Prints each model's planned peak per target and its difference from the first target.
Plans come from the cache (``$CALC_CACHE_DIR``) or are compiled once. The target decides
the layout XLA gives convolutions (NHWC from compute capability 9.0 for float32, NCHW
below) and the fusions it forms, so the same step plans differently per card.
"""

from __future__ import annotations

import argparse

# Five steps of the H100 XLA set (calc/data/gpu_tf_h100_xla.json): measured there, planned everywhere.
STEPS = (("ResNet50", 224, 16), ("EfficientNetB0", 224, 32), ("MobileNetV2", 224, 32), ("DenseNet121", 224, 16),
         ("InceptionV3", 299, 8))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", default="h100-80,a100-40,t4")
    parser.add_argument("--models", help="comma-separated subset of the five steps' models")
    args = parser.parse_args()

    from calc import xla
    from calc.catalogue import make_spec
    from calc.types import TrainingConfig

    gpus = args.gpus.split(",")
    print(f"Planned peak in MiB, float32, Adam ({xla.plan_versions()}); in brackets: against {gpus[0]}")
    print(f"{'step':28s}" + "".join(f"{g + ' (' + xla.target_for(g).compute_capability + ')':>22s}" for g in gpus))
    for name, size, batch in STEPS:
        if args.models and name not in args.models.split(","):
            continue
        spec, config = make_spec(name, size), TrainingConfig(batch_size=batch, optimizer="adam", device="gpu")
        peaks = [xla.compute_plan(spec, config, g).peak_bytes for g in gpus]
        cells = [f"{peaks[0] / 2**20:22.1f}"] + [f"{p / 2**20:12.1f} ({(p / peaks[0] - 1) * 100:+5.1f} %)" for p in peaks[1:]]
        print(f"{f'{name} {size} px b{batch}':28s}" + "".join(f"{c:>22s}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
