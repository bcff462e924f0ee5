"""The app's pages, and the guard that keeps every visit inside app.py's navigation.

A directory named ``pages/`` beside ``app.py`` puts a fresh Streamlit server in its
legacy multipage mode until some session has run ``st.navigation``
(``PagesManager.uses_pages_directory`` in streamlit/runtime/pages_manager.py, cleared
only by ``st.navigation``). Until then a link straight to ``/compare`` runs
``pages/compare.py`` alone: no page config, Streamlit's generated menu. Every page
calls ``ensure_routed()`` first; on such a run it calls ``st.navigation`` (which ends
the legacy mode for the whole server) and reruns, and the rerun goes through
``app.py`` to the same page.
"""

from __future__ import annotations

import streamlit as st

from dashboard.i18n import set_language, tr

ROUTED_KEY = "_routed_by_app"


def app_pages() -> list:
    return [
        st.Page("pages/estimator.py", title=tr("Estimator"), icon=":material/bar_chart:", url_path="estimator",
                default=True),
        st.Page("pages/layers.py", title=tr("Layers"), icon=":material/layers:", url_path="layers"),
        st.Page("pages/formula.py", title=tr("Formula"), icon=":material/school:", url_path="formula"),
        st.Page("pages/compare.py", title=tr("Compare"), icon=":material/compare_arrows:", url_path="compare"),
        st.Page("pages/validation.py", title=tr("Validation"), icon=":material/target:", url_path="validation"),
    ]


def set_run_language() -> None:
    """This run's language: the sidebar's choice, else the link's."""
    set_language(str(st.session_state.get("lang") or st.query_params.get("lang", "en")))


def mark_routed() -> None:
    """Called by app.py on every run, before the page runs; sets the run's language."""
    st.session_state[ROUTED_KEY] = True
    set_run_language()


def ensure_routed() -> None:
    """Reruns through app.py when this page was started by Streamlit's legacy mode.

    Sets the run's language too: a page can run without app.py (Streamlit's AppTest runs a
    page it switched to by itself), and each run starts in English.
    """
    set_run_language()
    if not st.session_state.get(ROUTED_KEY):
        st.navigation(app_pages(), position="hidden")
        st.rerun()
