"""First visit to the dashboard in a real browser: time to the first chart, and bytes sent.

    python benchmarks/first_load.py                          # direct and nginx, loopback and 20 Mbit/s, 5 visits
    python benchmarks/first_load.py --visits 3 --only direct
    git worktree add /tmp/before COMMIT                  # another version of the app, in the same run:
    python benchmarks/first_load.py --baseline-app /tmp/before
    git show 3ef7b93:docs/hosting/nginx.conf > /tmp/old-nginx.conf  # before compression; both in one run
    python benchmarks/first_load.py --nginx-conf /tmp/old-nginx.conf --nginx-conf docs/hosting/nginx.conf

Starts ``streamlit run app.py`` (the repository's ``.streamlit/config.toml``, headless, a free
port on 127.0.0.1, an empty profile cache of its own) and, unless ``--only direct``, nginx in
front of it with each ``--nginx-conf`` (default: the shipped ``docs/hosting/nginx.conf``). The
shipped file is a server block; it is copied into a temporary directory with only its
``listen`` port and its upstream's port changed, and included in an ``http`` block that has
the settings of Debian's stock ``/etc/nginx/nginx.conf`` (where ``conf.d/`` lands), so what is
measured is the shipped settings. nginx runs in the foreground (started as root, its workers
run as nobody, as Debian's run as www-data). With ``--baseline-app DIR``, a second Streamlit
serves the checkout in DIR, straight and through each nginx configuration ("baseline",
"baseline nginx"), and each target is compared with its baseline. A second and third
``--baseline-app`` are served the same way ("baseline2", "baseline2 nginx", ...) and compared
with the first.

One unmeasured visit per target first (the server's own imports are not a visitor's), then
``--visits`` rounds; each round opens the Estimator page (``/``) once per target and network,
interleaved, each in a fresh browser context (empty cache: a first visit) of Debian's Chromium
driven by Playwright. Networks: loopback, and 20 Mbit/s down and up with 20 ms latency
(DevTools network emulation, ``Network.emulateNetworkConditions``).

Measured per visit, in ms from navigation start: the first Plotly chart drawn (an SVG trace
in ``.js-plotly-plot``, seen by a MutationObserver in the page), and on the way there the
document's arrival, the websocket's opening, the first chart element (the page's loader of
plotly.js, ``dashboard/charts.py``; ``plotly_chart`` in a baseline from before it) and the
``script_finished`` message on the websocket, the request for Plotly's JavaScript and its
arrival, and the rest of the page drawn (its last element, ``PAGE_END``). Bytes, of the whole visit (until no request has been open for 0.5 s): HTTP
responses as received over the wire (the sum of CDP ``Network.loadingFinished``
``encodedDataLength``, so compression shows) and, separately,
the websocket messages' payload (after any decompression; DevTools does not show a
compressed frame's size). A visit not done in 60 s fails: at the emulated 20 Mbit/s Chromium
now and then holds a page's requests for over a minute (nginx's access log, ``--logs``, shows
them arriving only then), with any configuration.

Prints a table (median and p90 of the time to the first chart, median bytes) and where the
time goes (medians); ``--json PATH`` writes every visit. Exits 1 if a visit failed.
"""

from __future__ import annotations

import argparse
import base64
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
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED_CONF = os.path.join(ROOT, "docs", "hosting", "nginx.conf")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Chromium without its background traffic (updates, sync, QUIC), which would count as the page's.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
NETWORKS = {  # DevTools network emulation: throughput in bytes/s, latency in ms added to each request
    "loopback": None,
    "20 Mbit/s": {"offline": False, "latency": 20, "downloadThroughput": 20e6 / 8, "uploadThroughput": 20e6 / 8},
}
# Plotly's JavaScript: the dashboard's basic bundle from its static files, or Streamlit's own
# chunk where a page uses st.plotly_chart (a --baseline-app checkout from before the bundle).
PLOTLY_JS = ("/app/static/plotly-basic-", "/PlotlyChart.")
CHART_ELEMENTS = ("bidi_component", "plotly_chart")  # the chart's element on the websocket, likewise
CHARTS = ("breakdown_chart", "curve_chart")  # the Estimator's two Plotly charts, by their widget keys
# The Estimator's last element, after its charts: once its button is drawn, so is the rest of the
# page (widgets, metrics, texts, the table). Beside the first chart, it shows what the charts
# themselves add to a first visit.
PAGE_END = "dl_breakdown_json"
VISIT_TIMEOUT_S = 60
DEBIAN_HTTP = """\
    sendfile on;
    tcp_nopush on;
    types_hash_max_size 2048;
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    gzip on;"""  # Debian's stock nginx.conf http settings (ssl_* left out: no TLS here)

# Runs in the page before its own scripts: the ms since navigation start at which the first
# chart, and each keyed chart, has a drawn trace.
CHART_WATCH = """(() => {
  const marks = {}, longTasks = [];
  window.__firstLoad = marks;
  window.__longTasks = longTasks;  // [start, duration] of each main-thread task over 50 ms
  new PerformanceObserver(list => { for (const e of list.getEntries()) longTasks.push([e.startTime, e.duration]); })
    .observe({type: 'longtask', buffered: true});
  const keys = %s;
  const check = () => {
    const now = performance.now();
    if (marks.first === undefined && document.querySelector('.js-plotly-plot .main-svg .trace')) marks.first = now;
    if (marks.page === undefined && document.querySelector(`.st-key-${%s} button`)) marks.page = now;
    for (const k of keys) {
      if (marks[k] === undefined && document.querySelector(`.st-key-${k} .js-plotly-plot .main-svg .trace`)) marks[k] = now;
    }
    if (marks.page !== undefined && keys.every(k => marks[k] !== undefined)) observer.disconnect();
  };
  const observer = new MutationObserver(check);
  observer.observe(document, {childList: true, subtree: true});
})();""" % (json.dumps(list(CHARTS)), json.dumps(PAGE_END))


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
                                          if os.access(p, os.X_OK)), None)


def nginx_config(server_block: str, listen_port: int, upstream_port: int, workdir: str) -> str:
    """Writes a runnable nginx.conf into ``workdir`` around a copy of the shipped server block,
    with only its listen port and its upstream's port changed; returns the main file's path.

    Args:
        server_block: the text of ``docs/hosting/nginx.conf`` (or another version of it).
        listen_port: where nginx listens, on 127.0.0.1.
        upstream_port: where Streamlit listens, on 127.0.0.1.
        workdir: an empty directory for the configuration, logs, pid and temporary files.

    Returns:
        The path of the main configuration file, for ``nginx -p workdir -c path``.
    """
    block, n_listen = re.subn(r"(?m)^(\s*listen\s+)[^;]+;", rf"\g<1>127.0.0.1:{listen_port};", server_block)
    block, n_upstream = re.subn(r"(?m)^(\s*server\s+)127\.0\.0\.1:\d+;", rf"\g<1>127.0.0.1:{upstream_port};", block)
    if (n_listen, n_upstream) != (1, 1):
        raise ValueError(f"expected one `listen` and one upstream `server 127.0.0.1:PORT;` line in the nginx "
                         f"server block. Received: {n_listen} listen and {n_upstream} upstream lines")
    with open(os.path.join(workdir, "server.conf"), "w") as f:
        f.write(block)
    temp = "\n".join(f"    {kind}_temp_path {workdir}/{kind}_temp;"
                     for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    main = os.path.join(workdir, "nginx.conf")
    with open(main, "w") as f:
        f.write(f"daemon off;\nworker_processes auto;\npid {workdir}/nginx.pid;\nerror_log {workdir}/error.log;\n"
                f"events {{\n    worker_connections 768;\n}}\nhttp {{\n{DEBIAN_HTTP}\n"
                f"    log_format timed '$msec $connection/$connection_requests \"$request\" $status $bytes_sent "
                f"$request_time $upstream_connect_time $upstream_response_time';\n"
                f"    access_log {workdir}/access.log timed;\n{temp}\n    include {workdir}/server.conf;\n}}\n")
    return main


def check_nginx_config(nginx: str, main_conf: str, workdir: str) -> None:
    out = subprocess.run([nginx, "-t", "-q", "-p", workdir, "-e", f"{workdir}/error.log", "-c", main_conf],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"nginx -t refused {main_conf}: {out.stderr.strip()}")


def start_nginx(nginx: str, server_block: str, port: int, upstream_port: int, workdir: str) -> subprocess.Popen:
    """Starts nginx on ``port`` in the foreground, in a process group of its own. ``workdir``
    must be reachable by nginx's workers (as root, nginx runs them as nobody: a temporary file
    they cannot write ends a large answer early)."""
    main = nginx_config(server_block, port, upstream_port, workdir)
    check_nginx_config(nginx, main, workdir)
    log = open(os.path.join(workdir, "stdout.log"), "wb")
    return subprocess.Popen([nginx, "-p", workdir, "-e", f"{workdir}/error.log", "-c", main], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """Ends a server started in its own process group, and everything it started."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Visit:
    """One first visit: CDP network events, turned into ms from navigation start and bytes."""

    def __init__(self):
        self.http_bytes, self.ws_bytes, self.requests = 0, 0, 0
        self.doc = None  # (monotonic s, wall s) of the document's request
        self.t: dict[str, float] = {}  # event -> CDP monotonic s
        self.plotly_ids: set[str] = set()
        self.resources: dict[str, dict] = {}  # requestId -> url, bytes, CDP monotonic s sent and finished
        self.pending: set[str] = set()  # HTTP requests not finished yet
        self.last_event = time.monotonic()

    def mark(self, name: str, ts: float) -> None:
        self.t.setdefault(name, ts)

    def on_request(self, e: dict) -> None:
        if e["type"] == "Document" and self.doc is None:
            self.doc = (e["timestamp"], e["wallTime"])
        self.resources[e["requestId"]] = {"url": e["request"]["url"], "sent": e["timestamp"]}
        self.pending.add(e["requestId"])
        self.last_event = time.monotonic()
        if any(marker in e["request"]["url"] for marker in PLOTLY_JS):
            self.plotly_ids.add(e["requestId"])
            self.mark("plotly_js_requested", e["timestamp"])

    def on_failed(self, e: dict) -> None:
        self.pending.discard(e["requestId"])
        self.last_event = time.monotonic()

    def on_finished(self, e: dict) -> None:
        self.on_failed(e)
        self.http_bytes += e["encodedDataLength"]
        self.requests += 1
        if e["requestId"] in self.resources:
            self.resources[e["requestId"]].update(bytes=e["encodedDataLength"], done=e["timestamp"])
        if e["requestId"] in self.plotly_ids:
            self.mark("plotly_js_loaded", e["timestamp"])

    def on_response(self, e: dict) -> None:
        if e["type"] == "Document":
            self.mark("document_response", e["timestamp"])

    def on_frame(self, e: dict) -> None:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        payload = e["response"]["payloadData"]
        data = base64.b64decode(payload) if e["response"]["opcode"] == 2 else payload.encode()
        self.ws_bytes += len(data)
        self.mark("ws_first_message", e["timestamp"])
        if e["response"]["opcode"] != 2:
            return
        with contextlib.suppress(Exception):  # a message this protobuf version does not know is only not timed
            m = ForwardMsg.FromString(data)
            kind = m.WhichOneof("type")
            if kind == "delta" and m.delta.WhichOneof("type") == "new_element" \
                    and m.delta.new_element.WhichOneof("type") in CHART_ELEMENTS:
                self.mark("ws_plotly_element", e["timestamp"])
            elif kind == "script_finished":
                self.mark("ws_script_finished", e["timestamp"])

    def relative_ms(self, time_origin_ms: float) -> dict[str, float]:
        """CDP monotonic seconds -> ms after the page's performance.timeOrigin (wall clock)."""
        offset = self.doc[1] - self.doc[0]
        return {k: round((ts + offset) * 1e3 - time_origin_ms, 1) for k, ts in self.t.items()}

    def resource_list(self, time_origin_ms: float) -> list[dict]:
        offset, out = self.doc[1] - self.doc[0], []
        for r in self.resources.values():
            if "done" in r:
                out.append({"path": urllib.parse.urlsplit(r["url"]).path, "bytes": r["bytes"],
                            **{k: round((r[k] + offset) * 1e3 - time_origin_ms, 1) for k in ("sent", "done")}})
        return sorted(out, key=lambda r: r["sent"])


def busy(long_tasks: list[list[float]], chart_ms: float, plotly_ms: float | None) -> dict[str, float]:
    """ms of main-thread long tasks (over 50 ms each) before the first chart, all of them and
    those after Plotly's chunk arrived (its parse and run, and the drawing), and the longest."""
    before = [(s, d) for s, d in long_tasks if s < chart_ms]
    after = [min(s + d, chart_ms) - max(s, plotly_ms) for s, d in before if plotly_ms is not None and s + d > plotly_ms]
    return {"before_chart": round(sum(d for _, d in before), 1), "after_plotly_js": round(sum(after), 1),
            "longest": round(max((d for _, d in before), default=0.0), 1)}


def visit(browser, url: str, network: dict | None) -> dict:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        context.add_init_script(CHART_WATCH)
        page = context.new_page()
        cdp = context.new_cdp_session(page)
        v = Visit()
        cdp.on("Network.requestWillBeSent", v.on_request)
        cdp.on("Network.responseReceived", v.on_response)
        cdp.on("Network.loadingFinished", v.on_finished)
        cdp.on("Network.loadingFailed", v.on_failed)
        cdp.on("Network.webSocketFrameReceived", v.on_frame)
        cdp.on("Network.webSocketHandshakeResponseReceived", lambda e: v.mark("ws_open", e["timestamp"]))
        cdp.send("Network.enable")
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": False})
        if network:
            cdp.send("Network.emulateNetworkConditions", network)
        page.goto(url, wait_until="commit", timeout=VISIT_TIMEOUT_S * 1e3)
        keys = " && ".join(f"m.{k} !== undefined" for k in ("first", "page") + CHARTS)
        try:
            page.wait_for_function(f"(() => {{ const m = window.__firstLoad; return m && {keys}; }})()",
                                   timeout=VISIT_TIMEOUT_S * 1e3, polling=100)
        except Exception as exc:  # say how far the visit got, and which requests were still open
            seen = page.evaluate("window.__firstLoad") or {}
            open_urls = [urllib.parse.urlsplit(v.resources[r]["url"]).path for r in v.pending if r in v.resources]
            raise TimeoutError(f"{type(exc).__name__}: marks {seen}, {len(open_urls)} requests open: "
                               f"{open_urls[:5]}") from exc
        marks = page.evaluate("window.__firstLoad")
        long_tasks = page.evaluate("window.__longTasks")
        origin = page.evaluate("performance.timeOrigin")
        quiet_until = time.monotonic() + VISIT_TIMEOUT_S  # then the rest of the page: the bytes of the whole first visit
        while (v.pending or time.monotonic() - v.last_event < 0.5) and time.monotonic() < quiet_until:
            page.wait_for_timeout(100)
        out = {"first_chart_ms": round(marks["first"], 1), **{f"{k}_ms": round(marks[k], 1) for k in CHARTS},
               "page_drawn_ms": round(marks["page"], 1),
               "http_bytes": v.http_bytes, "ws_payload_bytes": v.ws_bytes, "requests": v.requests}
        out["waterfall_ms"] = v.relative_ms(origin) if v.doc else {}
        out["main_thread_ms"] = busy(long_tasks, out["first_chart_ms"], out["waterfall_ms"].get("plotly_js_loaded"))
        out["resources_ms"] = v.resource_list(origin) if v.doc else []
        return out
    finally:
        context.close()


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile."""
    values = sorted(values)
    return values[max(0, math.ceil(q * len(values)) - 1)] if values else None


def summarise(visits: list[dict]) -> dict:
    ok = [v for v in visits if "error" not in v]
    if not ok:
        return {"visits": len(visits), "errors": len(visits)}
    firsts = [v["first_chart_ms"] for v in ok]
    steps = sorted({k for v in ok for k in v["waterfall_ms"]})
    return {"visits": len(visits), "errors": len(visits) - len(ok),
            "first_chart_ms": {"p50": round(statistics.median(firsts), 1), "p90": round(pct(firsts, 0.9), 1)},
            **{f"{k}_ms_p50": round(statistics.median(v[f"{k}_ms"] for v in ok), 1) for k in CHARTS + ("page_drawn",)},
            "http_bytes_p50": round(statistics.median(v["http_bytes"] for v in ok)),
            "ws_payload_bytes_p50": round(statistics.median(v["ws_payload_bytes"] for v in ok)),
            "waterfall_ms_p50": {k: round(statistics.median(v["waterfall_ms"][k] for v in ok
                                                            if k in v["waterfall_ms"]), 1) for k in steps},
            "main_thread_ms_p50": {k: round(statistics.median(v["main_thread_ms"][k] for v in ok), 1)
                                   for k in ("before_chart", "after_plotly_js", "longest")}}


WATERFALL = ("document_response", "ws_open", "ws_plotly_element", "plotly_js_requested", "ws_script_finished",
             "plotly_js_loaded", "page_drawn")


def reference(target: str, results: dict, baseline: str | None) -> str | None:
    """The target ``target`` is compared with: the same way of serving from the first
    --baseline-app checkout ("baseline" for "direct" and for "baseline2", "baseline nginx" for
    "nginx" and for "baseline2 nginx"), else ``baseline``."""
    if target.startswith("baseline"):
        name, _, way = target.partition(" ")
        if name == "baseline":
            return None
        return "baseline" + (" " + way if way else "")
    own = "baseline" if target == "direct" else "baseline " + target
    return own if own in results else baseline if baseline != target else None


def report(results: dict, baseline: str | None) -> None:
    print(f"\nFirst visit to / (fresh browser context), ms from navigation start; {os.cpu_count()} CPUs")
    head = f"{'target':<28} {'network':<10} {'first chart p50':>15} {'p90':>7} {'HTTP bytes p50':>15} {'ws payload':>11}"
    print(head + ("  vs " + baseline if baseline else "  vs the baseline checkout" if "baseline" in results else ""))
    for target, by_network in results.items():
        for network, r in by_network.items():
            s = r["summary"]
            if "first_chart_ms" not in s:
                print(f"{target:<28} {network:<10} " + (f"all {s['visits']} visits failed" if s["visits"] else "no visits"))
                continue
            line = (f"{target:<28} {network:<10} {s['first_chart_ms']['p50']:>15,.0f} {s['first_chart_ms']['p90']:>7,.0f} "
                    f"{s['http_bytes_p50']:>15,} {s['ws_payload_bytes_p50']:>11,}")
            ref = reference(target, results, baseline)
            base = results.get(ref, {}).get(network, {}).get("summary", {}) if ref else {}
            if "first_chart_ms" in base:
                line += (f"  time {s['first_chart_ms']['p50'] / base['first_chart_ms']['p50']:.2f}x, "
                         f"bytes {s['http_bytes_p50'] / base['http_bytes_p50']:.2f}x")
            print(line + (f"  ({s['errors']} failed)" if s["errors"] else ""))
    print("\nWhere the time goes (medians, ms from navigation start; then ms of main-thread tasks over 50 ms "
          "before the first chart: all, those after Plotly's chunk arrived, the longest):")
    print(f"{'target':<28} {'network':<10} " + " ".join(f"{k:>19}" for k in WATERFALL + ("first chart",))
          + f" {'busy':>6} {'after':>6} {'longest':>7}")
    for target, by_network in results.items():
        for network, r in by_network.items():
            s = r["summary"]
            if "first_chart_ms" in s:
                w, m = s["waterfall_ms_p50"], s["main_thread_ms_p50"]
                cells = [w.get(k, s.get(f"{k}_ms_p50")) for k in WATERFALL] + [s["first_chart_ms"]["p50"]]
                print(f"{target:<28} {network:<10} " + " ".join(f"{c:>19,.0f}" if c is not None else f"{'-':>19}"
                                                           for c in cells)
                      + f" {m['before_chart']:>6,.0f} {m['after_plotly_js']:>6,.0f} {m['longest']:>7,.0f}")


def _interrupted(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:6]))
    p.add_argument("--visits", type=int, default=5, help="measured visits per target and network (default 5)")
    p.add_argument("--only", choices=["direct", "nginx"], help="only Streamlit itself, or only through nginx")
    p.add_argument("--nginx-conf", action="append", metavar="PATH",
                   help="an nginx server block to measure (repeatable; default: the shipped docs/hosting/nginx.conf); "
                        "with several, ratios are against the first")
    p.add_argument("--network", choices=list(NETWORKS), action="append", help="default: all")
    p.add_argument("--baseline-app", metavar="DIR", action="append", default=[],
                   help="also serve the dashboard from another checkout (git worktree add DIR COMMIT), straight from "
                        "Streamlit, as target 'baseline'; ratios are against it (repeatable, up to 3: 'baseline2', "
                        "'baseline3', compared with the first)")
    p.add_argument("--json", metavar="PATH", help="write every visit and the summaries here")
    p.add_argument("--logs", metavar="DIR", help="keep Streamlit's log and nginx's logs here (access log with timings)")
    args = p.parse_args()
    if len(args.baseline_app) > 3:
        p.error(f"at most 3 --baseline-app. Received: {len(args.baseline_app)}")
    if not 1 <= args.visits <= 50:
        p.error(f"--visits must be 1..50. Received: {args.visits}")
    if CHROMIUM is None:
        p.error("needs Debian's chromium (apt-get install chromium)")
    confs = [os.path.abspath(c) for c in (args.nginx_conf or [SHIPPED_CONF])] if args.only != "direct" else []
    nginx = nginx_binary() if confs else None
    if confs and nginx is None:
        p.error("nginx is not installed (apt-get install nginx), or use --only direct")
    networks = {n: NETWORKS[n] for n in (args.network or NETWORKS)}

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from load_test import free_port, start_server, wait_healthy, wait_ok
    from playwright.sync_api import sync_playwright

    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    signal.signal(signal.SIGTERM, _interrupted)
    workdir, conf_dirs, procs, errors = tempfile.mkdtemp(prefix="calc-first-load-"), [], [], []
    results: dict[str, dict] = {}
    try:
        st_port = free_port()
        streamlit = start_server(st_port, workdir)
        procs.append(streamlit)
        wait_healthy(streamlit, st_port)
        upstreams = [("", st_port)]
        for i, directory in enumerate(args.baseline_app):
            name = "baseline" + (str(i + 1) if i else "")
            base_port = free_port()
            baseline = start_server(base_port, workdir, root=os.path.abspath(directory), log_name=f"{name}.log")
            procs.append(baseline)
            wait_healthy(baseline, base_port)
            upstreams.append((name + " ", base_port))
        # Straight from Streamlit: the baselines first, then the dashboard.
        targets = {} if args.only == "nginx" else {prefix.strip() or "direct": f"http://127.0.0.1:{port}/"
                                                   for prefix, port in upstreams[1:] + upstreams[:1]}
        for i, conf in enumerate(confs):
            for prefix, upstream in upstreams:
                label = prefix + ("nginx" if conf == SHIPPED_CONF else f"nginx ({os.path.basename(conf)})")
                if label in targets:
                    label += f" #{i + 1}"
                conf_dir = tempfile.mkdtemp(prefix="calc-first-load-nginx-")  # beside workdir, not in it (0700)
                os.chmod(conf_dir, 0o755)  # nginx started as root runs its workers as nobody
                conf_dirs.append(conf_dir)
                with open(conf) as f:
                    port = free_port()
                    proc = start_nginx(nginx, f.read(), port, upstream, conf_dir)
                procs.append(proc)
                wait_ok(proc, f"http://127.0.0.1:{port}/_stcore/health", what="nginx", poll_s=0.3)
                targets[label] = f"http://127.0.0.1:{port}/"
        print(f"Streamlit pid {streamlit.pid} on 127.0.0.1:{st_port}; "
              + ", ".join(f"{k} {u}" for k, u in targets.items()), flush=True)
        results = {t: {n: {"visits": []} for n in networks} for t in targets}
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for target, url in targets.items():  # the server's first page pays its imports: not a visitor's cost
                try:
                    warm = visit(browser, url, None)
                    print(f"  warm-up {target}: first chart at {warm['first_chart_ms']:,.0f} ms", flush=True)
                except Exception as exc:  # reported; the measured visits say whether it lasts
                    if not browser.is_connected():
                        raise
                    errors.append(f"{target} warm-up: {type(exc).__name__}: {exc}"[:500])
            for i in range(args.visits):
                for target, url in targets.items():
                    for network, conditions in networks.items():
                        try:
                            r = visit(browser, url, conditions)
                        except Exception as exc:  # one failed visit is reported, the rest go on
                            if not browser.is_connected():  # Ctrl-C or SIGTERM landed inside Playwright
                                raise
                            r = {"error": f"{type(exc).__name__}: {exc}"[:500]}
                            errors.append(f"{target} {network} visit {i + 1}: {r['error']}")
                        results[target][network]["visits"].append(r)
                        print(f"  visit {i + 1} {target:<28} {network:<10} "
                              + (f"first chart {r['first_chart_ms']:7,.0f} ms, HTTP {r['http_bytes']:>10,} B"
                                 if "error" not in r else r["error"][:200]), flush=True)
            browser.close()
    except (Exception, KeyboardInterrupt) as exc:  # reported; the servers are ended all the same
        errors.append(f"aborted: {type(exc).__name__}: {exc}")
    finally:
        for proc in reversed(procs):
            stop(proc)
        if args.logs:
            os.makedirs(args.logs, exist_ok=True)
            with contextlib.suppress(OSError):
                shutil.copy(os.path.join(workdir, "server.log"), os.path.join(args.logs, "streamlit.log"))
            for i, d in enumerate(conf_dirs):
                for name in ("access.log", "error.log", "server.conf"):
                    with contextlib.suppress(OSError):
                        shutil.copy(os.path.join(d, name), os.path.join(args.logs, f"nginx-{i}-{name}"))
        for d in [workdir] + conf_dirs:
            shutil.rmtree(d, ignore_errors=True)
    for by_network in results.values():
        for r in by_network.values():
            r["summary"] = summarise(r["visits"])
    if results:
        nginx_targets = [t for t in results if t.startswith("nginx")]
        report(results, None if args.baseline_app else nginx_targets[0] if len(nginx_targets) > 1 else None)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "cpu_count": os.cpu_count(), "networks": networks,
                       "results": results, "errors": errors}, f, indent=1)
    for e in errors[:5]:
        print("ERROR", e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
