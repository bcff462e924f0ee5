"""What reading XLA's peak costs a compile: fresh compile children with and without XLA's dump, alternating.

    python benchmarks/xla_dump_cost.py [--model ResNet50] [--size 224] [--batch 32] [--gpu t4] [--rounds 2]

Each round compiles the step once without ``--xla_dump_to`` and once with it (the compile child
then reads what fills the peak, ``calc.xla.peak``, and deletes the dump), each in a fresh child.
Prints every time and the ratio of the totals, with / without.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from calc import xla
from calc.catalogue import make_spec
from calc.types import Device, Optimizer, TrainingConfig
from calc.workers import plans
from calc.workers.protocol import run_once


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="ResNet50")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--gpu", default="t4")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    request, _ = xla.family_request(make_spec(args.model, args.size), TrainingConfig(
        batch_size=args.batch, optimizer=Optimizer("adam"), device=Device.GPU), args.gpu)
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        for dump in (False, True):
            with tempfile.TemporaryDirectory(prefix="calc-xla-dump-") as folder:
                started = time.monotonic()
                outcome = run_once("plan-xla", request, env=plans.plan_env(folder if dump else None), timeout_s=900)
                times[dump].append(time.monotonic() - started)
            answer = outcome.reply.answer or {}
            if dump and "peak" not in answer:
                print("the compile with the dump gave no explanation", file=sys.stderr)
                return 1
            print(f"{'with' if dump else 'without'} the dump: {times[dump][-1]:.1f} s", flush=True)
    print(f"{args.model} {args.size} px b{args.batch} on {args.gpu}: with {sum(times[True]):.1f} s, without "
          f"{sum(times[False]):.1f} s over {args.rounds} rounds: {sum(times[True]) / sum(times[False]):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
