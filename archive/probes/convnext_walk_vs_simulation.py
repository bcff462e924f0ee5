"""Where the allocator simulation and the walk disagree on ConvNeXt's full-training steps.

    python benchmarks/convnext_walk_vs_simulation.py [TOP]

ConvNeXt's backward pass makes one request of 220 MiB or more whatever the batch (XLA's
dense filter gradient, ``calc.estimate.largest_fixed_request_bytes``), which the
allocator may hand a chunk up to 128 MiB larger. Over ConvNeXt Tiny/Small/Base at 96-224
px, SGD / Adam / Adamax / Lion, the three precisions and batch 1-16 (576 configurations),
prints how often the simulation (``calc.estimate._allocator_peak``) is above the walk
(the engine's estimate in full training), and the TOP (default 25) largest gaps. Stop 10
measured five of them (docs/MEASUREMENTS.md, "ConvNeXt: one 220 MiB request").
"""

from __future__ import annotations

import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calc import estimate  # noqa: E402
from calc.catalogue import make_spec  # noqa: E402
from calc.profiles import get_profile  # noqa: E402
from calc.types import TrainingConfig  # noqa: E402


def main(top: int) -> None:
    rows = []
    for name, size in itertools.product(("ConvNeXtTiny", "ConvNeXtSmall", "ConvNeXtBase"), (96, 128, 160, 224)):
        profile = get_profile(make_spec(name, size))
        for optimizer, precision, batch in itertools.product(("sgd", "adam", "adamax", "lion"),
                                                             ("float32", "mixed_float16", "mixed_bfloat16"),
                                                             (1, 4, 8, 16)):
            config = TrainingConfig(batch_size=batch, optimizer=optimizer, precision=precision)
            walk = estimate.estimate_memory(profile, config).peak_bytes
            simulated = estimate._allocator_peak(profile, estimate._without_batch(config), batch)
            rows.append(((simulated - walk) / walk * 100, name, size, optimizer, precision, batch, walk, simulated))
    rows.sort(reverse=True)
    print(f"{len(rows)} configurations; the simulation above the walk in {sum(r[0] > 0 for r in rows)}, "
          f"by more than 5 % in {sum(r[0] > 5 for r in rows)}")
    for gap, name, size, optimizer, precision, batch, walk, simulated in rows[:top]:
        print(f"{gap:+6.1f} %  {name} {size} px {optimizer} {precision} b{batch}: walk {walk / 2**20:.1f} MiB, "
              f"simulation {simulated / 2**20:.1f} MiB")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 25)
