"""Hand-built profiles for pure tests (no Keras)."""

from calc.types import LayerStats, ModelProfile


def chain_profile(
    sizes=(65536, 65536, 65536),
    types=("Conv2D", "BatchNormalization", "ReLU"),
    weights=((147456, 64), (), ()),
    head_weights=(65536 * 10, 10),
    backbone_layers=0,
) -> ModelProfile:
    """Input -> one layer per (type, size) -> Dense head of 10 classes.

    ``sizes`` are per-sample elements of each layer's output (the input has
    ``sizes[0]`` elements). The first ``backbone_layers`` layers are marked as backbone.
    """
    elements = [sizes[0]]
    layers = []
    prev = 0
    for i, (kind, size, w) in enumerate(zip(types, sizes, weights)):
        elements.append(size)
        t = len(elements) - 1
        nontrain = (size // 256,) * 2 if kind == "BatchNormalization" else ()
        trainable = w if kind != "BatchNormalization" else (size // 256,) * 2
        layers.append(
            LayerStats(
                name=f"l{i}", layer_type=kind, input_ids=(prev,), output_ids=(t,),
                output_shapes=((size,),), trainable_weight_elements=tuple(trainable),
                non_trainable_weight_elements=nontrain, in_backbone=i < backbone_layers,
            )
        )
        prev = t
    elements.append(10)
    layers.append(
        LayerStats(
            name="head", layer_type="Dense", input_ids=(prev,), output_ids=(len(elements) - 1,),
            output_shapes=((10,),), trainable_weight_elements=head_weights, activation="softmax",
        )
    )
    return ModelProfile(
        name="chain", input_shape=(sizes[0],), layers=tuple(layers), tensor_elements=tuple(elements),
        input_ids=(0,), output_ids=(len(elements) - 1,),
    )
