"""Keras training memory calculator: routing only."""

import streamlit as st

from dashboard.routes import app_pages, mark_routed

st.set_page_config(page_title="Keras training memory", page_icon=":material/memory:", layout="wide")
mark_routed()
st.navigation(app_pages()).run()
