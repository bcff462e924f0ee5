"""The golden table: every shipped model's breakdown at three configurations.

A refactor of the engine must leave this table unchanged (``tests/test_golden.py`` checks
it). Write it again only when a change is meant to move estimates, and say so in the commit:

    python tools/golden_breakdowns.py --write

Uses only the package's public API and the shipped ledgers, so it runs without Keras builds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from calc import CATALOGUE, Device, OptimizerOptions, TrainingConfig, estimate_memory, make_spec, max_batch_size
from calc.profiles import get_profile

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "golden" / "breakdowns.json"

CONFIGS = {
    "adam b32 float32 cpu": TrainingConfig(batch_size=32, optimizer="adam"),
    "sgd+momentum b8 mixed_float16 gpu": TrainingConfig(
        batch_size=8, optimizer="sgd", precision="mixed_float16", device=Device.GPU,
        optimizer_options=OptimizerOptions(momentum=True)),
    "adamw b16 mixed_bfloat16 last 10 accumulate 2 gpu": TrainingConfig(
        batch_size=16, optimizer="adamw", precision="mixed_bfloat16", train_mode="last_n", last_n_layers=10,
        gradient_accumulation_steps=2, device=Device.GPU),
}
LIMIT = 16 * 2**30


def table() -> dict[str, dict[str, dict[str, object]]]:
    out: dict[str, dict[str, dict[str, object]]] = {}
    for name in CATALOGUE:
        profile = get_profile(make_spec(name))
        rows = {}
        for label, config in CONFIGS.items():
            b = estimate_memory(profile, config)
            rows[label] = {**b.components(), "peak": b.peak_bytes, "phase": b.peak_phase,
                           "max_batch_16gib": max_batch_size(profile, config, LIMIT)}
        out[name] = rows
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {GOLDEN.name} instead of comparing")
    args = parser.parse_args()
    now = table()
    if args.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}: {len(now)} models x {len(CONFIGS)} configurations")
        return 0
    golden = json.loads(GOLDEN.read_text())
    diffs = [(m, c) for m in golden for c in golden[m] if golden[m][c] != now.get(m, {}).get(c)]
    print(f"{len(golden) * len(CONFIGS) - len(diffs)} of {len(golden) * len(CONFIGS)} breakdowns equal the golden table")
    for m, c in diffs[:20]:
        print(f"  differs: {m} {c}")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
