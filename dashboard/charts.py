"""Plotly charts on a page, drawn by plotly.js's basic bundle instead of Streamlit's full one.

``st.plotly_chart`` loads all of plotly.js (4.7 MB; 1.2 s of a browser's main thread to
evaluate on this project's machine, before the first chart can be drawn). The dashboard's
figures are bars and lines, which plotly.js's basic bundle (bar, scatter and pie traces;
1.2 MB) draws with the same figure JSON. The bundle is served with the app's static files
(``static/``, ``server.enableStaticServing``) under its version, and a small component
(``plotly_chart.js``) loads it once per page and draws each figure with ``Plotly.react``.
A page with charts mounts the loader first (``preload``), before it computes anything.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from dashboard.i18n import tr

STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")
BUNDLE_PREFIX, BUNDLE_SUFFIX = "plotly-basic-", ".min.js"  # static/plotly-basic-<plotly.js version>.min.js
# The trace types plotly.js's basic bundle draws (its package's README); a figure with another
# type would draw nothing in the browser, so tests/test_views.py checks every figure builder.
BASIC_TRACES = frozenset({"scatter", "bar", "pie"})
COMPONENT_NAME = "plotly_basic_chart"
PRELOAD_KEY = "plotly_preload"
# The loader shows nothing, and takes no place in the page's column.
PRELOAD_CSS = f".st-key-{PRELOAD_KEY} {{ display: none; }}"


@functools.cache
def bundle_name() -> str:
    """The file name of the one plotly.js basic bundle in ``static/`` (looked up once per process)."""
    names = [n for n in os.listdir(STATIC_DIR) if n.startswith(BUNDLE_PREFIX) and n.endswith(BUNDLE_SUFFIX)]
    if len(names) != 1:
        raise RuntimeError(f"expected one {BUNDLE_PREFIX}<version>{BUNDLE_SUFFIX} in {STATIC_DIR}. Received: {names}")
    return names[0]


def bundle_version() -> str:
    return bundle_name()[len(BUNDLE_PREFIX):-len(BUNDLE_SUFFIX)]


def bundle_url() -> str:
    """Where the browser fetches the bundle: Streamlit's static route under the server's base path."""
    base = (st.get_option("server.baseUrlPath") or "").strip("/")
    return f"{'/' + base if base else ''}/app/static/{bundle_name()}"


@functools.cache
def _component() -> Any:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "plotly_chart.js"), encoding="utf-8") as f:
        js = f.read()
    return st.components.v2.component(COMPONENT_NAME, js=js, css=PRELOAD_CSS, isolate_styles=False)


def figure_json(fig: go.Figure) -> str:
    """The figure as plotly.js reads it, without Plotly's default template (the page's theme
    colours the chart instead)."""
    spec = json.loads(fig.to_json())
    spec.get("layout", {}).pop("template", None)
    return json.dumps(spec, separators=(",", ":"))


def preload() -> None:
    """Starts the browser loading the bundle; a page with charts calls it first, so that the
    bundle arrives while the page's numbers are computed, not after."""
    _component()(key=PRELOAD_KEY, data={"src": bundle_url()})


def plotly_chart(where: Any, fig: go.Figure, key: str) -> None:
    """Draws ``fig`` in ``where`` (``st`` or a container), full width, under widget key ``key``."""
    src = bundle_url()
    data = {"figure": figure_json(fig), "src": src,
            "failed": tr("The chart could not be drawn: its script did not load from {src}.", src=src)}
    with contextlib.nullcontext() if where is st else where:
        _component()(key=key, data=data)
