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

With ``--tests N`` it also loads itself into pytest as a plugin (``-p suite_cpu``): each test's
CPU is read at its start and end in its xdist worker (the worker, its live descendants and the
children it has waited for), and the N tests and the files that spent most are printed. A
process a fixture started (a Dask cluster, a Streamlit server) is charged to the tests that ran
while it worked.
"""

from __future__ import annotations

import argparse
import collections
import os
import json
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


def by_process(seen: dict[tuple[int, float], tuple[list[str], float]], top: int) -> list[str]:
    lines = [f"the {top} processes that spent most CPU:"]
    for cmdline, cpu in sorted(seen.values(), key=lambda v: -v[1])[:top]:
        lines.append(f"{cpu:8.1f} CPU s  {kind_of(cmdline)[:30]:30s} {' '.join(cmdline)[:150]}")
    return lines


def tree_cpu() -> float:
    """CPU of this process, its live descendants and the children it has waited for."""
    me = psutil.Process()
    total = 0.0
    for proc in (me, *me.children(recursive=True)):
        try:
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total


_STARTS: dict[str, tuple[float, float]] = {}
_CHARGE = {"on": False}


def pytest_configure(config):
    """Charges tests where they run: in an xdist worker, or in pytest itself without xdist."""
    in_worker = hasattr(config, "workerinput")
    _CHARGE["on"] = bool(os.environ.get("SUITE_CPU_TESTS")) and (in_worker or not config.getoption("numprocesses", 0))


def pytest_runtest_logstart(nodeid, location):
    if _CHARGE["on"]:
        _STARTS[nodeid] = (tree_cpu(), time.monotonic())


def pytest_runtest_logfinish(nodeid, location):
    start = _STARTS.pop(nodeid, None)
    if start is None:
        return
    cpu, wall = tree_cpu() - start[0], time.monotonic() - start[1]
    with open(os.environ["SUITE_CPU_TESTS"], "a") as f:
        f.write(json.dumps({"test": nodeid, "cpu": round(cpu, 2), "wall": round(wall, 2)}) + "\n")


def by_test(path: str, top: int) -> list[str]:
    rows = [json.loads(line) for line in open(path)]
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        f = files[r["test"].split("::")[0]]
        f[0] += r["cpu"]
        f[1] += r["wall"]
        f[2] += 1
    total = sum(r["cpu"] for r in rows)
    lines = [f"{len(rows)} tests, {total:.0f} CPU s charged to them; by file:",
             f"{'file':40s} {'tests':>6s} {'CPU s':>8s} {'wall s':>8s}"]
    for name, (cpu, wall, n) in sorted(files.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{name:40s} {n:6d} {cpu:8.0f} {wall:8.0f}")
    lines.append(f"the {top} tests that spent most CPU:")
    for r in sorted(rows, key=lambda r: -r["cpu"])[:top]:
        lines.append(f"{r['cpu']:8.1f} CPU s {r['wall']:8.1f} wall s  {r['test']}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tests", type=int, default=0, metavar="N", help="also print the N tests that spent most CPU")
    p.add_argument("--processes", type=int, default=0, metavar="N",
                   help="also print the N processes that spent most CPU, with their command lines")
    p.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = p.parse_args()
    env = dict(os.environ)
    extra: list[str] = []
    tests_file = os.path.join(ROOT, ".suite_cpu_tests.jsonl")
    if args.tests:
        if os.path.exists(tests_file):
            os.remove(tests_file)
        here = os.path.dirname(os.path.abspath(__file__))
        env.update(SUITE_CPU_TESTS=tests_file, PYTHONPATH=os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")])))
        extra = ["-p", "suite_cpu"]
    before, started = os.times(), time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", *extra, *args.pytest_args], cwd=ROOT, env=env)
    seen = watch(psutil.Process(proc.pid))
    code = proc.wait()
    after, wall = os.times(), time.monotonic() - started
    cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    print(f"pytest exit {code}; wall {wall:.0f} s; CPU of the processes waited for {cpu:.0f} s "
          f"({cpu / wall:.2f} cores busy on average)")
    print("\n".join(summary(seen)))
    if args.processes:
        print("\n".join(by_process(seen, args.processes)))
    if args.tests and os.path.exists(tests_file):
        print("\n".join(by_test(tests_file, args.tests)))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
