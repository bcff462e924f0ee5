"""Catalogue models built, saved files loaded with Keras safe mode on, and their profiles.

A catalogue model is built with ``weights=None`` (the weights' values do not change the
step's memory); a saved file is loaded without its compile state and without running
any code of its own. Both are dropped after profiling, in a fresh Keras scope.
"""

from __future__ import annotations

import json
import os
from typing import Any

from calc.catalogue import ModelFile, ModelSpec
from calc.keras import clear_session
from calc.keras.profile import as_functional, profile_model
from calc.types import ModelProfile, TrainMode


def build_model(spec: ModelSpec | ModelFile, precision: str = "float32",
                train_mode: TrainMode = TrainMode.ALL) -> tuple[Any, Any]:
    """Builds a catalogue model with ``weights=None``. Returns ``(model, backbone or None)``.

    A ``ModelFile`` is loaded instead (``build_saved_model``).

    ``include_top=False`` gives the Keras transfer-learning recipe: the application
    without its top, global average pooling and a new softmax Dense head; with a frozen
    backbone the backbone is called with ``training=False``, as the Keras guide does.
    """
    if isinstance(spec, ModelFile):
        return build_saved_model(spec.resolved(), precision)
    import keras

    keras.config.set_dtype_policy(precision)
    app = getattr(keras.applications, spec.name)
    if spec.include_top:
        model = app(weights=None, include_top=True, input_shape=spec.input_shape, classes=spec.classes)
        return model, None
    base = app(weights=None, include_top=False, input_shape=spec.input_shape)
    inputs = keras.Input(spec.input_shape)
    if train_mode is TrainMode.FROZEN_BACKBONE:
        x = base(inputs, training=False)
    else:
        x = base(inputs)
    x = keras.layers.GlobalAveragePooling2D(name="head_pool")(x)
    outputs = keras.layers.Dense(spec.classes, activation="softmax", name="head_predictions")(x)
    return keras.Model(inputs, outputs, name=f"{spec.name}_transfer"), base


def _load_saved(path: str) -> Any:
    """A saved model, loaded with Keras safe mode on and without its compile state.

    An ``.h5`` file's layers are counted from its ``model_config`` before Keras builds it
    (a ``.keras`` file's were, from its ``config.json``, by ``calc.uploads.check_upload``).
    """
    if path.lower().endswith(".h5"):
        _check_h5_layers(path)
    try:
        import keras

        return keras.saving.load_model(path, compile=False, safe_mode=True)
    except Exception as exc:  # Keras raises many types for bad files; all mean "cannot read"
        raise ValueError(f"Keras could not load this file safely: {type(exc).__name__}: {exc}"[:500]) from None


def _check_h5_layers(path: str) -> None:
    import h5py

    from calc.uploads import check_declared_params, check_layer_count

    try:
        with h5py.File(path, "r") as f:
            raw = f.attrs.get("model_config")
        config = json.loads(raw) if raw is not None else None
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"The HDF5 file's model_config cannot be read: {type(exc).__name__}") from None
    check_layer_count(config)
    check_declared_params(config)


def _first_nested(model: Any) -> Any:
    return next((op for op in getattr(model, "layers", []) if as_functional(op) is not None), None)


def build_saved_model(path: str, precision: str = "float32") -> tuple[Any, Any]:
    """A saved model as the engine estimates it. Returns ``(model, its first nested model or None)``.

    The engine reads a file's layers under the float32 policy and applies the precision
    asked for to all of them, as if the model had been built under that global policy.
    Keras saves each layer's policy in the file, so under mixed precision the model is
    cloned with every layer saved as ``float32`` recreated under ``precision`` (fresh
    weights: their values do not change the step's memory).
    """
    import keras

    keras.config.set_dtype_policy(precision)
    model = _load_saved(path)
    if precision != "float32":
        def recast(layer: Any) -> Any:
            config = layer.get_config()
            if getattr(layer, "dtype_policy", None) is not None and layer.dtype_policy.name == "float32":
                config["dtype"] = precision
            return layer.__class__.from_config(config)

        model = keras.models.clone_model(model, clone_function=recast, recursive=True)
    return model, _first_nested(model)


def profile_catalogue_model(spec: ModelSpec | ModelFile) -> ModelProfile:
    """Builds a catalogue model once, reads its ledger, and lets the model go."""
    # Auto-generated layer names count up per process ("global_average_pooling2d_3"
    # after other models): a fresh scope makes the ledger independent of what this
    # process built before (the build worker, the CLI and tests agree).
    clear_session()
    model, backbone = build_model(spec)
    try:
        return profile_model(model, name=spec.key, backbone=backbone)
    finally:
        del model, backbone
        clear_session()


def profile_model_file(path: str) -> ModelProfile:
    """Loads a saved ``.keras`` or ``.h5`` model with Keras safe mode on and profiles it.

    No custom objects are registered and Lambda layers are refused by safe mode, so a
    file cannot run code while it loads. The model is dropped before returning.
    """
    model = _load_saved(path)
    try:
        return profile_model(model, name=os.path.basename(path), backbone=_first_nested(model))
    finally:
        del model
        clear_session()
