"""Plain-dict (JSON) forms of ``ModelSpec`` (or ``ModelFile``, ``HubSpec``) and ``TrainingConfig``.

Used by the measurement subprocess, the validation data and the command line, so that
one dictionary describes one case everywhere.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from calc.catalogue import ModelFile, ModelSpec, make_spec
from calc.hub import HubSpec, make_hub_spec
from calc.types import OptimizerOptions, TrainingConfig


def spec_to_dict(spec: ModelSpec | ModelFile | HubSpec) -> dict[str, Any]:
    if isinstance(spec, HubSpec):
        hub = asdict(spec)
        if not hub["quantize"]:  # named only where the model is quantized
            del hub["quantize"]
        return {"hub": hub}
    return {"file": spec.path} if isinstance(spec, ModelFile) else asdict(spec)


def plan_spec_from_dict(data: dict[str, Any]) -> ModelSpec | ModelFile | HubSpec:
    """A spec XLA's plan takes: a KerasHub model's too (``spec_from_dict`` for the others)."""
    if "hub" in data:
        hub = data["hub"]
        return make_hub_spec(str(hub["preset"]), int(hub["sequence_length"]) or None, int(hub["lora_rank"]),
                             str(hub["dtype"]), int(hub["classes"]), str(hub.get("quantize", "")))
    return spec_from_dict(data)


def spec_from_dict(data: dict[str, Any]) -> ModelSpec | ModelFile:
    if "file" in data:
        return ModelFile(str(data["file"]))
    return make_spec(
        data["name"],
        height=data["height"],
        width=data["width"],
        channels=data.get("channels", 3),
        include_top=data.get("include_top", True),
        classes=data.get("classes", 1000),
    )


def config_to_dict(config: TrainingConfig) -> dict[str, Any]:
    data = asdict(config)
    for key in ("optimizer", "precision", "train_mode", "device"):
        data[key] = getattr(config, key).value
    for key in ("model_parallel", "hosts"):  # a mesh's figures, named only where they are not one's
        if data[key] == 1:
            del data[key]
    return data


def config_from_dict(data: dict[str, Any]) -> TrainingConfig:
    data = dict(data)
    data["optimizer_options"] = OptimizerOptions(**data.get("optimizer_options", {}))
    return TrainingConfig(**data)
