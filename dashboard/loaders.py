"""Cached loaders: profiles (plain data) and validation results. No Keras model is kept."""

from __future__ import annotations

import streamlit as st

from calc import profiles
from calc.catalogue import ModelSpec, make_spec
from calc.profiles import get_profile
from calc.types import ModelProfile
from calc.validation import CAVEAT_STEPS, CaveatRecord
from calc.workers.builds import BuildWorker

# The server never imports TensorFlow: Keras builds happen in one child process that
# is replaced when it grows and exits when idle (calc/workers/builds.py says why).
profiles.use_build_worker(BuildWorker())


@st.cache_resource(max_entries=64, show_spinner=False)
def load_profile(spec: ModelSpec) -> ModelProfile:
    """A catalogue model's ledger; the first call for a model builds it once.

    A profile is an immutable frozen dataclass, so one shared object serves every
    session (no copy per rerun) and the engine's plan cache hits on it at once.
    """
    return get_profile(spec)


def spec_for(model: str, image_size: int, frozen: bool) -> ModelSpec:
    return make_spec(model, image_size, include_top=not frozen)


@st.cache_data(show_spinner=False)
def load_validation() -> dict:
    """The committed validation report: predicted versus measured per case, and the summary."""
    from calc.validation import load_report

    return load_report()


def accuracy_line() -> str:
    """One line on how accurate the engine is, from the committed validation report."""
    try:
        s = load_validation()["summary"]
    except (ValueError, OSError, KeyError) as exc:  # missing or damaged: say so, do not fail
        return f"Validation report unavailable ({exc})."
    return (f"Accuracy on {s['cases']} measured training steps (TensorFlow CPU allocator peak): median error "
            f"{s['median_abs_error']:.1%}, worst {s['max_abs_error']:.1%}; under-predicted in "
            f"{s['under_predicted']} cases, at worst by {-s['worst_under_prediction']:.1%}.")


def caveat_records(device: str = "cpu") -> dict[str, CaveatRecord]:
    """The measured record of the validation cases of each ``calc.estimate.spread_caveats`` kind:
    the CPU set, or for ``device="gpu"`` the H100 slice without XLA ({} when the report is
    unavailable or has none)."""
    from calc.validation import caveat_record

    try:
        report = load_validation() if device == "cpu" else load_gpu_slices()[0]
    except (ValueError, OSError):
        return {}
    return {kind: record for kind in CAVEAT_STEPS if (record := caveat_record(report, kind)) is not None}


def noise_line() -> str:
    """How the error compares with the spread of the measured runs themselves."""
    try:
        s = load_validation()["summary"]
        within, median, worst = (s["within_measured_runs"], s["median_abs_error_from_nearest_run"],
                                 s["max_abs_error_from_nearest_run"])
    except (ValueError, OSError, KeyError) as exc:
        return f"Validation report unavailable ({exc})."
    line = (f"Each case was measured three times in fresh processes, and the runs differ (the allocator's "
            f"state before the step): {within} of {s['cases']} predictions lie within their case's runs; "
            f"off the nearest run by a median {median:.1%}, at most {worst:.1%}.")
    repro, single = s.get("reproducibility"), s.get("estimate_against_runs")
    if repro and single:
        line += (f" TensorFlow against itself: each run lies a median {repro['median_deviation']:.1%} from the "
                 f"median of its case's other runs, and {repro['runs_beyond']} of {repro['runs']} runs "
                 f"({repro['runs_beyond'] / repro['runs']:.1%}, in {repro['cases_with_run_beyond']} cases) lie more "
                 f"than {repro['threshold']:.0%} from it, so no estimate can promise less on a step measured afresh; "
                 f"the estimate against the same runs: a median {single['median_deviation']:.1%}, and "
                 f"{single['runs_beyond']} runs ({single['runs_beyond'] / single['runs']:.1%}) more than "
                 f"{single['threshold']:.0%} off.")
    return line


@st.cache_data(show_spinner=False)
def load_gpu_slices() -> tuple[dict, dict]:
    """The reports of TensorFlow on an H100: its graph executor, and XLA."""
    from calc.validation import GPU_TF_REPORT, GPU_TF_XLA_REPORT, load_report

    return load_report(GPU_TF_REPORT), load_report(GPU_TF_XLA_REPORT)


@st.cache_data(show_spinner=False)
def load_own_models() -> dict:
    """The report of the own-model slice: saved files that are not Keras applications."""
    from calc.validation import CUSTOM_REPORT, load_report

    return load_report(CUSTOM_REPORT)


def own_model_record() -> CaveatRecord | None:
    """How the estimate fared on the own-model slice; None when its report is unavailable."""
    from calc.validation import overall_record

    try:
        return overall_record(load_own_models())
    except (OSError, ValueError):
        return None


def slice_line(summary: dict, what: str) -> str:
    """One line on a GPU slice's report: how far the estimate was from what was measured."""
    return (f"{what}: {summary['cases']} steps, median error {summary['median_abs_error']:.1%}, worst "
            f"{summary['max_abs_error']:.1%}; under-predicted in {summary['under_predicted']}, at worst by "
            f"{-summary['worst_under_prediction']:.1%}.")


@st.cache_data(show_spinner=False)
def load_plan_report() -> dict:
    """The report of XLA's plan against TensorFlow's XLA step on an H100; OSError until it is saved."""
    from calc.validation import GPU_TF_XLA_DATA, load_report, plan_report_path

    return load_report(plan_report_path(GPU_TF_XLA_DATA))


def plan_report_summary() -> dict | None:
    try:
        return load_plan_report()["summary"]
    except (ImportError, OSError, ValueError, KeyError):
        return None


def xla_line(step: str = "graph") -> str:
    """What the shown numbers model, and how far measured GPU steps were from them.

    ``step``: "graph", the graph-executor walk is shown; "xla", XLA's plan is.
    """
    if step == "xla":
        head = ("This is XLA's own memory plan of the compiled step (`jit_compile=True`, Keras 3's default on a "
                "GPU): Keras's `train_step` compiled with XLA for this card, without a GPU, and the buffers XLA "
                "assigns it read from the compiled program")
        try:
            plan = plan_report_summary() or {}
            return (f"{head}. Measured with TensorFlow's XLA step on an H100: on {plan['cases']} steps the plan was "
                    f"off by a median {plan['median_abs_error']:.1%}, from {plan['worst_under_prediction']:+.1%} to "
                    f"{plan['worst_over_prediction']:+.1%}.")
        except (KeyError, TypeError, ValueError):
            return f"{head}. No measured report scores the plan yet; the Validation page lists the XLA steps measured."
    head = ("This predicts the step on TensorFlow's graph executor, `model.compile(..., jit_compile=False)`. "
            "On a GPU, Keras 3's default `jit_compile=\"auto\"` compiles the step with XLA, which fuses "
            "elementwise chains and plans its own buffers")
    try:
        executor, xla = (report["summary"] for report in load_gpu_slices())
    except (ValueError, OSError, KeyError) as exc:
        return f"{head}. (The GPU measurements are unavailable: {exc}.)"
    return (f"{head}. Measured with TensorFlow on an H100, with GPU kernels: on {executor['cases']} steps without "
            f"XLA this estimate was off by a median {executor['median_abs_error']:.0%}, from "
            f"{executor['worst_under_prediction']:+.0%} to {executor['worst_over_prediction']:+.0%}; on "
            f"{xla['cases']} steps with XLA by a median {xla['median_abs_error']:.0%}, from "
            f"{xla['worst_under_prediction']:+.0%} to {xla['worst_over_prediction']:+.0%}. "
            "Pass `jit_compile=False` to get the step predicted here; the sidebar's XLA step shows XLA's own plan "
            "where one applies (a Keras application, GPU kernels, a GPU preset).")
