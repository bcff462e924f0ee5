"""How the estimate fared per caveat kind (the words for each kind are in ``calc.caveats``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from calc.caveats import CAVEAT_STEPS, NO_CAVEAT, OWN_MODEL_STEPS, gpu_record_sentence, record_sentence


def margin_for_runs(runs_bytes, predicted_bytes: int) -> float:
    """``ValidationRow.margin_for_every_run`` for one case's runs and its prediction."""
    above = max(max(runs_bytes) / predicted_bytes - 1, 0.0)
    return above / (1 + above)


@dataclass(frozen=True)
class CaveatRecord:
    """How the estimate fared on the measured cases that carry one caveat kind."""

    cases: int
    lowest_error: float  # against the median run
    highest_error: float
    margin_for_every_run: float  # the safety margin that covers every run of every case


def records_as_json(records: dict[str, CaveatRecord]) -> dict[str, dict[str, Any]]:
    """``caveat_records``' result as the report and ``validate --json`` write it."""
    return {kind: asdict(record) for kind, record in records.items()}


def overall_record(report: dict[str, Any]) -> CaveatRecord | None:
    """The record of every case in a saved report (for a file: the own-model slice's,
    ``CUSTOM_REPORT``); None when the report has no cases."""
    try:
        rows = [(c["relative_error"], c["predicted_bytes"], c.get("runs_bytes") or [c["measured_bytes"]])
                for c in report["cases"]]
    except (KeyError, TypeError):
        return None
    if not rows:
        return None
    return CaveatRecord(len(rows), min(e for e, _, _ in rows), max(e for e, _, _ in rows),
                        max(margin_for_runs(runs, predicted) for _, predicted, runs in rows))


def caveat_record(report: dict[str, Any], kind: str) -> CaveatRecord | None:
    """One kind's record from a saved report; None when the report has none for it."""
    try:
        return CaveatRecord(**report["summary"]["caveats"][kind])
    except (KeyError, TypeError):
        return None




__all__ = ["CAVEAT_STEPS", "NO_CAVEAT", "OWN_MODEL_STEPS", "CaveatRecord", "caveat_record",
           "gpu_record_sentence", "margin_for_runs", "overall_record", "record_sentence", "records_as_json"]
