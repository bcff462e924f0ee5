"""Streamlit glue: shared state, cached loaders and pure Plotly figure builders."""
