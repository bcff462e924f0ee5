"""Screenshots of every page in every language, of the Formula page's presentation mode and of its handout.

    python tools/screenshots.py [--out docs/screenshots] [--lang en ja ko] [--only-kerashub]

Serves the dashboard with ``streamlit run`` on a free port and drives the system's
Chromium with Playwright (as tests/test_browser.py does). Japanese and Korean need a CJK
font on the machine (Debian: ``apt-get install fonts-noto-cjk``), else they show as boxes.
The link's XLA plan is first compiled with what fills its peak (the shipped plan leaves that
out; one compile, in the server's own cache), so that the pages show XLA's split; so is a
KerasHub link's (Gemma 2 2B with LoRA on an L4). Writes ``<page>-<lang>.png``,
``estimator-kerashub-<lang>.png``, ``formula-kerashub-<lang>.png``, ``compare-kerashub-<lang>.png``,
``formula-present-<width>x<height>-<lang>.png`` at 1920x1080 and 1280x720, and ``handout-<lang>.png``,
and prints each path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = {"estimator": "", "layers": "layers", "formula": "formula", "compare": "compare", "validation": "validation"}
LINK = "model=ResNet50&image_size=224&batch_size=32&optimizer=adam&gpu=t4"  # the default page: XLA plan shipped
VIEWPORT = {"width": 1440, "height": 900}
PROJECTORS = ({"width": 1920, "height": 1080}, {"width": 1280, "height": 720})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(cache: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = dict(os.environ, CALC_CACHE_DIR=cache, CALC_XLA_COMPILES="off")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.port", str(port), "--server.address", "127.0.0.1"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("streamlit did not start")


def settle(page) -> None:
    page.locator('[data-testid="stMainBlockContainer"] h1').first.wait_for(timeout=180_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)
    page.wait_for_timeout(2500)  # charts and fonts settle


def shoot(page, url: str, path: Path, next_terms: int = 0) -> None:
    page.goto(url, timeout=120_000)
    settle(page)
    for _ in range(next_terms):  # the presentation, a few terms in
        page.locator(".st-key-present_next button").click()
        settle(page)
    page.screenshot(path=str(path))
    print(path)


def explain_link(cache: str) -> None:
    """Compiles the link's plan with what fills its peak, into ``cache``."""
    from dataclasses import replace

    from calc.xla import compute_plan
    from dashboard.state import Inputs
    from dashboard.xla_step import setup_of

    os.environ["CALC_CACHE_DIR"] = cache
    inputs = Inputs(model="ResNet50", image_size=224, batch_size=32, optimizer="adam", gpu="t4")
    setup = setup_of(inputs)
    plan = compute_plan(setup.spec, replace(setup.config, batch_size=inputs.batch_size), setup.gpu_key, setup.remat,
                        explained=True)
    assert plan.explained is not None, "the compile did not say what fills the peak"


HUB_LINK = "source=hub&hub=gemma2_2b_en&seq_len=512&lora_rank=4&batch_size=1&optimizer=adamw&gpu=l4"


def compile_hub_link(cache: str) -> None:
    """Compiles the KerasHub link's plan with what fills its peak, into ``cache`` (no weights are made)."""
    from calc.xla import compute_plan
    from dashboard.state import parse_query
    from dashboard.views import config_of
    from dashboard.xla_step import hub_spec_of

    os.environ["CALC_CACHE_DIR"] = cache
    inputs, _ = parse_query(dict(pair.split("=") for pair in HUB_LINK.split("&")))
    plan = compute_plan(hub_spec_of(inputs), config_of(inputs), inputs.gpu, explained=True)
    assert plan.explained is not None, "the compile did not say what fills the peak"


def shoot_handout(page, url: str, path: Path) -> None:
    """The Formula page's handout, downloaded as a visitor would, then opened."""
    page.goto(url, timeout=120_000)
    settle(page)
    with page.expect_download() as download:
        page.locator(".st-key-dl_handout button").click()
    saved = path.with_suffix(".html")
    download.value.save_as(saved)
    page.goto(saved.as_uri())
    page.wait_for_timeout(500)
    page.screenshot(path=str(path), full_page=True)
    saved.unlink()
    print(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--lang", nargs="+", default=["en", "ja", "ko"])
    parser.add_argument("--only-kerashub", action="store_true", help="the KerasHub link's pages alone")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with tempfile.TemporaryDirectory() as cache:
        if not args.only_kerashub:
            explain_link(cache)
        compile_hub_link(cache)
        proc, url = serve(cache)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport=VIEWPORT)
                for lang in args.lang:
                    shoot(page, f"{url}/?{HUB_LINK}&lang={lang}", args.out / f"estimator-kerashub-{lang}.png")
                    shoot(page, f"{url}/formula?{HUB_LINK}&lang={lang}", args.out / f"formula-kerashub-{lang}.png")
                    shoot(page, f"{url}/compare?{HUB_LINK}&lang={lang}", args.out / f"compare-kerashub-{lang}.png")
                    if args.only_kerashub:
                        continue
                    for name, path in PAGES.items():
                        shoot(page, f"{url}/{path}?{LINK}&lang={lang}", args.out / f"{name}-{lang}.png")
                    shoot_handout(page, f"{url}/formula?{LINK}&lang={lang}", args.out / f"handout-{lang}.png")
                    for size in PROJECTORS:
                        projected = browser.new_page(viewport=size)
                        shoot(projected, f"{url}/formula?{LINK}&lang={lang}&present=true",
                              args.out / f"formula-present-{size['width']}x{size['height']}-{lang}.png", next_terms=5)
                        projected.close()
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    main()
