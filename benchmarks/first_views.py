"""The shipped first views (meshes of several cards, quantized weights) from the command line with a fresh cache.

    python benchmarks/first_views.py

Runs ``python -m calc estimate ... --json`` for every setup of ``first_views`` in
calc/data/xla_shipped_curves.json on every card it names, each in a fresh process with a cache
folder of its own (``CALC_CACHE_DIR``), so the answer can only come from the shipped plans; a
compile would show as a time in minutes. Beside each, the same process's baseline measured in
the same run: ``python -m calc estimate --model ResNet50 --gpu t4`` (the landing page's shipped
plan). Prints each time, the ratio to the baseline, what the answer said (the peak of one card
and whether it fits), and the slowest.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _argv(entry: dict, gpu: str) -> list[str]:
    argv = ["--model", entry["preset"], "--seq-len", str(entry["sequence_length"]), "--lora-rank",
            str(entry["lora_rank"]), "--batch-size", str(entry["batch"]), "--optimizer", entry["optimizer"],
            "--gpu", gpu]
    for option in ("mesh", "quantize", "dtype", "hosts"):
        if option in entry:
            argv += [f"--{option}", str(entry[option])]
    return argv


def _timed(argv: list[str]) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as cache:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "calc", "estimate", *argv, "--json"], cwd=ROOT, text=True,
                              capture_output=True, env={**os.environ, "CALC_CACHE_DIR": cache}, timeout=1800)
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        return seconds, {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"}
    return seconds, json.loads(done.stdout)


def main() -> int:
    entries = json.loads(open(os.path.join(ROOT, "calc", "data", "xla_shipped_curves.json")).read())["first_views"]
    baseline = ["--model", "ResNet50", "--gpu", "t4"]
    _timed(baseline)  # the interpreter's and the packages' files read once before anything is timed
    rows, ratios = [], []
    for entry in entries:
        for gpu in entry["gpus"]:
            base, _ = _timed(baseline)
            seconds, out = _timed(_argv(entry, gpu))
            ratios.append(seconds / base)
            said = out.get("error") or (f"{out['peak_bytes'] / 2**30:.2f} GiB a card, "
                                        f"{'fits' if out['fits'] else 'does not fit'} ({out['plan_source']})")
            rows.append((seconds, base, " ".join(_argv(entry, gpu)), said))
            print(f"{seconds:6.2f} s  (baseline {base:5.2f} s, x{seconds / base:4.2f})  {rows[-1][2]}: {said}",
                  flush=True)
    slowest = max(rows)
    print(f"\n{len(rows)} first views: median {statistics.median(r[0] for r in rows):.2f} s, slowest "
          f"{slowest[0]:.2f} s ({slowest[2]}); median ratio to the baseline {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
