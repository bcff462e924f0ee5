"""Keras training memory calculator: routing only."""

import streamlit as st

st.set_page_config(page_title="Keras training memory", page_icon="🧮", layout="wide")
page = st.navigation(
    [
        st.Page("pages/estimator.py", title="Estimator", icon="📊", default=True),
        st.Page("pages/layers.py", title="Layers", icon="🧱"),
        st.Page("pages/formula.py", title="Formula", icon="🧑‍🏫"),
        st.Page("pages/compare.py", title="Compare", icon="⚖️"),
        st.Page("pages/validation.py", title="Validation", icon="🎯"),
    ]
)
page.run()
