"""A ``ModelProfile``'s JSON form: the disk cache, the shipped profiles and the children's answers.

Plain data both ways; reading checks the format and converts every field, so a stale
or damaged file is a ``ValueError``, never a half-built profile.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from calc.types import LayerStats, ModelProfile

PROFILE_FORMAT = 2  # bump when the ledger the adapter writes changes


def profile_to_dict(profile: ModelProfile) -> dict[str, Any]:
    """The profile as JSON-able data, stamped with ``PROFILE_FORMAT``."""
    data = asdict(profile)
    data["format"] = PROFILE_FORMAT
    return data


def profile_from_dict(data: dict[str, Any]) -> ModelProfile:
    """Rebuilds a profile from its JSON form; raises ``ValueError`` on malformed data."""
    try:
        if data.get("format") != PROFILE_FORMAT:
            raise ValueError(f"unsupported profile format {data.get('format')!r}")
        layers = tuple(
            LayerStats(
                name=str(layer["name"]),
                layer_type=str(layer["layer_type"]),
                input_ids=tuple(int(i) for i in layer["input_ids"]),
                output_ids=tuple(int(i) for i in layer["output_ids"]),
                output_shapes=tuple(tuple(int(d) for d in s) for s in layer["output_shapes"]),
                trainable_weight_elements=tuple(int(e) for e in layer["trainable_weight_elements"]),
                non_trainable_weight_elements=tuple(int(e) for e in layer["non_trainable_weight_elements"]),
                activation=str(layer["activation"]),
                float32_compute=bool(layer["float32_compute"]),
                in_backbone=bool(layer["in_backbone"]),
                shares_weights=bool(layer["shares_weights"]),
                detail=str(layer["detail"]),
            )
            for layer in data["layers"]
        )
        return ModelProfile(
            name=str(data["name"]),
            input_shape=tuple(int(d) for d in data["input_shape"]),
            layers=layers,
            tensor_elements=tuple(int(e) for e in data["tensor_elements"]),
            input_ids=tuple(int(i) for i in data["input_ids"]),
            output_ids=tuple(int(i) for i in data["output_ids"]),
            label_elements=int(data["label_elements"]),
            unknown_layer_types=tuple(str(t) for t in data["unknown_layer_types"]),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed profile: {exc}") from exc
