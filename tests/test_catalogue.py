import time

import pytest

from calc.catalogue import CATALOGUE, approximate_params, lookup, make_spec


def test_catalogue_covers_the_families():
    families = {e.family for e in CATALOGUE.values()}
    assert {"VGG", "ResNet", "ResNetV2", "Inception", "Xception", "MobileNet", "MobileNetV3",
            "DenseNet", "NASNet", "EfficientNet", "EfficientNetV2", "ConvNeXt"} <= families
    assert len(CATALOGUE) == 40


def test_lookup_is_case_insensitive_and_suggests():
    assert lookup("resnet50").name == "ResNet50"
    with pytest.raises(ValueError, match="Did you mean ResNet50"):
        lookup("ResNet5O")


def test_defaults_and_non_square():
    assert make_spec("EfficientNetB3").input_shape == (300, 300, 3)
    spec = make_spec("ResNet50", height=50, width=180, channels=1, classes=10)
    assert spec.input_shape == (50, 180, 1) and spec.key == "ResNet50-50x180x1-top10"


@pytest.mark.parametrize("name, minimum", [("InceptionV3", 75), ("Xception", 71), ("ResNet50", 32)])
def test_minimum_size_is_named(name, minimum):
    make_spec(name, minimum)
    with pytest.raises(ValueError, match=f"at least {minimum}x{minimum}"):
        make_spec(name, minimum - 1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"image_size": 0}, "image_size must be between 1"),
        ({"image_size": -5}, "image_size must be between 1"),
        ({"image_size": 100000}, "image_size must be between 1 and 8192"),
        ({"image_size": 2.5}, "image_size must be a positive integer"),
        ({"image_size": "224"}, "image_size must be a positive integer"),
        ({"channels": 0}, "channels"),
        ({"classes": 0}, "classes"),
    ],
)
def test_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_spec("ResNet50", **kwargs)


def test_vgg_top_parameters_follow_the_image_size():
    # Keras' VGG16 has 138,357,544 parameters at 224x224 with its 1000-class top.
    convs = 14_714_688
    for side in (224, 256, 512):
        flat = (side // 32) ** 2 * 512
        expected = flat * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 1000 + 1000
        assert approximate_params(make_spec("VGG16", side), 4096) == expected
    assert approximate_params(make_spec("VGG16", 224), 4096) + convs == 138_357_544


def test_each_top_reads_the_width_the_shipped_ledger_gives_its_classifier():
    from calc.profiles import get_profile

    for name, entry in CATALOGUE.items():
        classifier = [layer for layer in get_profile(make_spec(name)).layers if layer.trainable_weight_elements][-1]
        assert classifier.trainable_weight_elements == (entry.top_features * 1000, 1000), name


def test_a_head_of_a_million_classes_is_refused_before_anything_is_built():
    # ConvNeXtXLarge's 2,048 features x 1,000,000 classes: a 2·10^9-parameter head.
    with pytest.raises(ValueError, match=r"ConvNeXtXLarge at 224x224 with 1,000,000 classes has at least 2,049,000,000"):
        make_spec("ConvNeXtXLarge", classes=1_000_000)
    with pytest.raises(ValueError, match="2,049,000,000"):
        make_spec("ConvNeXtXLarge", include_top=False, classes=1_000_000)
    assert make_spec("ResNet50", classes=400_000).classes == 400_000
    assert make_spec("VGG16", include_top=False, classes=1_000_000).classes == 1_000_000  # 512 x 10^6


def test_each_new_head_reads_the_width_the_committed_ledgers_give_it():
    from calc.profile_json import profile_from_dict
    from calc.validation.ledgers import read_ledgers

    ledgers = read_ledgers()
    heads = {}
    for key, data in ledgers.profiles.items():
        name = key.split("-")[0]
        if name in CATALOGUE and "-head" in key:
            heads[name] = profile_from_dict(data).layers[-1].trainable_weight_elements
    assert len(heads) >= 30
    for name, (kernel, bias) in heads.items():
        assert kernel == CATALOGUE[name].backbone_features * bias, name


def test_absurd_weights_are_refused_at_once():
    started = time.perf_counter()
    with pytest.raises(ValueError, match="parameters"):
        make_spec("VGG16", 8192)
    assert make_spec("VGG16", 8192, include_top=False).include_top is False
    assert time.perf_counter() - started < 0.5
