"""Presentation mode of the Formula page: large type, no sidebar, the terms revealed one at a time."""

from __future__ import annotations

import streamlit as st

from dashboard import lesson
from dashboard.i18n import tr
from dashboard.lesson import Term
from dashboard.state import Inputs

STEP_KEY = "_present_step"

# Static (no user text): hides the sidebar and its toggle, enlarges text and formulas for a projector.
CSS = """<style>
section[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="collapsedControl"],
[data-testid="stSidebarCollapseButton"] {display: none !important;}
.stMainBlockContainer, .block-container {max-width: 1500px; padding-top: 2rem;}
.stMarkdown p, .stMarkdown li {font-size: 1.55rem; line-height: 1.45;}
.katex-display .katex {font-size: 1.7em;}
h1 {font-size: 2.8rem !important;}
@media (max-height: 800px) {
  .stMainBlockContainer, .block-container {padding-top: 1rem;}
  .stMarkdown p, .stMarkdown li {font-size: 1.25rem; line-height: 1.35;}
  .katex-display .katex {font-size: 1.3em;}
  h1 {font-size: 2rem !important;}
  h2 {font-size: 1.5rem !important;}
}
</style>"""


def step(count: int) -> int:
    """How many of the ``count`` terms are shown now (1 to ``count``)."""
    return max(1, min(count, int(st.session_state.get(STEP_KEY, 1))))


def _move(by: int, count: int) -> None:
    st.session_state[STEP_KEY] = max(1, min(count, step(count) + by))


def buttons(count: int) -> None:
    """Previous, next and all: each a click, with the place in the lesson."""
    left, middle, right, place = st.columns([1, 1, 1, 2])
    left.button(tr("Previous"), icon=":material/arrow_back:", key="present_back", on_click=_move, args=(-1, count),
                disabled=step(count) <= 1)
    middle.button(tr("Next term"), icon=":material/arrow_forward:", key="present_next", on_click=_move,
                  args=(1, count), disabled=step(count) >= count, type="primary")
    right.button(tr("Show all"), icon=":material/done_all:", key="present_all", on_click=_move, args=(count, count))
    place.caption(tr("Term {shown} of {count}", shown=step(count), count=count))


def present(terms: list[Term], peak_bytes: int, header: str, closing: list[str], inputs: Inputs) -> None:
    """A lesson on a projector: the controls, the sum so far and the newest term at the top, the earlier
    terms under them, so that nothing the presenter needs falls below the screen, whichever term is
    shown; ``closing`` (Markdown) once every term is."""
    shown = step(len(terms))
    st.header(header)
    st.latex(lesson.symbols_latex(terms))
    buttons(len(terms))
    st.latex(lesson.sum_latex(terms[:shown], peak_bytes if shown == len(terms) else None, inputs))
    for term in reversed(terms[:shown]):
        st.markdown(lesson.term_markdown(term, inputs))
    if shown == len(terms):
        for text in closing:
            st.markdown(text)
