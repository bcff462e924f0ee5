"""Cases drawn and predicted before they are measured: ``validation/planned.json``.

``tools/sample_holdout.py --save`` adds drawn cases with the engine's prediction; they are
committed before ``tools/measure_validation.py`` measures them into their set's data file,
so that a holdout's predictions are on record before its measurements. The predictions of
earlier holdouts, made the same way, are in ``validation/predictions.csv``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from calc.catalogue import ModelFile, ModelSpec, make_spec
from calc.requests import config_from_dict, config_to_dict, spec_from_dict, spec_to_dict
from calc.types import Optimizer, OptimizerOptions, Precision, TrainingConfig, TrainMode
from calc.validation.data import case_id

PLANNED = Path(__file__).resolve().parents[2] / "validation" / "planned.json"


def make_case(name: str, size: int | tuple[int, int], batch: int, optimizer: str, precision: str = "float32",
              mode: str = "all", last_n: int = 0, accum: int = 1, channels: int = 3, classes: int = 1000,
              **options: bool) -> tuple[ModelSpec, TrainingConfig]:
    """One catalogue case; ``size`` is a square side or a (height, width) pair. A frozen
    backbone gets a new head (``include_top=False``); ``head=True`` asks for one in any mode."""
    height, width = (size, size) if isinstance(size, int) else size
    head = options.pop("head", False)
    spec = make_spec(name, height=height, width=width, channels=channels, classes=classes,
                     include_top=(mode == "all" and not head))
    config = TrainingConfig(batch_size=batch, optimizer=Optimizer(optimizer), precision=Precision(precision),
                            train_mode=TrainMode(mode),
                            last_n_layers=last_n, gradient_accumulation_steps=accum,
                            optimizer_options=OptimizerOptions(**options))
    return spec, config


def load_planned(path: Path = PLANNED) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return json.loads(path.read_text())["cases"]


def drawn_seed(entry: dict[str, Any]) -> int | None:
    """The ``--seed`` of the ``tools/sample_holdout.py`` draw that planned ``entry``, if it says one."""
    found = re.search(r"--seed (\d+)\b", entry.get("drawn_by", ""))
    return int(found.group(1)) if found else None


def _in_set(entry: dict[str, Any], validation_set: str, seed: int | None) -> bool:
    return entry["set"] == validation_set and (seed is None or drawn_seed(entry) == seed)


def planned_predictions(validation_set: str, path: Path = PLANNED, seed: int | None = None) -> dict[str, int]:
    """Case id -> the peak bytes predicted for it before it was measured, for one set (and, with
    ``seed``, only the draw made with that seed: one holdout)."""
    return {c["case"]: c["predicted_peak_bytes"] for c in load_planned(path) if _in_set(c, validation_set, seed)}


def planned_cases(validation_set: str, path: Path = PLANNED,
                  seed: int | None = None) -> list[tuple[ModelSpec | ModelFile, TrainingConfig]]:
    """The planned cases of one set, as (spec, config); with ``seed``, only that draw's.

    Sets: ``cpu`` and ``custom`` (the walk on this machine's CPU), ``gpu`` (the walk of
    TensorFlow's graph executor on a GPU) and ``gpu_xla`` (XLA's plan of the step Keras
    compiles on a GPU).
    """
    return [(spec_from_dict(c["spec"]), config_from_dict(c["config"])) for c in load_planned(path)
            if _in_set(c, validation_set, seed)]


def add_planned(entries: list[tuple[ModelSpec | ModelFile, TrainingConfig, int, str]], validation_set: str,
                path: Path = PLANNED) -> None:
    """Adds (spec, config, predicted peak bytes, why drawn) entries to one set, replacing a case planned before
    in that set (one step can be planned in several sets, each with its own prediction)."""
    planned = load_planned(path)
    new = [{"case": case_id(spec, config), "set": validation_set, "spec": spec_to_dict(spec),
            "config": config_to_dict(config), "predicted_peak_bytes": predicted, "drawn_by": drawn_by}
           for spec, config, predicted, drawn_by in entries]
    ids = {(validation_set, e["case"]) for e in new}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cases": [c for c in planned if (c["set"], c["case"]) not in ids] + new}, indent=1) + "\n")
