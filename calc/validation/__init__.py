"""The validation set: real measurements, and the estimate's error on each.

- ``calc.validation.data``: the measured data files (they are the case lists) and their paths.
- ``calc.validation.ledgers``: the committed ledger of every validation spec, so that
  ``python -m calc validate`` reads models instead of building them.
- ``calc.validation.report``: predicted against measured, summaries and saved reports.
- ``calc.validation.records``: the record per caveat kind and its sentences.
"""

from calc.validation.data import (CPU_DATA, CUSTOM_DATA, DATA_DIR, FP16_DATA, GPU_JAX_AUTOTUNE_DATA, GPU_JAX_DATA,
                                  GPU_TF_DATA, GPU_TF_XLA_DATA, MODEL_FILES_DIR, WALK_DATA, case_id, cases,
                                  load_measurements, measured_cases, measured_device, save_measurement)
from calc.validation.records import (CAVEAT_STEPS, NO_CAVEAT, OWN_MODEL_STEPS, CaveatRecord, caveat_record,
                                     gpu_record_sentence, margin_for_runs, overall_record,
                                     record_sentence, records_as_json)
from calc.validation.report import (CPU_REPORT, CUSTOM_REPORT, GPU_JAX_REPORT, GPU_TF_REPORT, GPU_TF_XLA_REPORT,
                                    XLA_DATA, XLA_TARGET, ErrorSummary, Reproducibility, ValidationRow, caveat_records, load_report,
                                    plan_report_path, report_path, reproducibility, reproducibility_json, save_report,
                                    summarize, validate, validate_plan)

__all__ = [
    "CAVEAT_STEPS", "CPU_DATA", "CPU_REPORT", "CUSTOM_DATA", "CUSTOM_REPORT", "DATA_DIR", "FP16_DATA",
    "GPU_JAX_AUTOTUNE_DATA", "GPU_JAX_DATA", "GPU_JAX_REPORT", "GPU_TF_DATA", "GPU_TF_REPORT", "GPU_TF_XLA_DATA",
    "GPU_TF_XLA_REPORT", "MODEL_FILES_DIR", "NO_CAVEAT", "OWN_MODEL_STEPS", "WALK_DATA", "XLA_DATA", "XLA_TARGET",
    "CaveatRecord", "ErrorSummary", "Reproducibility", "ValidationRow", "case_id", "cases", "caveat_record",
    "caveat_records", "gpu_record_sentence", "load_measurements", "load_report", "margin_for_runs",
    "measured_cases", "measured_device", "overall_record", "plan_report_path", "record_sentence",
    "records_as_json", "report_path", "reproducibility", "reproducibility_json", "save_measurement", "save_report",
    "summarize", "validate", "validate_plan",
]
