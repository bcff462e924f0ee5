"""What every page starts with: the inputs, the profile (cached), or a clear error."""

from __future__ import annotations

import streamlit as st

from calc.types import ModelProfile
from dashboard.loaders import load_profile, spec_for
from dashboard.state import Inputs
from dashboard.widgets import sidebar_inputs


def inputs_and_profile() -> tuple[Inputs, ModelProfile]:
    inputs = sidebar_inputs()
    try:
        spec = spec_for(inputs.model, inputs.image_size, inputs.train_mode == "frozen_backbone")
        with st.spinner(f"Building {spec.name} at {spec.height}x{spec.width} once (weights=None)…"):
            profile = load_profile(spec)
    except ValueError as exc:
        st.error(str(exc))
        st.stop()
    return inputs, profile
