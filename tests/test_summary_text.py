import pytest

from calc.classic import count_neurons, nnc_bytes_for_profile
from calc.summary_text import parse_summary

# A small Keras 2-style summary (the layout of seed 000), complete.
KERAS2 = """
_________________________________________________________________
Layer (type)                 Output Shape              Param #
=================================================================
input_1 (InputLayer)         (None, 32, 32, 3)         0
_________________________________________________________________
conv (Conv2D)                (None, 32, 32, 16)        448
_________________________________________________________________
bn (BatchNormalization)      (None, 32, 32, 16)        64
_________________________________________________________________
relu (Activation)            (None, 32, 32, 16)        0
_________________________________________________________________
flatten (Flatten)            (None, 16384)             0
_________________________________________________________________
fc (Dense)                   (None, 10)                163850
=================================================================
Total params: 164,362
Trainable params: 164,330
Non-trainable params: 32
"""


def test_keras2_layout():
    p = parse_summary(KERAS2)
    assert [l.layer_type for l in p.layers] == ["Conv2D", "BatchNormalization", "Activation", "Flatten", "Dense"]
    assert p.total_params == 448 + 64 + 163850
    assert p.layers[1].trainable_params == 32 and p.layers[1].non_trainable_params == 32
    assert count_neurons(p) == 32 * 32 * 3 + 3 * 32 * 32 * 16 + 16384 + 10
    assert p.input_shape == (32, 32, 3)


def test_seed_000_elided_table_is_refused_with_the_reason():
    elided = KERAS2.replace("bn (BatchNormalization)      (None, 32, 32, 16)        64\n", "・\n省略\n")
    with pytest.raises(ValueError, match="do not add up"):
        parse_summary(elided)


@pytest.mark.parametrize("text, needle", [
    ("", "No layer rows"), ("hello world", "No layer rows"), ("x" * 1_000_001, "limit"),
    ("conv (Conv2D)  (None, 8, 8, 4)  40", "InputLayer"),
    ("in (InputLayer) (None, None, 3) 0\nconv (Conv2D) (None, 8, 8, 4) 40", "must be known"),
    ("Layer (type)  Output Shape  Param #  Connected to", "Connected to"),
])
def test_bad_text(text, needle):
    with pytest.raises(ValueError, match=needle):
        parse_summary(text)


@pytest.mark.slow
def test_keras3_vgg16_summary_reproduces_seed_000():
    import keras

    lines = []
    keras.applications.VGG16(weights=None).summary(print_fn=lambda s, **k: lines.append(s))
    p = parse_summary("\n".join(lines))
    assert p.total_params == 138_357_544
    assert count_neurons(p) == 15_262_696
    assert nnc_bytes_for_profile(p, 8) == 2_083_672_896
