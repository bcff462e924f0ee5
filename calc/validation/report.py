"""Predicted against measured: the rows of a validation data file, their summary and the saved report.

``validate`` sets the walk's estimate against every measured case of a data file,
``validate_plan`` XLA's plan (``calc.xla``); ``save_report`` writes what the dashboard
and the CLI read back (``load_report``): per case the error, and a summary with the caveat
records of ``calc.validation.records``.
"""

from __future__ import annotations

import functools
import json
import statistics
from dataclasses import asdict, dataclass, replace
from itertools import repeat
from pathlib import Path
from typing import Any

from calc.catalogue import ModelFile, ModelSpec
from calc.types import Device, TrainingConfig
from calc.validation.data import (CPU_DATA, CUSTOM_DATA, DATA_DIR, GPU_JAX_AUTOTUNE_DATA, GPU_JAX_DATA, GPU_TF_DATA,
                                  GPU_TF_XLA_DATA, measured_cases)
from calc.caveats import NO_CAVEAT
from calc.validation.records import CaveatRecord, margin_for_runs, records_as_json


@dataclass(frozen=True)
class ValidationRow:
    case: str
    spec: ModelSpec | ModelFile
    config: TrainingConfig
    measured_bytes: int
    spread: float
    predicted_bytes: int
    runs_bytes: tuple[int, ...] = ()  # every run's peak (the median is ``measured_bytes``)
    caveats: tuple[str, ...] = ()  # the kinds calc.estimate.spread_caveats names for the step
    rule_of_thumb_bytes: int = 0  # the Neural Network Console blog post's rule, for scale (calc.classic)

    @property
    def relative_error(self) -> float:
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes

    @property
    def error_from_nearest_run(self) -> float:
        """How far the prediction lies outside the measured runs' range, over the median (0 inside)."""
        runs = self.runs_bytes or (self.measured_bytes,)
        low, high = min(runs), max(runs)
        if self.predicted_bytes > high:
            return (self.predicted_bytes - high) / self.measured_bytes
        if self.predicted_bytes < low:
            return (self.predicted_bytes - low) / self.measured_bytes
        return 0.0

    @property
    def margin_for_every_run(self) -> float:
        """The safety margin (share of the memory kept free) under which every run fits.

        A run ``h`` above the estimate fits when the estimate uses at most ``1 - m`` of the
        memory, ``m = h / (1 + h)``; 0 when no run is above the estimate.
        """
        return margin_for_runs(self.runs_bytes or (self.measured_bytes,), self.predicted_bytes)


@dataclass(frozen=True)
class Reproducibility:
    """How far each measured run lies from a reference: the median of its case's other runs
    (TensorFlow against itself), or the case's prediction (the estimate against single runs).
    Cases with at least three runs."""

    cases: int
    runs: int
    runs_beyond: int  # runs more than ``threshold`` from their reference
    cases_with_run_beyond: int
    median_deviation: float  # the median, over runs, of |run / reference - 1|
    threshold: float


def reproducibility(runs_per_case, threshold: float = 0.10, predictions=None) -> Reproducibility:
    """``Reproducibility`` of measured runs, one sequence of peaks (bytes) per case.

    Without ``predictions`` each run is set against the median of its case's other runs: the
    floor under any estimate's error on a step measured afresh, since a prediction equal to that
    median still misses a run that lies ``threshold`` from it. With ``predictions`` (bytes, one
    per case) each run is set against its case's prediction instead, on the same footing.
    """
    deviations, cases, flagged = [], 0, 0
    for runs, predicted in zip(map(list, runs_per_case), repeat(None) if predictions is None else predictions):
        if len(runs) < 3:
            continue
        cases += 1
        if predicted is None:
            own = [abs(run / statistics.median(runs[:i] + runs[i + 1:]) - 1) for i, run in enumerate(runs)]
        else:
            own = [abs(predicted / run - 1) for run in runs]
        deviations += own
        flagged += any(d > threshold for d in own)
    if not deviations:
        raise ValueError("No case with three or more runs.")
    return Reproducibility(cases, len(deviations), sum(d > threshold for d in deviations), flagged,
                           statistics.median(deviations), threshold)


def reproducibility_json(rows: list[ValidationRow], against_prediction: bool = False) -> dict[str, Any] | None:
    """``reproducibility`` of the rows' runs as JSON (against each row's prediction when
    ``against_prediction``); None when no case has three runs (a GPU slice)."""
    predictions = [r.predicted_bytes for r in rows] if against_prediction else None
    try:
        return asdict(reproducibility((r.runs_bytes for r in rows), predictions=predictions))
    except ValueError:
        return None


def validate(path: Path = CPU_DATA, profile_for=None, part: tuple[int, int] = (0, 1)) -> list[ValidationRow]:
    """Estimates every measured case of a data file. ``profile_for(spec)`` returns a profile
    (default: ``calc.profiles.get_profile``; ``python -m calc validate`` passes the committed
    ledgers, ``calc.validation.ledgers.committed_profiles``). ``part=(i, n)``: every n-th
    case from the i-th only."""
    from calc.classic import nnc_bytes_for_profile
    from calc.estimate import estimate_memory, spread_caveats

    if profile_for is None:
        from calc.profiles import get_profile as profile_for
    rows = []
    index, parts = part
    for case, spec, config in measured_cases(path)[index::parts]:
        profile = profile_for(spec)
        predicted = estimate_memory(profile, config).peak_bytes
        # One run per case (the GPU slice) has no spread.
        rows.append(ValidationRow(case["case"], spec, config, case["peak_bytes"], case.get("spread", 0.0), predicted,
                                  tuple(case.get("peaks_bytes", ())), tuple(spread_caveats(profile, config)),
                                  nnc_bytes_for_profile(profile, config.per_replica_batch)))
    return rows


def _validate_part(path: Path, index: int, parts: int) -> list[ValidationRow]:
    from calc.validation.ledgers import committed_profiles

    return validate(path, committed_profiles(), (index, parts))


def validate_committed(path: Path = CPU_DATA, jobs: int = 1) -> list[ValidationRow]:
    """``validate`` on the committed ledgers, in ``jobs`` processes; the rows in the file's order."""
    if jobs <= 1:
        return _validate_part(path, 0, 1)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        parts = list(pool.map(_validate_part, [path] * jobs, range(jobs), [jobs] * jobs))
    rows: list[ValidationRow] = []
    for i in range(max(map(len, parts))):
        rows += [part[i] for part in parts if i < len(part)]
    return rows


# The XLA data files the plan is scored on: TensorFlow's XLA step (jit_compile=True) and
# Keras's JAX backend with XLA's autotuner off and on, all on an H100.
XLA_DATA = (GPU_TF_XLA_DATA, GPU_JAX_DATA, GPU_JAX_AUTOTUNE_DATA)
XLA_TARGET = "h100-80"


def validate_plan(path: Path = GPU_TF_XLA_DATA, gpu_key: str = XLA_TARGET, plan_for=None) -> list[ValidationRow]:
    """XLA's plan (``calc.xla``) for every measured case of an XLA data file.

    ``plan_for(spec, config, gpu_key)`` returns an ``XlaPlan`` (default: ``compute_plan``,
    from the shipped plans or compiled once).
    """
    if plan_for is None:
        from calc.xla import compute_plan as plan_for
    rows = []
    for case, spec, config in measured_cases(path):
        config = replace(config, device=Device.GPU)
        predicted = plan_for(spec, config, gpu_key).peak_bytes
        rows.append(ValidationRow(case["case"], spec, config, case["peak_bytes"], case.get("spread", 0.0) or 0.0,
                                  predicted, tuple(case.get("peaks_bytes", ()))))
    return rows


def plan_report_path(data: Path) -> Path:
    """Where ``python -m calc validate --step xla --data DATA --save`` writes its report."""
    return data.with_name(data.stem + "_plan_report.json")

@dataclass(frozen=True)
class ErrorSummary:
    cases: int
    median_abs: float
    p90_abs: float
    max_abs: float
    under_count: int
    worst_under: float
    worst_over: float = 0.0  # the largest over-prediction (0 when none)
    within_runs: int = 0  # predictions inside their case's range of measured runs
    median_from_runs: float = 0.0  # |error_from_nearest_run|
    max_from_runs: float = 0.0


def summarize(rows: list[ValidationRow]) -> ErrorSummary:
    errors = sorted(abs(r.relative_error) for r in rows)
    if not errors:
        raise ValueError("No measured cases to summarize.")
    unders = [r.relative_error for r in rows if r.relative_error < 0]
    p90 = errors[min(len(errors) - 1, int(round(0.9 * (len(errors) - 1))))]
    return ErrorSummary(
        cases=len(errors),
        median_abs=statistics.median(errors),
        p90_abs=p90,
        max_abs=errors[-1],
        under_count=len(unders),
        worst_under=min(unders, default=0.0),
        worst_over=max(0.0, max(r.relative_error for r in rows)),
        within_runs=sum(r.error_from_nearest_run == 0.0 for r in rows),
        median_from_runs=statistics.median(abs(r.error_from_nearest_run) for r in rows),
        max_from_runs=max(abs(r.error_from_nearest_run) for r in rows),
    )


CPU_REPORT = DATA_DIR / "validation_cpu_report.json"


def report_path(data: Path) -> Path:
    """Where ``python -m calc validate --data DATA --save`` writes its report."""
    return CPU_REPORT if data == CPU_DATA else data.with_name(data.stem + "_report.json")


GPU_TF_REPORT = report_path(GPU_TF_DATA)
GPU_TF_XLA_REPORT = report_path(GPU_TF_XLA_DATA)
GPU_JAX_REPORT = report_path(GPU_JAX_DATA)
CUSTOM_REPORT = report_path(CUSTOM_DATA)


def caveat_records(rows: list[ValidationRow]) -> dict[str, CaveatRecord]:
    """Per caveat kind of ``calc.estimate.spread_caveats`` (and ``NO_CAVEAT``), the measured record.

    A case with several kinds counts under each of them.
    """
    groups: dict[str, list[ValidationRow]] = {}
    for r in rows:
        for kind in r.caveats or (NO_CAVEAT,):
            groups.setdefault(kind, []).append(r)
    return {kind: CaveatRecord(len(g), min(r.relative_error for r in g), max(r.relative_error for r in g),
                               max(r.margin_for_every_run for r in g))
            for kind, g in sorted(groups.items())}


def save_report(rows: list[ValidationRow], path: Path = CPU_REPORT) -> None:
    """Writes predicted vs measured per case and the summary (read by the dashboard)."""
    s = summarize(rows)
    path.write_text(json.dumps({
        "summary": {"cases": s.cases, "median_abs_error": s.median_abs, "p90_abs_error": s.p90_abs,
                    "max_abs_error": s.max_abs, "under_predicted": s.under_count,
                    "worst_under_prediction": s.worst_under,
                    "worst_over_prediction": s.worst_over,
                    "within_measured_runs": s.within_runs, "median_abs_error_from_nearest_run": s.median_from_runs,
                    "max_abs_error_from_nearest_run": s.max_from_runs,
                    "caveats": records_as_json(caveat_records(rows)),
                    "reproducibility": reproducibility_json(rows),
                    "estimate_against_runs": reproducibility_json(rows, against_prediction=True)},
        "cases": [{"case": r.case, "measured_bytes": r.measured_bytes, "predicted_bytes": r.predicted_bytes,
                   "relative_error": r.relative_error, "measured_spread": r.spread,
                   "runs_bytes": list(r.runs_bytes), "caveats": list(r.caveats)} for r in rows],
    }, indent=1) + "\n")


def load_report(path: Path = CPU_REPORT) -> dict[str, Any]:
    """The committed report; raises ``OSError``/``ValueError`` when missing or damaged."""
    return json.loads(path.read_text())


@functools.cache
def walk_to_xla_range() -> tuple[float, float, int]:
    """(lowest, highest, cases) of TensorFlow's XLA step's peak over the graph-executor walk's prediction, on the
    steps measured on an H100 (the walk's report, ``GPU_TF_XLA_REPORT``): what XLA's step may be, told
    from the walk alone, before its plan is compiled. (1, 1, 0) without the report."""
    try:
        ratios = [max(c.get("runs_bytes") or [c["measured_bytes"]]) / c["predicted_bytes"]
                  for c in load_report(GPU_TF_XLA_REPORT)["cases"]]
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return 1.0, 1.0, 0
    if not ratios:
        return 1.0, 1.0, 0
    return min(ratios), max(ratios), len(ratios)
