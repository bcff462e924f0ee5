"""What an idle cluster costs: the CPU this host's own cluster (one plan and one build worker, each under
its nanny, the scheduler in this process) spends a minute while nothing runs, with Dask's default
settings and with the project's (``calc.cluster.engine.engine_config``), measured in the same run.

    python benchmarks/idle_cluster.py              # 40 s of each
    python benchmarks/idle_cluster.py --seconds 120

A hosted dashboard holds its cluster for as long as it runs, and every pytest worker that used the
engine holds one until it ends, so this is paid all day.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from suite_cpu import tree_cpu  # noqa: E402 - this folder is the script's own on sys.path


def idle_cpu_per_minute(settings: str, seconds: float) -> float:
    """CPU seconds a minute of a fresh idle cluster, under Dask's "defaults" or the project's "settings"."""
    engine = importlib.import_module("calc.cluster.engine")
    if settings == "defaults":
        ours = engine.engine_config()
        engine.engine_config = lambda: {k: v for k, v in ours.items() if not k.startswith(
            ("distributed.admin.", "distributed.worker.profile."))}
    started = engine.Engine(None, {"plan": 1, "build": 1})
    try:
        time.sleep(10)  # the workers have started and registered
        before = tree_cpu()
        time.sleep(seconds)
        return (tree_cpu() - before) * 60 / seconds
    finally:
        started.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=40.0, help="how long each cluster is watched idle")
    p.add_argument("--settings", choices=("defaults", "settings"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.settings:  # one cluster, in a process of its own (Dask's settings are process-wide)
        print(f"{idle_cpu_per_minute(args.settings, args.seconds):.2f}")
        return 0
    import subprocess

    figures = {}
    for settings in ("defaults", "settings"):
        done = subprocess.run([sys.executable, __file__, "--settings", settings, "--seconds", str(args.seconds)],
                              capture_output=True, text=True, check=True)
        figures[settings] = float(done.stdout.split()[-1])
    print(f"an idle cluster (scheduler, a plan and a build worker under their nannies), CPU seconds a minute: "
          f"Dask's defaults {figures['defaults']:.2f}, the project's settings {figures['settings']:.2f} "
          f"({figures['settings'] / figures['defaults']:.2f} of the defaults' on this host, {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
