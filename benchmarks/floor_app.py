"""Writes the floor of a first visit: Streamlit drawing the Estimator's two charts and nothing else.

    python benchmarks/floor_app.py /tmp/floor
    python benchmarks/floor_app.py --sidebar /tmp/floor-sidebar
    python benchmarks/first_load.py --baseline-app /tmp/floor --baseline-app /tmp/floor-sidebar --only nginx \\
        --network loopback

The app in DIR loads the charts' bundle as the Estimator does (``dashboard.charts``) and
draws the two figures the Estimator draws for its defaults, read from a file written here
(taken from the Estimator itself, run once by Streamlit's AppTest), then the Estimator's
last element (a download button, which first_load.py waits for), with no other widgets, no
text and no computation. ``first_load.py --baseline-app DIR`` then measures it beside the
dashboard in the same run: its first chart is what Streamlit and the bundle cost on this
machine at this moment, the floor under the dashboard's own. With ``--sidebar``, the app
also draws the dashboard's own sidebar (``dashboard.widgets.sidebar_inputs``: the same widgets,
labels and link handling) before the charts, and computes nothing from it: the floor and the
sidebar's share of the rest. DIR links to this checkout's ``dashboard``, ``calc``, ``static``
and ``.streamlit``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from first_load import CHARTS, PAGE_END, ROOT  # noqa: E402  (the charts and the last element it waits for)

APP = '''"""The floor of a first visit (benchmarks/floor_app.py): the Estimator's two charts{what}."""
import json

import plotly.graph_objects as go
import streamlit as st

from dashboard import charts

charts.preload(){sidebar}
figures = json.load(open("figures.json"))
left, right = st.columns(2)
for where, key in zip((left, right), {keys!r}):
    charts.plotly_chart(where, go.Figure(figures[key]), key=key)
st.download_button("JSON", "{{}}", "floor.json", key={page_end!r})  # the mark of the page drawn
'''


def estimator_figures() -> dict[str, dict]:
    """The Estimator's figures for its defaults, by widget key, as the browser receives them."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=300).run()
    if at.exception:
        raise SystemExit(f"the Estimator failed under AppTest: {at.exception[0].message}")
    out = {}
    for c in at.get("bidi_component"):
        data = json.loads(c.proto.json)
        if "figure" in data:
            out[c.proto.id.rsplit("-", 1)[-1]] = json.loads(data["figure"])
    missing = [k for k in CHARTS if k not in out]
    if missing:
        raise SystemExit(f"the Estimator drew no chart with key {', '.join(missing)}")
    return {k: out[k] for k in CHARTS}


SIDEBAR = """
from dashboard.widgets import sidebar_inputs  # noqa: E402

sidebar_inputs()  # the dashboard's sidebar, drawn; its inputs are not used"""


def write(directory: str, sidebar: bool = False) -> None:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "app.py"), "w") as f:
        f.write(APP.format(keys=CHARTS, page_end=PAGE_END, sidebar=SIDEBAR if sidebar else "",
                           what=" and the dashboard's sidebar" if sidebar else ", nothing else"))
    with open(os.path.join(directory, "figures.json"), "w") as f:
        json.dump(estimator_figures(), f)
    for name in ("dashboard", "calc", "static", ".streamlit"):
        link = os.path.join(directory, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join(ROOT, name), link)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--sidebar", action="store_true", help="also draw the dashboard's sidebar")
    args = parser.parse_args()
    directory = os.path.abspath(args.directory)
    sys.path.insert(0, ROOT)
    os.chdir(ROOT)
    write(directory, args.sidebar)
    print(f"wrote {args.directory}: python benchmarks/first_load.py --baseline-app {args.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
