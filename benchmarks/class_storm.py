"""A class opens thirty new configurations at once: first pages, XLA's numbers, and whether every plan finished.

    python benchmarks/class_storm.py                       # this host's own cluster (the one command's)
    python benchmarks/class_storm.py --cluster processes   # a scheduler and two workers, as docs/HOSTING.md starts them
    python benchmarks/class_storm.py --visitors 4 --solo 1 --timeout 300   # a small storm

Starts ``streamlit run app.py`` on 127.0.0.1 (a free port, an empty ``CALC_CACHE_DIR``, compiles on,
``CALC_TRUSTED_PROXY=127.0.0.1`` so that each tab's ``X-Forwarded-For`` is its own address, as behind the
documented proxy) and drives it over Streamlit's websocket protocol (``xla_visitors.Visitor``: a tab
that reruns its progress fragment every second, as a browser does). With ``--cluster processes`` the
server uses a cluster of separate processes on this host instead of its own: ``python -m calc.cluster
scheduler`` and two ``python -m calc.cluster worker`` (one with a compile and a build worker, one with a
compile worker), through ``CALC_DASK_SCHEDULER``.

1. Solo (``--solo`` N, 3): N visitors, one after another on the quiet server, each open a configuration
   nothing ships; the median of their seconds to XLA's number is the solo compile.
2. The storm: ``--visitors`` N (30) tabs, each from its own address, open N distinct configurations that
   nothing ships (new sizes, cards, optimizers, precisions, remat; two NASNetLarge ones, one at 300 px with
   Adam on an A100 and one at 312 px with SGD, from two addresses) at the same moment. Half of them (the
   odd ones, never a NASNetLarge) close once their first page is drawn; the others stay until XLA's number
   shows. ``--newcomer-after`` s (25) later a newcomer opens one more new configuration and stays.

Measured, from each tab's first rerun: its first page (``script_finished`` of that run), XLA's number (the
first metric labelled ``Planned peak (XLA``), and the first estimate the page gave ("done in about N s",
"about N s left") against when the number came: the estimate's ratio (actual / estimated, from the moment
it was shown). Reported: first page p50, p95 and max; time to XLA's number p50 and max of those who stayed;
plans finished; compiles stopped while a visitor still wanted them (the service's log says each one);
estimates within 1.5x; the cores the server process itself used during the storm; the process tree's largest
resident size. Prints one ``RESULT {json}`` line; exits 1 on an error (an exception or ``st.error`` on a page, a traceback in the server's log).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load_test import ROOT, _interrupted, free_port, start_server, wait_healthy  # noqa: E402
from xla_visitors import NETWORK_ERRORS, PLAN, Visitor, watch_memory  # noqa: E402

from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

# (model, size, batch, optimizer, precision, card, remat): thirty configurations no shipped plan covers.
CONFIGS = (
    ("NASNetLarge", 300, 8, "adam", "float32", "a100-40", ""),
    ("NASNetLarge", 312, 8, "sgd", "float32", "a100-40", ""),
    ("MobileNetV2", 136, 32, "sgd", "float32", "t4", ""),
    ("ResNet50", 152, 24, "adam", "float32", "l4", ""),
    ("EfficientNetB0", 168, 16, "adamw", "mixed_float16", "a10", ""),
    ("DenseNet121", 144, 16, "sgd", "float32", "rtx-4090", ""),
    ("MobileNetV3Small", 176, 64, "rmsprop", "float32", "t4", ""),
    ("ResNet50V2", 160, 32, "adam", "mixed_float16", "h100-80", ""),
    ("VGG16", 128, 16, "sgd", "float32", "l4", ""),
    ("InceptionV3", 171, 16, "adam", "float32", "a10", ""),
    ("Xception", 150, 8, "sgd", "float32", "t4", ""),
    ("ConvNeXtTiny", 160, 16, "adamw", "float32", "a100-40", ""),
    ("MobileNet", 192, 32, "adam", "mixed_float16", "rtx-4090", ""),
    ("EfficientNetV2B0", 176, 16, "sgd", "float32", "l4", ""),
    ("ResNet101", 128, 8, "adam", "float32", "t4", ""),
    ("MobileNetV3Large", 160, 32, "adam", "float32", "a10", "full"),
    ("MobileNetV2", 184, 48, "adam", "mixed_float16", "h100-80", ""),
    ("ResNet50", 176, 16, "sgd", "float32", "t4", "full"),
    ("EfficientNetB1", 200, 8, "adam", "float32", "l4", ""),
    ("DenseNet121", 176, 8, "adam", "mixed_float16", "a100-40", ""),
    ("VGG19", 112, 16, "adam", "float32", "rtx-4090", ""),
    ("ResNet152", 112, 8, "sgd", "float32", "a10", ""),
    ("MobileNetV2", 208, 16, "rmsprop", "float32", "l4", ""),
    ("EfficientNetB0", 192, 32, "sgd", "float32", "t4", ""),
    ("InceptionResNetV2", 150, 8, "adam", "float32", "h100-80", ""),
    ("NASNetMobile", 192, 16, "sgd", "float32", "t4", ""),
    ("ResNet101V2", 144, 8, "adam", "float32", "l4", ""),
    ("ConvNeXtTiny", 128, 32, "sgd", "mixed_float16", "rtx-4090", ""),
    ("MobileNetV3Small", 144, 128, "adam", "float32", "a100-40", ""),
    ("EfficientNetV2B0", 144, 32, "adam", "mixed_float16", "h100-80", ""),
)
NEWCOMER = ("MobileNetV2", 200, 24, "adam", "float32", "a10", "")
# --small: two visitors and a newcomer with the catalogue's quickest compiles (the test in CI), one visitor leaving.
SMALL = (("VGG16", 104, 16, "sgd", "float32", "t4", ""), ("MobileNet", 112, 32, "adam", "float32", "l4", ""))
SMALL_NEWCOMER = ("VGG16", 120, 24, "adam", "float32", "a10", "")
SOLO = (("MobileNetV2", 120, 16, "sgd", "float32", "t4", ""), ("ResNet50", 136, 16, "adam", "float32", "l4", ""),
        ("EfficientNetB0", 152, 16, "sgd", "float32", "a10", ""))
ESTIMATE = re.compile(r"(?:done in about|about) ([\d,]+) s(?: left)?")
STOPPED = "stopped a wanted task"  # the service's log line for each (calc.service.work)
SHUTDOWN_S = 30.0


def link(config: tuple) -> str:
    model, size, batch, optimizer, precision, gpu, remat = config
    query = f"model={model}&image_size={size}&batch_size={batch}&optimizer={optimizer}&precision={precision}&gpu={gpu}"
    return query + (f"&remat={remat}" if remat else "")


class Tab(Visitor):
    """A visitor that also notes the first estimate its page gives of when its first number comes."""

    def __init__(self, url: str, query: str, address: str):
        super().__init__(url, query)
        self.headers, self.expects_chart = {"X-Forwarded-For": address}, False
        self.estimate: tuple[float, float] | None = None  # (seconds since t0 it was shown, the estimate in s)

    def _receive(self, data: bytes) -> ForwardMsg | None:
        m = super()._receive(data)
        if self.estimate is None and m is not None and m.WhichOneof("type") == "delta" and \
                m.delta.WhichOneof("type") == "new_element" and m.delta.new_element.WhichOneof("type") == "markdown":
            body = m.delta.new_element.markdown.body
            found = ESTIMATE.search(body) if "XLA's plan at batch" in body else None
            if found and self.t0:
                self.estimate = (time.perf_counter() - self.t0, float(found.group(1).replace(",", "")))
        return m

    def figures(self) -> dict:
        out = super().figures()
        plan_s = out["plan_s"]
        if self.estimate is not None and plan_s is not None:
            shown, estimate = self.estimate
            out["estimate_s"], out["estimate_ratio"] = estimate, round((plan_s - shown) / max(estimate, 1.0), 2)
        return out


async def visit(tab: Tab, deadline: float, stay: bool) -> None:
    try:
        await tab.connect()
        await tab.open(deadline)
        if stay:
            await tab.until(lambda: tab.since(PLAN) is not None, deadline)
    except NETWORK_ERRORS as exc:
        tab.gone = True
        tab.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        await tab.close()


async def solo(url: str, n: int, timeout: float) -> list[float]:
    """Seconds to XLA's number of ``n`` visitors, one after another on the quiet server."""
    seconds = []
    for i, config in enumerate(SOLO[:n]):
        tab = Tab(url, link(config), f"10.1.0.{i + 1}")
        await visit(tab, time.monotonic() + timeout, stay=True)
        if tab.since(PLAN) is not None:
            seconds.append(tab.since(PLAN))
        print(f"  solo {link(config)}: {_s(tab.since(PLAN))}", flush=True)
    return seconds


async def storm(url: str, args) -> dict:
    configs = SMALL if args.small else CONFIGS[:args.visitors]
    tabs = [Tab(url, link(c), f"10.0.{i // 200}.{i % 200 + 1}") for i, c in enumerate(configs)]
    stays = [i % 2 == 0 or c[0] == "NASNetLarge" for i, c in enumerate(configs)]  # the odd ones leave
    deadline = time.monotonic() + args.timeout
    runs = [asyncio.create_task(visit(t, deadline, stay)) for t, stay in zip(tabs, stays)]
    await asyncio.sleep(args.newcomer_after)
    newcomer_config = SMALL_NEWCOMER if args.small else NEWCOMER
    newcomer = Tab(url, link(newcomer_config), "10.2.0.1")
    runs.append(asyncio.create_task(visit(newcomer, deadline, True)))
    await asyncio.gather(*runs)
    per = [{"link": link(c), "stayed": s, **t.figures()}
           for t, c, s in zip(tabs, configs, stays)]
    per.append({"link": link(newcomer_config), "stayed": True, "newcomer": True, **newcomer.figures()})
    return {"visitors": per}


def summarise(per: list[dict], solo_s: list[float], timeout: float) -> dict:
    renders = [p["first_render_s"] if p["first_render_s"] is not None else math.inf for p in per]
    stayed = [p for p in per if p["stayed"]]
    plans = [p["plan_s"] if p["plan_s"] is not None else math.inf for p in stayed]
    ratios = [p["estimate_ratio"] for p in stayed if "estimate_ratio" in p]
    within = [r for r in ratios if 1 / 1.5 <= r <= 1.5]
    solo_median = statistics.median(solo_s) if solo_s else None
    nasnet = [p for p in stayed if "NASNetLarge" in p["link"]]
    return {
        "first_page_p50_s": _r(statistics.median(renders)), "first_page_p95_s": _r(_quantile(renders, 0.95)),
        "first_page_max_s": _r(max(renders)),
        "xla_number_p50_s": _r(statistics.median(plans)), "xla_number_max_s": _r(max(plans)),
        "plans_finished": sum(1 for p in plans if math.isfinite(p)), "stayed": len(stayed),
        "nasnet_planned": sum(1 for p in nasnet if p["plan_s"] is not None), "nasnet": len(nasnet),
        "solo_median_s": _r(solo_median),
        "last_bound_s": _r(30 * solo_median * 1.3) if solo_median else None,
        "estimates": len(ratios), "estimates_within_1_5x": len(within),
        "estimate_ratio_median": _r(statistics.median(ratios)) if ratios else None,
        "estimate_ratio_min": _r(min(ratios)) if ratios else None, "estimate_ratio_max": _r(max(ratios)) if ratios else None,
    }


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def _r(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 2)


def _s(value: float | None) -> str:
    return f"{value:7.1f} s" if value is not None else "   none"


def start_cluster(workdir: str) -> tuple[str, list[subprocess.Popen]]:
    """A scheduler and two workers on this host, with the commands docs/HOSTING.md gives."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, CALC_CACHE_DIR=os.path.join(workdir, "profiles"))
    commands = [[sys.executable, "-m", "calc.cluster", "scheduler", "--port", str(port)],
                [sys.executable, "-m", "calc.cluster", "worker", address, "--plans", "1", "--builds", "1"],
                [sys.executable, "-m", "calc.cluster", "worker", address, "--plans", "1", "--builds", "0"]]
    procs = []
    for i, command in enumerate(commands):
        log = open(os.path.join(workdir, f"cluster-{i}.log"), "wb")
        procs.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
        time.sleep(3.0 if i == 0 else 0.0)  # the scheduler listens before the workers call it
    return address, procs


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(SHUTDOWN_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def run(url: str, server: subprocess.Popen, args) -> dict:
    print("solo visitors", flush=True)
    solo_s = await solo(url, args.solo, args.timeout)
    await asyncio.sleep(15)  # the solo visitors' searches lapse
    print(f"the storm: {args.visitors} visitors and a newcomer after {args.newcomer_after:.0f} s", flush=True)
    peaks: dict = {}
    done = asyncio.Event()
    watcher = asyncio.create_task(watch_memory(server.pid, peaks, done))
    cpu, started = server_cpu_s(server.pid), time.monotonic()
    out = await storm(url, args)
    server_cores = (server_cpu_s(server.pid) - cpu) / (time.monotonic() - started)
    done.set()
    await watcher
    out.update(solo_s=[_r(s) for s in solo_s], tree_peak_gib=round(peaks.get("tree", 0) / 2**30, 2),
               server_cores=round(server_cores, 2))
    return out


def server_cpu_s(pid: int) -> float:
    """The server process's own CPU seconds (its threads: the pages, the work service, its own cluster's
    scheduler; not its workers, which are processes of their own)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(result: dict, args) -> None:
    s = result["summary"]
    print(f"\nclass storm, {result['cluster']} cluster, {os.cpu_count()} CPUs: {args.visitors} visitors, half leaving "
          f"after their first page, a newcomer after {args.newcomer_after:.0f} s (timeout {args.timeout:.0f} s)")
    for p in result["visitors"]:
        estimate = f"estimate {p['estimate_s']:.0f} s, ratio {p['estimate_ratio']}" if "estimate_ratio" in p else ""
        print(f"  {p['link']:<100} {'stays' if p['stayed'] else 'leaves'}  page {_s(p['first_render_s'])}  "
              f"XLA {_s(p['plan_s'])}  {estimate}")
    print(f"first page: p50 {s['first_page_p50_s']} s, p95 {s['first_page_p95_s']} s, max {s['first_page_max_s']} s")
    print(f"XLA's number (those who stayed): p50 {s['xla_number_p50_s']} s, max {s['xla_number_max_s']} s; "
          f"{s['plans_finished']} of {s['stayed']} finished; NASNetLarge {s['nasnet_planned']} of {s['nasnet']}")
    print(f"solo compile median {s['solo_median_s']} s, so the bound for the last (30 x solo x 1.3): "
          f"{s['last_bound_s']} s")
    print(f"compiles stopped while wanted: {result['stopped_while_wanted']}")
    print(f"estimates within 1.5x: {s['estimates_within_1_5x']} of {s['estimates']} (actual / estimated: median "
          f"{s['estimate_ratio_median']}, {s['estimate_ratio_min']} to {s['estimate_ratio_max']})")
    print(f"the server process itself used {result.get('server_cores')} cores during the storm; process tree at "
          f"most {result['tree_peak_gib']} GiB; errors: {result['errors']}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", choices=("own", "processes"), default="own",
                   help="the server's own cluster, or a scheduler and two workers in processes of their own")
    p.add_argument("--visitors", type=int, default=30, choices=range(2, len(CONFIGS) + 1), metavar="N")
    p.add_argument("--solo", type=int, default=3, choices=range(0, len(SOLO) + 1), metavar="N")
    p.add_argument("--newcomer-after", type=float, default=25.0)
    p.add_argument("--timeout", type=float, default=2400.0, help="seconds the storm may take")
    p.add_argument("--small", action="store_true", help="two visitors with quick models (--visitors is ignored)")
    args = p.parse_args()
    if args.small:
        args.visitors = len(SMALL)
    if not 60 <= args.timeout <= 7200 or not 0 <= args.newcomer_after <= 600:
        p.error("--timeout must be 60..7200 s and --newcomer-after 0..600 s")
    return args


def main() -> int:
    args = parse_args()
    workdir = tempfile.mkdtemp(prefix="calc-class-storm-")
    os.environ.update(CALC_XLA_COMPILES="on", CALC_TRUSTED_PROXY="127.0.0.1")
    cluster: list[subprocess.Popen] = []
    server, errors, result = None, [], {"cluster": args.cluster, "visitors": []}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        if args.cluster == "processes":
            address, cluster = start_cluster(workdir)
            os.environ["CALC_DASK_SCHEDULER"] = address
        port = free_port()
        server = start_server(port, workdir)
        wait_healthy(server, port)
        url = f"ws://127.0.0.1:{port}/_stcore/stream"
        out = asyncio.run(asyncio.wait_for(run(url, server, args), args.timeout * 2 + 600))
        result.update(out)
    except (Exception, KeyboardInterrupt) as exc:  # reported; the processes are ended all the same
        errors.append(f"aborted: {type(exc).__name__}: {exc}")
    finally:
        for proc in [p for p in [server] if p is not None] + cluster:
            stop(proc)
        log = open(os.path.join(workdir, "server.log"), errors="replace").read()
        errors += [f"server log: Traceback{chunk[:2000]}" for chunk in log.split("Traceback")[1:]]
        result["stopped_while_wanted"] = log.count(STOPPED)
        shutil.rmtree(workdir, ignore_errors=True)
    errors += [e for p in result["visitors"] for e in p.get("errors", [])]
    result["summary"] = summarise(result["visitors"], result.get("solo_s", []), args.timeout) \
        if result["visitors"] else {}
    result["errors"] = len(errors)
    if result["visitors"]:
        report(result, args)
    for e in errors[:5]:
        print("  ERROR", e[:800])
    print("RESULT " + json.dumps(result), flush=True)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
