"""Forward-pass peaks of a frozen backbone (inference mode), measured and estimated.

    python benchmarks/probe_frozen.py [variant ...] [--batch 16] [--size 112]

A "backbone" functional model of one MobileNetV2-style inverted-residual stage (or a
variant below) on a size x size x 32 input, frozen (trainable=False) and called with
training=False under a GlobalAveragePooling + Dense head, SGD. Each variant is
measured (the MEMORY_FACTS.md protocol, a fresh process, 1x1 threads) and estimated
by the engine on the same model. Prints MiB and the unit: one float32 96-channel map.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_child import FROZEN_STAGE, FROZEN_STEP, FROZEN_VARIANTS, PREAMBLE, last_line, run_child  # noqa: E402

VARIANTS = FROZEN_VARIANTS

CHILD = PREAMBLE + r'''
steps, batch, size = STEPS.split(), BATCH, SIZE
''' + FROZEN_STAGE + r'''profile = profile_model(model, backbone=backbone)
est = estimate_memory(profile, TrainingConfig(batch_size=batch, optimizer="sgd", train_mode="frozen_backbone"))
''' + FROZEN_STEP + r'''print("RESULT", json.dumps({"measured": peak - before, "estimated": est.peak_bytes - est.weights_bytes - est.optimizer_state_bytes, "phase": est.peak_phase}))
'''


def main(argv: list[str]) -> None:
    batch = int(argv[argv.index("--batch") + 1]) if "--batch" in argv else 16
    size = int(argv[argv.index("--size") + 1]) if "--size" in argv else 112
    names = [a for a in argv if a in VARIANTS] or list(VARIANTS)
    unit = size * size * 96 * 4 * batch / 2**20
    print(f"step above resident, MiB (one 96-channel map = {unit:.1f} MiB; input = {unit / 3:.1f} MiB)")
    for name in names:
        code = (CHILD.replace("ROOT", repr(ROOT)).replace("STEPS", repr(VARIANTS[name]))
                .replace("BATCH", str(batch)).replace("SIZE", str(size)))
        try:
            r = run_child(code)
        except RuntimeError as exc:
            print(f"{name}: failed: {last_line(exc)}")
            continue
        print(f"{name:22s} measured {r['measured'] / 2**20:7.1f}  estimated {r['estimated'] / 2**20:7.1f}"
              f"  ({r['measured'] / 2**20 / unit:4.2f} vs {r['estimated'] / 2**20 / unit:4.2f} maps)  {r['phase']}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
