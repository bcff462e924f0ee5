"""Cached loaders: profiles (plain data) and validation results. No Keras model is kept."""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from calc.catalogue import ModelSpec, make_spec
from calc.profiles import get_profile
from calc.types import ModelProfile
from calc.validation import CAVEAT_STEPS, CaveatRecord
from calc.validation.data import HUB_GPU_DATA
from dashboard.i18n import tr



@st.cache_resource(max_entries=64, show_spinner=False)
def load_profile(spec: ModelSpec) -> ModelProfile:
    """A catalogue model's ledger; the first call for a model builds it once.

    A profile is an immutable frozen dataclass, so one shared object serves every
    session (no copy per rerun) and the engine's plan cache hits on it at once. The server never
    builds one itself (it never imports TensorFlow): its build workers do (``calc.service``).
    """
    return get_profile(spec, build=False)


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
        return tr("Validation report unavailable ({error}).", error=exc)
    return tr("Accuracy on {cases} measured training steps (TensorFlow CPU allocator peak): median error "
              "{median:.1%}, worst {worst:.1%}; under-predicted in {under} cases, at worst by {worst_under:.1%}.",
              cases=s["cases"], median=s["median_abs_error"], worst=s["max_abs_error"], under=s["under_predicted"],
              worst_under=-s["worst_under_prediction"])


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
        return tr("Validation report unavailable ({error}).", error=exc)
    line = tr("Each case was measured three times in fresh processes, and the runs differ (the allocator's "
              "state before the step): {within} of {cases} predictions lie within their case's runs; "
              "off the nearest run by a median {median:.1%}, at most {worst:.1%}.",
              within=within, cases=s["cases"], median=median, worst=worst)
    repro, single = s.get("reproducibility"), s.get("estimate_against_runs")
    if repro and single:
        line += " " + tr(
            "TensorFlow against itself: each run lies a median {deviation:.1%} from the median of its case's other "
            "runs, and {beyond} of {runs} runs ({beyond_share:.1%}, in {cases_beyond} cases) lie more than "
            "{threshold:.0%} from it, so no estimate can promise less on a step measured afresh; the estimate "
            "against the same runs: a median {estimate_deviation:.1%}, and {estimate_beyond} runs "
            "({estimate_beyond_share:.1%}) more than {estimate_threshold:.0%} off.",
            deviation=repro["median_deviation"], beyond=repro["runs_beyond"], runs=repro["runs"],
            beyond_share=repro["runs_beyond"] / repro["runs"], cases_beyond=repro["cases_with_run_beyond"],
            threshold=repro["threshold"], estimate_deviation=single["median_deviation"],
            estimate_beyond=single["runs_beyond"], estimate_beyond_share=single["runs_beyond"] / single["runs"],
            estimate_threshold=single["threshold"])
    return line


@st.cache_data(show_spinner=False)
def load_gpu_slices() -> tuple[dict, dict]:
    """The reports of TensorFlow on an H100: its graph executor, and XLA."""
    from calc.validation import GPU_TF_REPORT, GPU_TF_XLA_REPORT, load_report

    return load_report(GPU_TF_REPORT), load_report(GPU_TF_XLA_REPORT)


@st.cache_data(show_spinner=False)
def hub_predictions() -> dict[str, int]:
    """The KerasHub steps predicted for a GPU and on record before they are measured (set ``hub_gpu`` of
    ``validation/planned.json``, ``tools/measure_gpu_hub.py``): case -> XLA's planned peak."""
    from calc.validation.planned import planned_predictions

    return planned_predictions("hub_gpu")


HUB_MEASURED = (HUB_GPU_DATA.name, "hub_gpu_h200_noautotune.json")  # in calc/data: autotuner on, off


@st.cache_data(show_spinner=False)
def hub_measurements() -> tuple[dict[str, int], dict[str, int]]:
    """The KerasHub steps measured on an H200 (``tools/measure_gpu_hub.py``): case -> JAX's peak of the
    process, with XLA's autotuner on (as a user runs), and with it off."""
    from calc.validation import DATA_DIR

    out = []
    for name in HUB_MEASURED:
        cases = json.loads((DATA_DIR / name).read_text())["cases"]
        out.append({c["case"]: int(c["peak_bytes"]) for c in cases if c.get("peak_bytes")})
    return out[0], out[1]


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
    return tr("{what}: {cases} steps, median error {median:.1%}, worst {worst:.1%}; under-predicted in {under}, "
              "at worst by {worst_under:.1%}.", what=what, cases=summary["cases"], median=summary["median_abs_error"],
              worst=summary["max_abs_error"], under=summary["under_predicted"],
              worst_under=-summary["worst_under_prediction"])


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


def xla_line(step: str = "graph", hub: bool = False) -> str:
    """What the shown numbers model, and how far measured GPU steps were from them.

    ``step``: "graph", the graph-executor walk is shown; "xla", XLA's plan is; ``hub``: of a KerasHub model.
    """
    if hub:
        return tr("This is XLA's own memory plan of Keras's `train_step` on the JAX backend, compiled with XLA for "
                  "this card without a GPU. On an H200, 8 KerasHub steps ran as a user runs them: 5 "
                  "peaked within 0.7 % of their plan; in 3, each training LoRA on a text model, the step compiled with "
                  "XLA's autotuner on took one more buffer the size of its logits, 5 % to 20 % above the plan, and "
                  "with the autotuner off those were within 0.4 % (Validation page).")
    if step == "xla":
        try:
            plan = plan_report_summary() or {}
            return tr("This is XLA's own memory plan of the compiled step (`jit_compile=True`, Keras 3's default on a "
                      "GPU): Keras's `train_step` compiled with XLA for this card, without a GPU, and the buffers XLA "
                      "assigns it read from the compiled program. Measured with TensorFlow's XLA step on an H100: on "
                      "{cases} steps the plan was off by a median {median:.1%}, from {under:+.1%} to {over:+.1%}.",
                      cases=plan["cases"], median=plan["median_abs_error"], under=plan["worst_under_prediction"],
                      over=plan["worst_over_prediction"])
        except (KeyError, TypeError, ValueError):
            return tr("This is XLA's own memory plan of the compiled step (`jit_compile=True`, Keras 3's default on a "
                      "GPU): Keras's `train_step` compiled with XLA for this card, without a GPU, and the buffers XLA "
                      "assigns it read from the compiled program. No measured report scores the plan yet; the "
                      "Validation page lists the XLA steps measured.")
    try:
        executor, xla = (report["summary"] for report in load_gpu_slices())
    except (ValueError, OSError, KeyError) as exc:
        return tr("This predicts the step on TensorFlow's graph executor, `model.compile(..., jit_compile=False)`. "
                  "On a GPU, Keras 3's default `jit_compile=\"auto\"` compiles the step with XLA, which fuses "
                  "elementwise chains and plans its own buffers. (The GPU measurements are unavailable: {error}.)",
                  error=exc)
    return tr("This predicts the step on TensorFlow's graph executor, `model.compile(..., jit_compile=False)`. "
              "On a GPU, Keras 3's default `jit_compile=\"auto\"` compiles the step with XLA, which fuses "
              "elementwise chains and plans its own buffers. Measured with TensorFlow on an H100, with GPU kernels: "
              "on {executor_cases} steps without XLA this estimate was off by a median {executor_median:.0%}, from "
              "{executor_under:+.0%} to {executor_over:+.0%}; on {xla_cases} steps with XLA by a median "
              "{xla_median:.0%}, from {xla_under:+.0%} to {xla_over:+.0%}. Pass `jit_compile=False` to get the step "
              "predicted here; the sidebar's XLA step shows XLA's own plan where one applies (a Keras application, "
              "GPU kernels, a GPU preset).",
              executor_cases=executor["cases"], executor_median=executor["median_abs_error"],
              executor_under=executor["worst_under_prediction"], executor_over=executor["worst_over_prediction"],
              xla_cases=xla["cases"], xla_median=xla["median_abs_error"], xla_under=xla["worst_under_prediction"],
              xla_over=xla["worst_over_prediction"])


@st.cache_data(show_spinner=False)
def measured_peaks(path: Path) -> dict[tuple[str, str], int]:
    """A validation data file's measured peaks: (case name, kernels) -> bytes, read once."""
    from calc.validation.data import measured_cases

    return {(case["case"], config.device.value): int(case["peak_bytes"]) for case, _, config in measured_cases(path)}


@st.cache_resource(show_spinner=False)
def load_hand_example() -> tuple[ModelProfile, int] | None:
    """The Formula page's small model (``dashboard.lesson.HAND_MODEL``): its committed ledger and its
    measured CPU peak (``validation_custom_cpu.json``); None where the ledgers do not fit this Keras."""
    from calc.catalogue import ModelFile
    from calc.validation.data import CUSTOM_DATA
    from calc.validation.ledgers import read_ledgers
    from dashboard.lesson import HAND_CASE, HAND_MODEL

    ledgers = read_ledgers()
    profile = ledgers.profile(ModelFile(HAND_MODEL)) if ledgers is not None and ledgers.usable() else None
    peak = measured_peaks(CUSTOM_DATA).get((HAND_CASE, "cpu"))
    return None if profile is None or peak is None else (profile, peak)
