"""A cluster of machines for the dashboard's builds and compiles (docs/HOSTING.md).

    python -m calc.cluster scheduler [--host 0.0.0.0] [--port 8786]
    python -m calc.cluster worker tcp://SCHEDULER:8786 [--plans N] [--builds N]

The scheduler is Dask's, with this project's settings (``calc.cluster.engine.engine_config``); a
worker machine runs ``--plans`` compile workers (default: one per two cores) and ``--builds`` build
workers (default 1), each a process under a nanny with its memory limit (``CALC_COMPILE_GIB``,
twice ``CALC_BUILD_GIB``). Servers and commands use the cluster with
``CALC_DASK_SCHEDULER=tcp://SCHEDULER:8786``. Both run until stopped (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m calc.cluster", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("scheduler", help="run the cluster's scheduler")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    s.add_argument("--port", type=int, default=8786)
    w = sub.add_parser("worker", help="run this machine's workers for a scheduler")
    w.add_argument("address", help="the scheduler, tcp://HOST:PORT")
    w.add_argument("--plans", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="compile workers")
    w.add_argument("--builds", type=int, default=1, help="build workers")
    w.add_argument("--host", default=None, help="this machine's address as the scheduler reaches it")
    args = p.parse_args(argv)
    if args.role == "worker" and not (0 <= args.plans <= 64 and 0 <= args.builds <= 64 and args.plans + args.builds):
        p.error(f"--plans and --builds must be 0 to 64, not both 0. Received: --plans {args.plans} --builds {args.builds}")
    if args.role == "scheduler" and not 0 < args.port < 65536:
        p.error(f"--port must be 1 to 65535. Received: {args.port}")
    return args


async def _scheduler(host: str, port: int) -> None:
    from distributed import Scheduler

    async with Scheduler(host=host, port=port, dashboard=False, dashboard_address=None) as scheduler:
        print(f"scheduler at {scheduler.address}", flush=True)
        await _until_stopped()


async def _workers(address: str, plans: int, builds: int, host: str | None) -> None:
    from distributed import Nanny

    from calc.cluster.engine import worker_limits, worker_options
    from calc.cluster.worker import BUILD, PLAN

    limits = worker_limits()
    options = [worker_options(kind, limits[kind], host=host or "", quiet=False)
               for kind, count in ((PLAN, plans), (BUILD, builds)) for _ in range(count)]
    nannies = [Nanny(address, **{k: v for k, v in o.items() if v != ""}) for o in options]
    await asyncio.gather(*(n.start() for n in nannies))
    print(f"{plans} compile and {builds} build workers for {address}", flush=True)
    try:
        await _until_stopped()
    finally:
        await asyncio.gather(*(n.close() for n in nannies), return_exceptions=True)


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


def main(argv: list[str] | None = None) -> int:
    import dask

    from calc.cluster.engine import engine_config

    args = _parse(sys.argv[1:] if argv is None else argv)
    dask.config.set(engine_config())
    logging.getLogger("distributed").setLevel(logging.WARNING)
    if args.role == "scheduler":
        asyncio.run(_scheduler(args.host, args.port))
    else:
        asyncio.run(_workers(args.address, args.plans, args.builds, args.host))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
