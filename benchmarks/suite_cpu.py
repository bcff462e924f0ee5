"""Where the test suite's CPU goes, by the kind of process that spent it.

    python benchmarks/suite_cpu.py                        # the README's `python -m pytest -q`, then the summary
    python benchmarks/suite_cpu.py -- -m "not browser"    # arguments after -- go to pytest

On 2 cores the suite is CPU-bound (its xdist workers keep both cores busy), so its wall time
follows the CPU its processes spend. While pytest runs, every process under it (its xdist
workers, the plan and measurement children, build and plan workers, Dask's scheduler and
nannies, Streamlit servers, Chromium) is read once a second with psutil; a process's CPU is
the last reading before it ended (up to a second of it is missed). Prints the run's wall and
CPU time, then the CPU by kind of process: how many ran, their CPU in all, its share, and the
median process's CPU (for the kinds that start, answer one request and end, that median is
mostly what starting one costs).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The kinds, by what a process's command line names (the first that matches).
KINDS = (
    ("XLA plan child", ("calc.workers.child plan",)),
    ("measurement child (TensorFlow)", ("calc.workers.child measure",)),
    ("other Keras child (build, upload)", ("calc.workers.child",)),
    ("cluster scheduler, worker or nanny", ("calc.cluster", "distributed", "multiprocessing")),
    ("Streamlit server", ("streamlit",)),
    ("Chromium", ("chrom",)),
    ("command line (python -m calc)", ("-m calc", "calc/__main__.py")),
    ("benchmark or tool script", ("benchmarks/", "tools/")),
    ("pytest worker (tests in-process: AppTest, ledgers, engine)", ("-c", "pytest", "xdist")),
)


def kind_of(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    for kind, needles in KINDS:
        if any(n in text for n in needles):
            return kind
    return "other: " + (os.path.basename(cmdline[0]) if cmdline else "?")


def watch(root: psutil.Process, every_s: float = 1.0) -> dict[tuple[int, float], tuple[list[str], float]]:
    """(pid, start time) -> (command line, CPU seconds) of every process under ``root`` until it ends."""
    seen: dict[tuple[int, float], tuple[list[str], float]] = {}
    while root.is_running() and root.status() != psutil.STATUS_ZOMBIE:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for proc in procs:
            try:
                with proc.oneshot():
                    key = (proc.pid, proc.create_time())
                    times = proc.cpu_times()
                    cmdline = seen[key][0] if key in seen else proc.cmdline()
                    seen[key] = (cmdline, times.user + times.system)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        time.sleep(every_s)
    return seen


def summary(seen: dict[tuple[int, float], tuple[list[str], float]]) -> list[str]:
    by: dict[str, list[float]] = collections.defaultdict(list)
    for cmdline, cpu in seen.values():
        by[kind_of(cmdline)].append(cpu)
    total = sum(sum(v) for v in by.values())
    lines = [f"{'kind of process':58s} {'count':>6s} {'CPU s':>8s} {'share':>6s} {'median s':>9s}"]
    for kind, cpus in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        cpus.sort()
        lines.append(f"{kind:58s} {len(cpus):6d} {sum(cpus):8.0f} {sum(cpus) / total:6.1%} {cpus[len(cpus) // 2]:9.1f}")
    lines.append(f"{'all read':58s} {sum(len(v) for v in by.values()):6d} {total:8.0f}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = p.parse_args()
    before, started = os.times(), time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", *args.pytest_args], cwd=ROOT)
    seen = watch(psutil.Process(proc.pid))
    code = proc.wait()
    after, wall = os.times(), time.monotonic() - started
    cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    print(f"pytest exit {code}; wall {wall:.0f} s; CPU of the processes waited for {cpu:.0f} s "
          f"({cpu / wall:.2f} cores busy on average)")
    print("\n".join(summary(seen)))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
