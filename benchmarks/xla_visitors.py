"""XLA's answer on the Estimator as visitors wait for it: seconds until the plan shows, against another checkout.

    python benchmarks/xla_visitors.py                                   # this checkout alone, every scenario
    python benchmarks/xla_visitors.py --only first-number,batch-change --timeout 300
    git worktree add /tmp/before cd4ef5a
    python benchmarks/xla_visitors.py --baseline-app /tmp/before        # and that checkout, in turn
    python benchmarks/xla_visitors.py --baseline-app /tmp/before --only visitors --visitors 30

Serves each checkout with ``streamlit run`` (a free port on 127.0.0.1, ``CALC_XLA_COMPILES=on``,
an empty ``CALC_CACHE_DIR`` of its own: a plan one server compiles never serves the other, the
plans each checkout ships do) and drives it over Streamlit's websocket protocol
(``load_test.Client``): a visitor sends the Estimator's link (the XLA step, the default) as its
first rerun, then, as an open browser tab does, reruns the progress fragment every second (the
server's ``auto_rerun``; that keeps its compiles wanted) and reads the page's own rerun when a
compile ends. Each server first renders one page on the graph-executor step, which compiles
nothing (its imports paid). The checkouts take turns, one scenario at a time (the first to go
alternates from one scenario to the next), each once both servers are quiet (under 0.3 cores,
workers included, for 3 s, none of their processes runnable; at most 240 s), so a compile left
over from one turn does not slow the next.

1. first-number: a visitor opens a configuration whose curve this checkout ships (``--shipped-link``,
   MobileNetV2 224 px, batch 32, Adam, T4); the report says whether the plan came in the first
   render (a curve not shipped yet is compiled).
2. batch-change: the same visitor, once the plan shows, changes the batch size (``--new-batch``, 48)
   in the sidebar, as a browser sends it.
3. new-config: a visitor opens a configuration nothing ships (``--new-link``, ResNet50 160 px, batch 24,
   SGD, L4); also the time until the largest batch is settled over compiled plans. A checkout that
   searches only on a click (the button keyed ``xla_max_batch``) gets the click once its first page
   is drawn, and the report says so.
4. visitors: ``--visitors`` N (6; at most 30) visitors open N distinct configurations at once
   (MobileNetV2 from 96 px up in steps of 16, its native 224 skipped, batch 32, SGD, T4), each tab
   left open until every one has its plan or the deadline passes.
5. flood: a newcomer opens a new configuration on the quiet server (MobileNetV2 200 px); 15 s later
   ``--flood`` N (15) tabs open links that each need compiles (ResNet50 at sizes nothing ships, batches
   100 up) and close once their first page is drawn; then a newcomer opens another new configuration
   (MobileNetV2 216 px, a compile as long). Reported: both newcomers' plans and their ratio, and the
   cores the server's process tree uses 15 s after everyone left (a compile nobody waits for runs
   near one core).
6. hostile: the floods of a hostile visitor at once, each tab from its own address (an
   ``X-Forwarded-For`` the server trusts from loopback with ``CALC_TRUSTED_PROXY=127.0.0.1``, as behind the documented proxy): a newcomer
   opens a new configuration on the quiet server (as in flood); then a tab opens the link that once
   held the only worker for 16 minutes (``HEAVY_LINK``: NASNetLarge at 8192 px, full remat, on a
   B200) and stays; once its page is drawn and its compile has run 10 s, 8 tabs ask VGG16 at 540-547
   px (builds past the builder's budget), 3 tabs open Compare with 6 models at new sizes (18 builds),
   3 tabs stay until their own plan shows and then close (their searches were asked), and
   ``--flood`` N short visits come and go; then a newcomer opens another new configuration.
   Reported: the newcomer's first render and plan against the quiet server's (ratios), the largest
   resident size of the server's process tree and of its children alone (against
   ``CALC_CHILDREN_GIB``, default three quarters of the host), and 15 s after everyone left the cores
   in use and the children still running.

Measured, in seconds from sending the rerun: the first run's ``script_finished`` (the first render)
and the first metric labelled ``Planned peak (XLA...`` on a page whose link shows what was sent (a
plan compiled, shipped, or drawn between compiled plans: the label shown is reported); for new-config
also the label
``Largest batch that fits (XLA plans, compiled)``. ``--timeout`` (900 s) bounds each scenario; what
has not shown by then is reported as not shown. Per visitor, then the median and max (a visitor
without a plan counts as past the deadline); ratios this checkout / baseline. Errors: exceptions and
``st.error`` alerts on the page, a run not finished successfully, a closed websocket, a traceback in a
server's log. Prints a report and one ``RESULT {json}`` line; exits 1 on any error. Loopback only;
the servers are ended and their folders removed at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load_test import FIRST_QUERY, ROOT, Client, _interrupted, free_port, start_server, wait_healthy  # noqa: E402

from calc.catalogue import CATALOGUE  # noqa: E402

PLAN, SETTLED = "Planned peak (XLA", "Largest batch that fits (XLA plans, compiled)"
SEARCH_BUTTON = "xla_max_batch"  # the older Estimator's "Find the largest batch with compiles"
SHIPPED_LINK = "model=MobileNetV2&image_size=224&batch_size=32&optimizer=adam&precision=float32&gpu=t4"
NEW_LINK = "model=ResNet50&image_size=160&batch_size=24&optimizer=sgd&precision=float32&gpu=l4"
VISITOR_MODEL, MAX_VISITORS = "MobileNetV2", 30
SCENARIOS = ("first-number", "batch-change", "new-config", "visitors", "flood", "hostile")
GROUPS = (("first-number", "batch-change"), ("new-config",), ("visitors",), ("flood",), ("hostile",))
# flood: the newcomer's link on the quiet server, and (another size, a compile as long) after the flood.
NEWCOMER_IDLE = "model=MobileNetV2&image_size=200&batch_size=32&optimizer=sgd&precision=float32&gpu=t4"
NEWCOMER_FLOODED = "model=MobileNetV2&image_size=216&batch_size=32&optimizer=sgd&precision=float32&gpu=t4"
HEAVY_LINK = "model=NASNetLarge&image_size=8192&batch_size=1&optimizer=adam&precision=float32&gpu=b200&remat=full"
HEAVY_HEAD_START_S = 10.0  # the heavy link's compile runs this long before the floods come
COMPARED = "ResNet50,MobileNetV2,VGG16,DenseNet121,EfficientNetB0,InceptionV3"
LEFT_S = 15.0  # after everyone left: a closed tab's wants lapse in 12 s, a running compile is stopped then
POLL_S = 1.0  # a reading visitor looks at its goal this often even when the server says nothing
QUIET_CORES, QUIET_WINDOW_S, QUIET_LIMIT_S = 0.3, 3.0, 240.0
WARM_RERUN_S, SHUTDOWN_S = 180.0, 30.0
NETWORK_ERRORS = (OSError, TimeoutError, websockets.ConnectionClosed)


class Visitor(Client):
    """A tab that notes, from ``open`` on, when each metric label first shows on a page whose link holds ``expect``
    (a run begun before a change was sent still shows the old batch's plan).

    It reruns ``st.fragment(run_every=...)`` fragments as the browser does: the server only says
    ``auto_rerun`` (a fragment's id and interval), and the tab asks for the fragment's rerun at that
    interval until the next full run (which draws the fragment anew) or ``stop_auto_rerun``. Without
    those reruns the progress fragment never runs, and the Estimator's compiles lapse unasked.
    """

    def __init__(self, url: str, query: str):
        super().__init__(url, query)
        self.t0, self.seen = 0.0, {}  # seen: label -> seconds since t0
        self.expect: dict[str, str] = {}  # query key -> the value a page must show for its metrics to count
        self.buttons: dict[str, str] = {}  # user key -> widget id of each button drawn
        self.timers: dict[str, tuple[float, asyncio.Task]] = {}  # fragment id -> (interval, its rerun loop)
        self.render_s: float | None = None
        self.clicked, self.gone, self.errors = False, False, []

    def _receive(self, data: bytes):
        m = super()._receive(data)
        kind = m.WhichOneof("type") if m is not None else None
        if kind in ("new_session", "script_finished") and m.metadata.run.fragment_ids:
            return ForwardMsg()  # a fragment's run: ``rerun`` waits for the full run it asked for, not this one
        if kind == "new_session":  # a full run draws its fragments anew
            self._stop_timers(list(self.timers))
        elif kind == "page_info_changed":  # the page's link, also in the runs the server starts itself
            self.query = m.page_info_changed.query_string
        elif kind == "auto_rerun" and self.timers.get(m.auto_rerun.fragment_id, (None,))[0] != m.auto_rerun.interval:
            self._stop_timers([m.auto_rerun.fragment_id])
            task = asyncio.create_task(self._auto_rerun(m.auto_rerun.fragment_id, m.auto_rerun.interval))
            self.timers[m.auto_rerun.fragment_id] = (m.auto_rerun.interval, task)
        elif kind == "stop_auto_rerun":
            self._stop_timers(m.stop_auto_rerun.fragment_ids)
        elif kind == "delta" and m.delta.WhichOneof("type") == "new_element":
            el = m.delta.new_element
            if el.WhichOneof("type") == "metric" and all(self.query_value(k) == v for k, v in self.expect.items()):
                self.seen.setdefault(el.metric.label, time.perf_counter() - self.t0)
            elif el.WhichOneof("type") == "button":
                self.buttons[el.button.id.split("-", 2)[2]] = el.button.id
        return m

    def _stop_timers(self, fragment_ids) -> None:
        for fragment_id in fragment_ids:
            if fragment_id in self.timers:
                self.timers.pop(fragment_id)[1].cancel()

    async def _auto_rerun(self, fragment_id: str, interval: float) -> None:
        """The fragment's rerun every ``interval`` s, with the widgets' states, as the browser's timer sends it."""
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                await asyncio.sleep(interval)
                msg = BackMsg()
                cs = msg.rerun_script
                cs.query_string, cs.page_script_hash = self.query, self.page_hash
                cs.widget_states.widgets.extend(self.states.values())
                cs.fragment_id, cs.is_auto_rerun = fragment_id, True
                await self.ws.send(msg.SerializeToString())

    def first(self, prefix: str) -> tuple[float | None, str | None]:
        """Seconds to the first label that starts with ``prefix``, and that label."""
        return min(((s, label) for label, s in self.seen.items() if label.startswith(prefix)), default=(None, None))

    def since(self, prefix: str) -> float | None:
        return self.first(prefix)[0]

    async def open(self, deadline: float) -> None:
        """Sends the page's rerun (the link, or the sidebar as set) and reads its first run."""
        self.t0, self.seen = time.perf_counter(), {}
        r = await self.rerun(deadline - time.monotonic())
        self.render_s, self.errors = r["finished_ms"] / 1e3, self.errors + r["errors"]

    async def click(self, key: str, deadline: float) -> None:
        """Presses a button as a browser does: its trigger, sent once (``rerun`` forgets it after the run)."""
        self.states[key] = WidgetState(id=self.buttons[key], trigger_value=True)
        self.errors += (await self.rerun(deadline - time.monotonic()))["errors"]
        self.clicked = True

    async def until(self, done: Callable[[], bool], deadline: float) -> bool:
        """Reads what the server sends by itself until ``done()`` or the deadline."""
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):  # cancelling a recv is safe: nothing is lost
                self._receive(await asyncio.wait_for(self.ws.recv(), min(left, POLL_S)))
        return True

    def figures(self) -> dict:
        plan_s, plan_label = self.first(PLAN)
        out = {"first_render_s": _round(self.render_s), "plan_s": _round(plan_s), "plan_label": plan_label,
               "in_first_render": None not in (plan_s, self.render_s) and plan_s <= self.render_s,
               "errors": self.errors}
        if self.since(SETTLED) is not None or self.clicked:
            out.update(largest_settled_s=_round(self.since(SETTLED)), clicked=self.clicked)
        return out

    async def close(self) -> None:
        self._stop_timers(list(self.timers))
        if self.ws is not None:
            await self.ws.close()


def _round(s: float | None) -> float | None:
    return None if s is None else round(s, 2)


def link(query: str) -> str:
    return query.lstrip("/?")


async def visit(c: Visitor, deadline: float, done: Callable[[], bool]) -> None:
    """Opens the visitor's page and reads on until ``done()``; a broken connection is one of its errors."""
    try:
        if c.ws is None:
            await c.connect()
        await c.open(deadline)
        await c.until(done, deadline)
    except NETWORK_ERRORS as exc:
        c.gone = True
        c.errors.append(f"{type(exc).__name__}: {exc}")


async def first_and_batch(url: str, args, group: tuple[str, ...]) -> dict:
    """first-number, then batch-change in the same tab once the plan shows (untimed if first-number is not asked)."""
    c, out = Visitor(url, link(args.shipped_link)), {}
    try:
        await visit(c, time.monotonic() + args.timeout, lambda: c.since(PLAN) is not None)
        if "first-number" in group:
            out["first-number"] = c.figures()
            c.errors = []  # batch-change's own from here (the first page's too when first-number is not asked)
        if "batch-change" in group and c.since(PLAN) is not None:
            c.set("batch_size", args.new_batch)
            c.expect = {"batch_size": str(args.new_batch)}
            await visit(c, time.monotonic() + args.timeout, lambda: c.since(PLAN) is not None)
            if c.query_value("batch_size") != str(args.new_batch):
                c.errors.append(f"batch_size={args.new_batch} sent, the server shows {c.query_value('batch_size')}")
            out["batch-change"] = c.figures()
        elif "batch-change" in group:
            out["batch-change"] = {"errors": ["not run: the first plan did not show before the deadline"]}
    finally:
        await c.close()
    return out


async def new_config(url: str, args, group: tuple[str, ...]) -> dict:
    c, deadline = Visitor(url, link(args.new_link)), time.monotonic() + args.timeout
    try:
        await visit(c, deadline, lambda: True)  # the first render, then the button if this checkout has one
        if SEARCH_BUTTON in c.buttons:
            with contextlib.suppress(*NETWORK_ERRORS):
                await c.click(SEARCH_BUTTON, deadline)
        with contextlib.suppress(*NETWORK_ERRORS):
            await c.until(lambda: c.since(PLAN) is not None and c.since(SETTLED) is not None, deadline)
        figures = c.figures()
        figures.setdefault("largest_settled_s", None)
        return {"new-config": figures}
    finally:
        await c.close()


def visitor_links(n: int) -> list[str]:
    """n configurations of one model that nothing ships: sizes from 96 px up, the native one skipped."""
    native = CATALOGUE[VISITOR_MODEL].default_size
    sizes = [s for s in range(96, 96 + 16 * (n + 1), 16) if s != native][:n]
    return [f"model={VISITOR_MODEL}&image_size={s}&batch_size=32&optimizer=sgd&precision=float32&gpu=t4"
            for s in sizes]


async def visitors(url: str, args, group: tuple[str, ...]) -> dict:
    """N tabs opened at once; each stays open (and reads) until every one has its plan or the deadline."""
    links = visitor_links(args.visitors)
    tabs = [Visitor(url, q) for q in links]
    deadline = time.monotonic() + args.timeout

    def everyone() -> bool:
        return all(t.gone or t.since(PLAN) is not None for t in tabs)

    try:
        await asyncio.gather(*(visit(t, deadline, everyone) for t in tabs))
        per = [{"link": q, **t.figures()} for q, t in zip(links, tabs)]
    finally:
        await asyncio.gather(*(t.close() for t in tabs), return_exceptions=True)
    plans = [math.inf if p["plan_s"] is None else p["plan_s"] for p in per]
    renders = [math.inf if p["first_render_s"] is None else p["first_render_s"] for p in per]
    return {"visitors": {"visitors": per, "without_plan": sum(map(math.isinf, plans)),
                         "plan_median_s": _finite(statistics.median(plans)), "plan_max_s": _finite(max(plans)),
                         "render_median_s": _finite(statistics.median(renders)),
                         "render_max_s": _finite(max(renders)),
                         "errors": [e for p in per for e in p["errors"]]}}


def flood_links(n: int) -> list[str]:
    """n short visits that each ask for compiles (ResNet50 at sizes nothing ships, batches 100 up), as a
    script or a class clicking through links would: each tab closes once its first page is drawn."""
    return [f"model=ResNet50&image_size={160 + 16 * (i % 4)}&batch_size={100 + i}&optimizer=adam"
            f"&precision=float32&gpu=t4" for i in range(n)]


async def cores_used(pid: int, window_s: float = 3.0) -> float:
    """Cores the server and its children used over ``window_s`` (a compile runs near one)."""
    cpu0, _ = sample([pid])
    await asyncio.sleep(window_s)
    cpu1, runnable = sample([pid])
    return round((cpu1 - cpu0) / window_s, 2)


async def newcomer(url: str, query: str, deadline: float) -> dict:
    c = Visitor(url, link(query))
    try:
        await visit(c, deadline, lambda: c.since(PLAN) is not None)
        return c.figures()
    finally:
        await c.close()


async def flood(url: str, args, group: tuple[str, ...]) -> dict:
    """A newcomer's first plan on the quiet server, then right after ``--flood`` short visits that each
    asked for compiles and left; then, once everyone has left, the cores the server's tree still uses."""
    idle = await newcomer(url, NEWCOMER_IDLE, time.monotonic() + args.timeout)
    await asyncio.sleep(LEFT_S)  # the newcomer's own searches lapse
    tabs = [Visitor(url, q) for q in flood_links(args.flood)]
    deadline = time.monotonic() + args.timeout
    try:
        await asyncio.gather(*(visit(t, deadline, lambda: True) for t in tabs))  # each first page, then gone
    finally:
        await asyncio.gather(*(t.close() for t in tabs), return_exceptions=True)
    flooded = await newcomer(url, NEWCOMER_FLOODED, deadline)
    await asyncio.sleep(LEFT_S)
    cores = await cores_used(args.server_pid)
    errors = idle["errors"] + flooded["errors"] + [e for t in tabs for e in t.errors]
    over = round(flooded["plan_s"] / idle["plan_s"], 2) if flooded["plan_s"] and idle["plan_s"] else None
    return {"flood": {"visits": args.flood, "idle_plan_s": idle["plan_s"], "plan_s": flooded["plan_s"], "over_idle": over,
                      "first_render_s": flooded["first_render_s"], "cores_after_left": cores, "errors": errors}}


def hostile_tabs(url: str, n: int) -> dict[str, list[Visitor]]:
    """The hostile floods' tabs, each from its own address: builds past the budget, Compare at new sizes,
    tabs that stay for their plan (their searches asked) and then close, and ``n`` short visits."""
    def tab(query: str, address: str, page: str = "", chart: bool = True) -> Visitor:
        t = Visitor(url, query)
        t.headers, t.page_name, t.expects_chart = {"X-Forwarded-For": address}, page, chart
        return t

    return {
        "builds": [tab(f"model=VGG16&image_size={540 + i}&batch_size=32&optimizer=adam&precision=float32&gpu=t4",
                       f"10.0.2.{i}", chart=False) for i in range(8)],  # refused: no chart
        "compare": [tab(f"models={COMPARED}&image_size={250 + 16 * i}&batch_size=32&optimizer=adam&precision=float32"
                        "&gpu=t4", f"10.0.3.{i}", "compare", chart=False) for i in range(3)],
        "searches": [tab(f"model=MobileNetV2&image_size={144 + 16 * i}&batch_size=32&optimizer=adam"
                         "&precision=float32&gpu=t4", f"10.0.4.{i}") for i in range(3)],
        "short": [tab(q, f"10.0.5.{i}") for i, q in enumerate(flood_links(n))],
    }


def tree(pid: int) -> list[int]:
    """The process and its live descendants."""
    out, pids = [], [pid]
    while pids:
        p = pids.pop()
        out.append(p)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                pids += [int(c) for c in open(f"/proc/{p}/task/{task}/children").read().split()]
    return out


def resident(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(open(f"/proc/{pid}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return 0


async def watch_memory(pid: int, peaks: dict, stop: asyncio.Event) -> None:
    """The largest resident size of the server's tree, and of its children alone, every half second."""
    while not stop.is_set():
        sizes = [resident(p) for p in tree(pid)]
        peaks["tree"] = max(peaks.get("tree", 0), sum(sizes))
        peaks["children"] = max(peaks.get("children", 0), sum(sizes[1:]))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


def process_stat(pid: int) -> list[str]:
    """A process's /proc stat fields after its name (state first); [] once it has ended."""
    with contextlib.suppress(OSError, IndexError):
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return []


def running_children(pid: int) -> int:
    """The server's descendants that are running or waiting on the disk now."""
    return sum(process_stat(p)[:1] in (["R"], ["D"]) for p in tree(pid)[1:])


async def hostile(url: str, args, group: tuple[str, ...]) -> dict:
    """The newcomer on the quiet server, then again amid every hostile flood at once (``hostile_tabs``)."""
    idle = await newcomer(url, NEWCOMER_IDLE, time.monotonic() + args.timeout)
    await asyncio.sleep(LEFT_S)
    peaks: dict = {}
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch_memory(args.server_pid, peaks, stop))
    deadline = time.monotonic() + args.timeout
    heavy = Visitor(url, link(HEAVY_LINK))
    heavy.headers = {"X-Forwarded-For": "10.0.1.1"}
    left = asyncio.Event()
    tabs = hostile_tabs(url, args.flood)
    try:
        with contextlib.suppress(*NETWORK_ERRORS):
            await heavy.connect()
            await heavy.open(deadline)
        staying = asyncio.create_task(visit(heavy, deadline, left.is_set)) if heavy.ws is not None else None
        await asyncio.sleep(HEAVY_HEAD_START_S)
        brief = tabs["builds"] + tabs["compare"] + tabs["short"]
        waits = [visit(t, deadline, lambda: True) for t in brief]
        waits += [visit(t, deadline, lambda t=t: t.since(PLAN) is not None) for t in tabs["searches"]]
        flooding = asyncio.gather(*waits)
        await asyncio.sleep(2.0)  # the floods' first runs are under way
        flooded = await newcomer(url, NEWCOMER_FLOODED, deadline)
        left.set()
        await flooding
        if staying is not None:
            await staying
    finally:
        left.set()
        await asyncio.gather(heavy.close(), *(t.close() for ts in tabs.values() for t in ts), return_exceptions=True)
    await asyncio.sleep(LEFT_S)
    cores, running = await cores_used(args.server_pid), running_children(args.server_pid)
    stop.set()
    await watcher
    refused = [e for t in tabs["builds"] for e in t.errors if "not started" in e]
    failed = [e for t in tabs["builds"] for e in t.errors if "memory budget" in e and e not in refused]
    errors = idle["errors"] + flooded["errors"] + heavy.errors + [
        e for ts in tabs.values() for t in ts for e in t.errors if e not in refused and e not in failed]
    over = {k: round(flooded[k] / idle[k], 2) if flooded[k] and idle[k] else None
            for k in ("plan_s", "first_render_s")}
    return {"hostile": {"visits": args.flood, "idle_plan_s": idle["plan_s"], "plan_s": flooded["plan_s"],
                        "over_idle": over["plan_s"], "idle_first_render_s": idle["first_render_s"],
                        "first_render_s": flooded["first_render_s"], "render_over_idle": over["first_render_s"],
                        "builds_refused": len(refused), "builds_failed": len(failed), "searches_planned": sum(
                            t.since(PLAN) is not None for t in tabs["searches"]),
                        "tree_peak_gib": round(peaks.get("tree", 0) / 2**30, 2),
                        "children_peak_gib": round(peaks.get("children", 0) / 2**30, 2),
                        "cores_after_left": cores, "running_after_left": running, "errors": errors}}


def _finite(s: float) -> float | None:
    return None if math.isinf(s) else round(s, 2)


RUNNERS = {("first-number", "batch-change"): first_and_batch, ("new-config",): new_config,
           ("visitors",): visitors, ("flood",): flood, ("hostile",): hostile}


def sample(roots: list[int]) -> tuple[float, bool]:
    """CPU seconds of the servers and their live descendants (the build and compile workers), and whether
    one of them is runnable now: a compile starved of CPU by other jobs on the host uses little, but is."""
    cpu, runnable = 0.0, False
    for stat in (process_stat(p) for root in roots for p in tree(root)):
        if len(stat) > 12:  # state, ..., utime, stime
            cpu += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
            runnable = runnable or stat[0] == "R"
    return cpu, runnable


async def quiet(pids: list[int]) -> float:
    """Waits until the servers use under QUIET_CORES together and none of their processes is runnable at
    either end of a window (a compile left from a turn has ended or lapsed); the seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < QUIET_LIMIT_S:
        cpu0, runnable0 = sample(pids)
        await asyncio.sleep(QUIET_WINDOW_S)
        cpu1, runnable1 = sample(pids)
        if cpu1 - cpu0 < QUIET_CORES * QUIET_WINDOW_S and not (runnable0 or runnable1):
            break
    return round(time.monotonic() - t0, 1)


async def warm(url: str) -> list[str]:
    """One page on the graph-executor step: the server's imports and a shipped profile, no compile."""
    c = Client(url, f"{FIRST_QUERY}&step=graph")
    await c.connect()
    try:
        return (await c.rerun(WARM_RERUN_S))["errors"]
    finally:
        await c.ws.close()


async def run(servers: dict[str, tuple[subprocess.Popen, int]], args, result: dict, errors: list[str]) -> None:
    urls = {name: f"ws://127.0.0.1:{port}/_stcore/stream" for name, (_, port) in servers.items()}
    for name, url in urls.items():
        errors += [f"{name} warm-up: {e}" for e in await warm(url)]
    pids = [proc.pid for proc, _ in servers.values()]
    groups = [g for g in GROUPS if set(g) & args.only]
    for k, group in enumerate(groups):
        names = list(urls)[k % len(urls):] + list(urls)[:k % len(urls)]  # who goes first alternates
        asked = tuple(s for s in group if s in args.only)
        for name in names:
            waited = await quiet(pids)
            print(f"  {name}: {', '.join(asked)} (after {waited} s for quiet)", flush=True)
            args.server_pid = servers[name][0].pid
            out = await RUNNERS[group](urls[name], args, asked)
            for scenario, figures in out.items():
                result["scenarios"].setdefault(scenario, {})[name] = figures
                errors += [f"{name} {scenario}: {e}" for e in figures.get("errors", [])]


RATIO_KEYS = ("first_render_s", "plan_s", "largest_settled_s", "plan_median_s", "plan_max_s", "render_median_s",
              "render_max_s")


def ratios(scenarios: dict) -> dict:
    """this checkout / baseline, for every figure both have."""
    out = {}
    for scenario, by in scenarios.items():
        new, old = by.get("this checkout", {}), by.get("baseline", {})
        pairs = {k: (new.get(k), old.get(k)) for k in RATIO_KEYS}
        out[scenario] = {k: round(a / b, 3) for k, (a, b) in pairs.items() if a is not None and b}
    return out


def seconds(s: float | None, timeout: float) -> str:
    return f"{s:7.2f} s" if s is not None else f"  > {timeout:.0f} s (not shown)"


def figure_lines(scenario: str, name: str, f: dict, timeout: float) -> list[str]:
    """One checkout's figures in a scenario, as printed."""
    def sec(key: str) -> str:
        return seconds(f[key], timeout)

    if scenario == "visitors":
        return ([f"  {name:<14} plan median {sec('plan_median_s')}, max {sec('plan_max_s')} ({f['without_plan']} "
                 f"without a plan); first render median {sec('render_median_s')}, max {sec('render_max_s')}"]
                + [f"      {v['link']:<90} render {seconds(v['first_render_s'], timeout)}  "
                   f"plan {seconds(v['plan_s'], timeout)}" for v in f["visitors"]])
    if scenario == "flood":
        return [f"  {name:<14} newcomer's plan {sec('idle_plan_s')} on the quiet server, {sec('plan_s')} right after "
                f"{f['visits']} short visits ({f['over_idle']}x; first render {sec('first_render_s')}); "
                f"{f['cores_after_left']} cores "
                f"in use {LEFT_S:.0f} s after everyone left"]
    if scenario == "hostile":
        return [f"  {name:<14} newcomer's plan {sec('idle_plan_s')} on the quiet server, {sec('plan_s')} amid the "
                f"floods ({f['over_idle']}x); first render {sec('idle_first_render_s')} and "
                f"{sec('first_render_s')} ({f['render_over_idle']}x); of 8 oversized builds {f['builds_refused']} refused "
                f"before starting, {f['builds_failed']} stopped at the budget; {f['searches_planned']} of 3 staying tabs planned; process tree at most "
                f"{f['tree_peak_gib']} GiB (children {f['children_peak_gib']} GiB); {LEFT_S:.0f} s after everyone "
                f"left {f['cores_after_left']} cores in use, {f['running_after_left']} children running"]
    if "plan_s" not in f:
        return [f"  {name:<14} not run"]
    shown = (f["plan_label"] or "no plan shown") + (", in the first render" if f["in_first_render"] else "")
    line = f"  {name:<14} first render {sec('first_render_s')}  plan {sec('plan_s')} ({shown})"
    if scenario == "new-config":
        how = " (after a click on the search button)" if f.get("clicked") else ""
        line += f"; largest batch settled {sec('largest_settled_s')}{how}"
    return [line]


def report(args, result: dict, errors: list[str]) -> None:
    links = {"first-number": args.shipped_link, "batch-change": f"the same, batch_size={args.new_batch}",
             "new-config": args.new_link, "visitors": f"{args.visitors} x {visitor_links(1)[0]} (size varied)",
             "flood": f"{args.flood} x {flood_links(1)[0]} (size and batch varied), newcomer {NEWCOMER_FLOODED}",
             "hostile": f"{HEAVY_LINK} staying, VGG16 540-547 px, Compare {COMPARED} at new sizes, 3 tabs until "
                        f"their plan, {args.flood} short visits; newcomer {NEWCOMER_FLOODED}"}
    print(f"\nXLA's answer on the Estimator, seconds from the rerun sent ({os.cpu_count()} CPUs; "
          f"timeout {args.timeout:.0f} s a scenario)")
    for scenario, by in result["scenarios"].items():
        print(f"{scenario}: {link(links[scenario])}")
        for name, f in by.items():
            print("\n".join(figure_lines(scenario, name, f, args.timeout)))
        if ratio := result["ratios"].get(scenario):
            print("  this checkout / baseline: " + ", ".join(f"{k} {v}x" for k, v in ratio.items()))
    for e in errors[:5]:
        print("  ERROR", e[:800])


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(SHUTDOWN_S)
    except subprocess.TimeoutExpired:  # a compile in flight can hold it past SIGTERM
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline-app", metavar="DIR", help="also another checkout (git worktree add DIR COMMIT)")
    p.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    p.add_argument("--visitors", type=int, default=6, choices=range(1, MAX_VISITORS + 1), metavar="N")
    p.add_argument("--flood", type=int, default=15, choices=range(1, 101), metavar="N",
                   help="flood's short visits (1 to 100)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds a scenario may take, per checkout")
    p.add_argument("--shipped-link", default=SHIPPED_LINK, help="first-number's query: a curve this checkout ships")
    p.add_argument("--new-link", default=NEW_LINK, help="new-config's query: a configuration nothing ships")
    p.add_argument("--new-batch", type=int, default=48, help="batch-change's new batch size")
    args = p.parse_args()
    args.only = set(args.only.split(","))
    if not args.only <= set(SCENARIOS):
        p.error(f"--only takes {', '.join(SCENARIOS)}. Received: {', '.join(sorted(args.only - set(SCENARIOS)))}")
    if not 10 <= args.timeout <= 3600 or not 1 <= args.new_batch <= 4096:
        p.error("--timeout must be 10..3600 s and --new-batch 1..4096")
    if args.baseline_app and not os.path.isfile(os.path.join(args.baseline_app, "app.py")):
        p.error(f"--baseline-app: no app.py in {args.baseline_app}")
    return args


def main() -> int:
    args = parse_args()
    roots = {"this checkout": ROOT, **({"baseline": os.path.abspath(args.baseline_app)} if args.baseline_app else {})}
    # The servers inherit both: compiles on, and each tab's X-Forwarded-For believed from loopback, as from the proxy.
    os.environ.update(CALC_XLA_COMPILES="on", CALC_TRUSTED_PROXY="127.0.0.1")
    workdir, servers, errors = tempfile.mkdtemp(prefix="calc-xla-visitors-"), {}, []
    result: dict = {"checkouts": roots, "timeout_s": args.timeout, "scenarios": {}, "cpu_count": os.cpu_count()}
    turns = sum(1 for g in GROUPS if set(g) & args.only) * len(roots)
    wall_limit = turns * (2 * args.timeout + QUIET_LIMIT_S) + len(roots) * WARM_RERUN_S
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        for i, (name, root) in enumerate(roots.items()):
            own = os.path.join(workdir, str(i))  # its own CALC_CACHE_DIR (own/profiles) and log
            os.makedirs(own)
            port = free_port()
            servers[name] = (start_server(port, own, root=root), port)
        for proc, port in servers.values():
            wait_healthy(proc, port)
        print(f"servers healthy: {', '.join(f'{n} on 127.0.0.1:{p}' for n, (_, p) in servers.items())}", flush=True)
        asyncio.run(asyncio.wait_for(run(servers, args, result, errors), wall_limit))
    except (Exception, KeyboardInterrupt) as exc:  # reported; the servers are ended all the same
        errors.append(f"aborted: {type(exc).__name__}: {exc}")
    finally:
        for proc, _ in servers.values():
            stop(proc)
        for i, name in enumerate(servers):
            log = open(os.path.join(workdir, str(i), "server.log"), errors="replace").read()
            errors += [f"{name} server log: Traceback{chunk[:2000]}" for chunk in log.split("Traceback")[1:]]
        shutil.rmtree(workdir, ignore_errors=True)
    result.update(ratios=ratios(result["scenarios"]), errors=len(errors), error_samples=errors[:5])
    report(args, result, errors)
    print("RESULT " + json.dumps(result), flush=True)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
