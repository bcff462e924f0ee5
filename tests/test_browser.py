"""One real-browser test: the dashboard served by `streamlit run`, driven in Chromium.

Needs Debian's chromium (`apt-get install chromium`) and the `playwright` Python
package (its driver only; the browser is the system one). Skips where either is
missing, except in CI (CI=true), where it must run.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    env = dict(os.environ, CALC_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("streamlit did not start")
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="module")
def playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("playwright is not installed")
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed")
        pytest.skip("chromium is not installed")
    with sync_playwright() as p:
        yield p


def _translator(lang: str):
    """The dashboard's texts in ``lang``, read from its locale files, as a test looks for them on the page."""
    import json

    locales = {}
    for path in (ROOT / "dashboard" / "locales").glob("*.json"):
        locales.update(json.loads(path.read_text(encoding="utf-8")))
    return lambda text: text if lang == "en" else locales[text][lang]


@pytest.fixture(scope="module")
def chromium(playwright):
    """One Chromium for the module's tests (a launch starts its browser, GPU and network processes)."""
    browser = playwright.chromium.launch(
        executable_path=CHROMIUM,
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
              "--disable-sync", "--no-first-run", "--disable-quic"],
    )
    yield browser
    browser.close()


@pytest.fixture
def browser(chromium):
    """The module's Chromium; each page a test opens has a context of its own, closed after the test."""
    yield chromium
    for context in chromium.contexts:
        context.close()


def test_a_link_to_a_page_opens_in_the_app_on_a_fresh_server(server, browser):
    # Must be the server's first page load: Streamlit starts in its legacy pages/
    # mode until some session has run app.py's st.navigation.
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/compare?model=MobileNetV2&image_size=224&batch_size=16&gpu=t4", timeout=120_000)
    page.get_by_text("Compare models and GPUs").wait_for(timeout=180_000)
    nav = page.locator('[data-testid="stSidebarNav"]')
    nav.get_by_text("Estimator").wait_for(timeout=30_000)
    links = nav.inner_text()
    assert "Compare" in links and "app" not in links.split()
    assert "/compare" in page.url and "batch_size=16" in page.url


CURVE = ".st-key-curve_chart .js-plotly-plot"


def test_change_batch_size_updates_the_chart(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/?model=MobileNetV2&image_size=224&batch_size=16&gpu=t4", timeout=120_000)
    page.get_by_text("Largest batch").first.wait_for(timeout=180_000)
    for key in ("breakdown_chart", "curve_chart"):
        page.locator(f".st-key-{key} .js-plotly-plot .main-svg .trace").first.wait_for(timeout=60_000)
    names = "sel => document.querySelector(sel).data.map(t => t.name)"
    assert "batch 16" in page.evaluate(names, CURVE)
    metric = page.locator('[data-testid="stMetricValue"]').first
    before = metric.inner_text()
    box = page.get_by_label("Batch size (global)")
    box.fill("512")
    box.press("Enter")
    page.wait_for_function(
        "before => document.querySelector('[data-testid=\"stMetricValue\"]').innerText !== before",
        arg=before, timeout=60_000,
    )
    assert metric.inner_text() != before
    assert "batch_size=512" in page.url
    # The curve is redrawn with the new batch's marker (in a new element where a message above it
    # came or went, which React mounts afresh).
    page.wait_for_function(f"() => (document.querySelector('{CURVE}')?.data || []).some(t => t.name === 'batch 512')",
                           timeout=60_000)
    # Drawn by plotly.js's basic bundle from the app's static files, loaded once; Streamlit's
    # own Plotly chunk (all of plotly.js) is never fetched.
    bundles = [u for u in requests if "/app/static/plotly-basic-" in u]
    assert len(bundles) == 1 and not [u for u in requests if "/PlotlyChart." in u], requests
    assert not errors, errors
    # In the theme's colours: the axis texts are the page's text colour at 60 %.
    text = page.evaluate("getComputedStyle(document.querySelector('[data-testid=\"stMetricValue\"]')).color")
    tick = page.evaluate(f"(s => [s.fill, s.fillOpacity])(getComputedStyle(document.querySelector('{CURVE} .ytick text')))")
    assert tick == [text, "0.6"], (tick, text)
    page.wait_for_timeout(1500)
    shot = Path(os.environ.get("CALC_SCREENSHOT_DIR", tmp_path)) / "screenshot-estimator.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


def test_a_chart_whose_script_does_not_load_says_so_in_the_pages_language(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.route("**/app/static/plotly-basic-*", lambda route: route.abort())
    page.goto(f"{server}/?model=MobileNetV2&image_size=224&batch_size=16&gpu=t4&lang=ja", timeout=120_000)
    curve = page.locator(".st-key-curve_chart")
    curve.get_by_text("グラフを描けませんでした").wait_for(timeout=180_000)
    assert "/app/static/plotly-basic-" in curve.inner_text()


def test_charts_use_the_bundle_a_proxy_put_in_the_page(server, browser):
    """The shipped nginx configuration loads the bundle in the page itself (data-plotly-early); the
    charts wait for that script instead of fetching the bundle again."""
    from dashboard.charts import bundle_name

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # What nginx's sub_filter does, done in the page (a rewritten document would lose its local
    # address, and Chromium would refuse its websocket to 127.0.0.1): the script in <head>, first.
    page.add_init_script("""new MutationObserver((_, seen) => {
      if (!document.head) return;
      seen.disconnect();
      const s = document.createElement("script");
      s.async = true;
      s.setAttribute("data-plotly-early", "");
      s.setAttribute("onerror", "this.dataset.failed = 1");
      s.src = "/app/static/%s";
      document.head.appendChild(s);
    }).observe(document, {childList: true, subtree: true});""" % bundle_name())
    # The bundle arrives late, so that the charts are mounted while the page's script still loads.
    page.route("**/app/static/plotly-basic-*", lambda route: (time.sleep(8), route.continue_()))
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/?model=MobileNetV2&image_size=224&batch_size=16&gpu=t4", wait_until="commit", timeout=120_000)
    for key in ("breakdown_chart", "curve_chart"):
        page.locator(f".st-key-{key} .js-plotly-plot .main-svg .trace").first.wait_for(timeout=180_000)
    assert page.evaluate("document.querySelectorAll('script[data-plotly-early]:not([data-failed])').length") == 1
    assert page.evaluate("document.querySelectorAll('script[src*=\"plotly-basic-\"]').length") == 1
    assert len([u for u in requests if "/app/static/plotly-basic-" in u]) == 1, requests
    assert not errors, errors


def test_a_shared_compare_link_and_the_presentation_mode(server, browser):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # A colleague's link: the Compare page's models and cards, in Japanese.
    page.goto(f"{server}/compare?model=MobileNetV2&image_size=224&batch_size=16&gpu=t4&models=ResNet50,VGG16"
              "&gpus=t4,h100-80&lang=ja", timeout=120_000)
    page.get_by_text("モデルと GPU の比較").wait_for(timeout=180_000)
    # Read once the models' list is drawn: a page in mid-run can show the cards' list before it.
    chosen = page.locator(".st-key-compare_models")
    for model in ("ResNet50", "VGG16"):
        expect(chosen).to_contain_text(model, timeout=60_000)
    expect(chosen).not_to_contain_text("MobileNetV2")
    expect(page.locator(".st-key-compare_gpus")).to_contain_text("H100 80 GB", timeout=60_000)
    table = page.locator('[data-testid="stDataFrame"]').first
    table.wait_for(timeout=60_000)
    # The Formula page projected: no sidebar, one term, then the next.
    page.goto(f"{server}/formula?model=MobileNetV2&image_size=224&batch_size=16&gpu=t4&present=true",
              timeout=120_000)
    page.get_by_text("Term 1 of 9").wait_for(timeout=180_000)
    page.locator('[data-testid="stSidebar"]').wait_for(state="hidden", timeout=30_000)
    page.get_by_role("button", name="Next term").click()
    page.get_by_text("Term 2 of 9").wait_for(timeout=60_000)
    expect(page.get_by_text("S, optimizer state")).to_be_visible(timeout=60_000)


WALK_LESSON = "formula?model=MobileNetV2&image_size=224&batch_size=16&gpu=t4&present=true"  # no plan known: the walk
XLA_LESSON = "formula?present=true"  # the landing link: its shipped plan says what fills its peak


@pytest.mark.parametrize("width,height", [(1920, 1080), (1280, 720)])
@pytest.mark.parametrize("link", [WALK_LESSON, XLA_LESSON], ids=["walk", "xla"])
def test_presentation_mode_keeps_its_controls_and_the_newest_term_on_screen(server, browser, width, height, link):
    """Projected at 1080p and 720p, every term of the walk's lesson and of XLA's: "Next term" and the
    term just revealed are on screen without scrolling (the controls used to fall off from term 6 at
    1080p, term 1 filled 720p)."""
    import re

    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(f"{server}/{link}", timeout=120_000)
    place = page.get_by_text(re.compile(r"^Term 1 of \d+$"))
    place.wait_for(timeout=180_000)
    count = int(place.inner_text().rsplit(" ", 1)[-1])
    heading = "XLA's plan, with your numbers" if link == XLA_LESSON else "1. What this tool computes"
    expect(page.get_by_role("heading", name=heading)).to_be_visible(timeout=60_000)

    def on_screen(locator) -> bool:
        box = locator.bounding_box()
        return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height

    for shown in range(1, count + 1):
        page.get_by_text(f"Term {shown} of {count}").wait_for(timeout=60_000)
        button = page.get_by_role("button", name="Next term" if shown < count else "Previous")
        assert on_screen(button), f"term {shown}: the controls are off the screen"
        newest = page.locator('[data-testid="stMarkdownContainer"] li').first  # the newest term comes first
        assert on_screen(newest), f"term {shown} is off the screen"
        if shown == 1:
            assert "W, weights" in newest.inner_text()  # both lessons start from the weights
        if shown < count:
            button.click()


@pytest.mark.parametrize("lang", ["en", "ja", "ko"])
def test_a_kerashub_link_opens_its_setup_in_the_sidebar(server, browser, lang):
    """A colleague's link to a KerasHub fine-tuning step: the sidebar shows the preset, the sequence and
    LoRA's rank; with no plan of it on this server (tests compile none), the page says so in the
    link's language and shows no number."""
    from playwright.sync_api import expect

    tr = _translator(lang)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/?source=hub&hub=gemma2_2b_en&seq_len=1024&lora_rank=8&batch_size=2&optimizer=adamw"
              f"&gpu=l4&lang={lang}", timeout=120_000)
    said = tr("XLA compiles are off on this server ({env}=off): a KerasHub model shows only the plans already "
              "compiled here.").replace("{env}", "CALC_XLA_COMPILES")
    page.get_by_text(said).wait_for(timeout=180_000)
    expect(page.get_by_text("gemma2_2b_en: ").first).to_be_visible(timeout=60_000)  # the setup's line, with its numbers
    sidebar = page.locator('[data-testid="stSidebar"]')
    # The widgets take the link's values as the page settles: waited for, not read once.
    expect(sidebar.get_by_role("spinbutton", name=tr("Sequence length (tokens)"))).to_have_value("1024", timeout=60_000)
    expect(sidebar.get_by_role("spinbutton", name=tr("LoRA rank (0: train every weight)"))).to_have_value(
        "8", timeout=60_000)
    assert page.locator('[data-testid="stMetricValue"]').count() == 0
    # Compare: the link's preset beside another of its task, on the sidebar's card first, each cell XLA's.
    page.goto(f"{server}/compare?source=hub&hub=gemma2_2b_en&seq_len=1024&lora_rank=8&batch_size=2"
              f"&optimizer=adamw&gpu=l4&lang={lang}", timeout=120_000)
    heading = tr("XLA's planned peak at batch {batch} ({unit}, framework overhead not included, as on the "
                 "Estimator)").replace("{batch}", "2").replace("{unit}", "GiB")
    page.get_by_text(heading).wait_for(timeout=180_000)
    chosen = page.locator(".st-key-compare_hubs")
    expect(chosen).to_contain_text("gemma2_2b_en", timeout=60_000)
    expect(chosen).to_contain_text("qwen2.5_3b_en", timeout=60_000)
    # The largest batches, the peaks, and the cards sharing the weights (Gemma and Qwen have layout maps).
    expect(page.locator('[data-testid="stDataFrame"]')).to_have_count(3, timeout=60_000)
    expect(page.get_by_text(tr("Cards sharing the weights"), exact=True)).to_be_visible(timeout=60_000)


AGREEMENT_LINKS = {
    "compiled": ("model=ResNet50&image_size=224&batch_size=32&gpu=t4", "ResNet50"),  # the landing link: shipped plans
    "drawn": ("model=MobileNetV2&image_size=224&batch_size=64&gpu=l4", "MobileNetV2"),  # between two shipped plans
    "kerashub": ("source=hub&hub=gemma2_2b_en&seq_len=512&lora_rank=4&batch_size=32&optimizer=adam&gpu=t4",
                 "gemma2_2b_en"),  # the first KerasHub page, shipped
}


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_every_page_says_the_estimators_largest_batch_for_three_links(server, browser, tmp_path, lang):
    """The Estimator's largest batch, its chart's legend, Compare's cell and the Formula page's line say one
    number for a catalogue link whose plan is compiled, one whose plan is drawn, and a KerasHub link; no metric
    label is cut, in English and in Japanese."""
    import csv
    import re

    tr = _translator(lang)
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    for name, (query, model) in AGREEMENT_LINKS.items():
        page.goto(f"{server}/?{query}&lang={lang}", timeout=120_000)
        page.locator(f"{CURVE} .main-svg .trace").first.wait_for(timeout=180_000)
        page.locator('[data-testid="stMetricValue"]').nth(2).wait_for(timeout=60_000)
        metrics = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stMetric"]')].map(m => {
            const label = m.querySelector('[data-testid="stMetricLabel"]');
            const cut = [label, ...label.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1);
            return [label.innerText, m.querySelector('[data-testid="stMetricValue"]').innerText, cut];
        })""")
        assert not [m for m in metrics if m[2]], (name, metrics)  # every label whole
        largest = next((v for label, v, _ in metrics if label.startswith(tr("Largest batch that fits (XLA, searching)")[:4])),
                       None)
        assert largest is not None and re.fullmatch(r"(≥ )?[\d,]+", largest), (name, metrics)
        legend = page.evaluate("sel => document.querySelector(sel).data.map(t => t.name)", CURVE)
        assert tr("largest that fits: {batch}").replace("{batch}", largest) in legend, (name, legend)
        # Compare, the same link: the model's cell on the sidebar's card.
        page.goto(f"{server}/compare?{query}&lang={lang}", timeout=120_000)
        button = page.get_by_role("button", name=tr("Table as CSV"))
        button.wait_for(timeout=180_000)
        with page.expect_download() as download:
            button.click()
        rows = list(csv.DictReader(open(download.value.path(), encoding="utf-8")))
        card = {"t4": "Tesla T4 16 GB", "l4": "L4 24 GB"}[re.search(r"gpu=(\w+)", query).group(1)]
        row = next(r for r in rows if r[tr("model")] == model)
        assert row[card] == largest, (name, row, largest)
        if name != "kerashub":  # the Formula page's XLA line
            page.goto(f"{server}/formula?{query}&step=xla&lang={lang}", timeout=120_000)
            said = tr("at least {batch:,} (not settled yet)").replace("{batch:,}", largest[2:]) if largest.startswith(
                "≥") else largest
            page.get_by_text(re.compile(re.escape(said))).first.wait_for(timeout=180_000)
