"""A batch-size change in a real browser: time until the curve is redrawn with the new batch.

    python benchmarks/batch_redraw.py                                  # this checkout, 8 changes
    git worktree add /tmp/before COMMIT
    python benchmarks/batch_redraw.py --baseline-app /tmp/before      # and another, interleaved

Serves the dashboard with ``streamlit run`` (a free port on 127.0.0.1, a profile cache of its
own) and opens the Estimator in Debian's Chromium (Playwright) at MobileNetV2 96 px on a T4,
on the graph-executor step (no XLA compile in the way). Then types a new batch size and
presses Enter, ``--changes`` times, and measures from the key press until the curve chart's
figure names the new batch's marker and has a drawn trace: the server's rerun, the
websocket, and the browser's redraw. The first change is not counted (the page's first
rerun). With ``--baseline-app`` each change is made in both pages in turn; prints the
medians and the ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CURVE = ".st-key-curve_chart .js-plotly-plot"
LINK = "/?model=MobileNetV2&image_size=96&batch_size=16&gpu=t4&step=graph"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--changes", type=int, default=8, help="batch changes per page (default 8; the first is not counted)")
    p.add_argument("--baseline-app", metavar="DIR", help="also another checkout (git worktree add DIR COMMIT)")
    args = p.parse_args()
    if not 2 <= args.changes <= 50:
        p.error(f"--changes must be 2..50. Received: {args.changes}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from first_load import CHROMIUM, CHROMIUM_ARGS
    from load_test import free_port, start_server, wait_healthy
    if CHROMIUM is None:
        p.error("needs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    roots = {"this checkout": ROOT, **({"baseline": os.path.abspath(args.baseline_app)} if args.baseline_app else {})}
    workdir, servers = tempfile.mkdtemp(prefix="calc-batch-redraw-"), {}
    times: dict[str, list[float]] = {name: [] for name in roots}
    try:
        for name, root in roots.items():
            port = free_port()
            servers[name] = (start_server(port, workdir, root=root, log_name=f"{len(servers)}.log"), port)
        for proc, port in servers.values():
            wait_healthy(proc, port)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            pages = {}
            for name, (_, port) in servers.items():
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"http://127.0.0.1:{port}{LINK}", timeout=120_000)
                page.wait_for_selector(f"{CURVE} .main-svg .trace", timeout=180_000)
                pages[name] = page
            for i in range(args.changes):
                batch = 24 + 16 * i
                for name, page in pages.items():
                    box = page.get_by_label("Batch size (global)")
                    box.fill(str(batch))
                    start = time.perf_counter()
                    box.press("Enter")
                    page.wait_for_function(
                        f"() => (document.querySelector('{CURVE}')?.data || []).some(t => t.name === 'batch {batch}')"
                        f" && document.querySelector('{CURVE} .main-svg .trace')", timeout=60_000, polling="raf")
                    if i:
                        times[name].append((time.perf_counter() - start) * 1e3)
            browser.close()
    finally:
        for proc, _ in servers.values():
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"Batch change to the curve redrawn, ms ({args.changes - 1} changes a page, {os.cpu_count()} CPUs)")
    for name, values in times.items():
        print(f"{name:<14} median {statistics.median(values):6,.0f}  max {max(values):6,.0f}  "
              + " ".join(f"{v:,.0f}" for v in values))
    if "baseline" in times:
        ratio = statistics.median(times["this checkout"]) / statistics.median(times["baseline"])
        print(f"this checkout / baseline: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
