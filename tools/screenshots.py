"""Screenshots of every page in every language, and of the Formula page's presentation mode.

    python tools/screenshots.py [--out docs/screenshots] [--lang en ja ko]

Serves the dashboard with ``streamlit run`` on a free port and drives the system's
Chromium with Playwright (as tests/test_browser.py does). Japanese and Korean need a CJK
font on the machine (Debian: ``apt-get install fonts-noto-cjk``), else they show as boxes.
Writes ``<page>-<lang>.png`` (and ``formula-present-<lang>.png``) and prints each path.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--lang", nargs="+", default=["en", "ja", "ko"])
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with tempfile.TemporaryDirectory() as cache:
        proc, url = serve(cache)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport=VIEWPORT)
                for lang in args.lang:
                    for name, path in PAGES.items():
                        shoot(page, f"{url}/{path}?{LINK}&lang={lang}", args.out / f"{name}-{lang}.png")
                    shoot(page, f"{url}/formula?{LINK}&lang={lang}&present=true",
                          args.out / f"formula-present-{lang}.png", next_terms=3)
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    main()
