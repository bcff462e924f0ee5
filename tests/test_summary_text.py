import pytest

from calc.classic import count_neurons, nnc_bytes_for_profile
from calc.summary_text import parse_summary, read_summary

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
    ("conv (Conv2D)  (None, 8, 8, 4)  40", "no InputLayer row"),
    ("in (InputLayer) (None, None, 3) 0\nconv (Conv2D) (None, 8, 8, 4) 40", "must be known"),
    ("Layer (type)  Output Shape  Param #  Connected to", "No layer rows"),
    ("Connected to\n in (InputLayer)  (None, 4)  0  []\n d (Dense)  (None, 2)  10  ['nope[0][0]']", "'nope'"),
    # Numbers past what the engine's integers hold: a message, not an OverflowError.
    ("in (InputLayer) (None, 4) 0\nd (Dense) (None, 12345678901234567890) 10", r"below 2\*\*31"),
    ("in (InputLayer) (None, 65536, 65536) 0\nd (Dense) (None, 65536, 65536, 64) 10", "elements per sample"),
    ("in (InputLayer) (None, 4) 0\nd (Dense) (None, 2) 12345678901234567890", "parameters below"),
])
def test_bad_text(text, needle):
    with pytest.raises(ValueError, match=needle):
        parse_summary(text)


@pytest.mark.keras
def test_keras3_vgg16_summary_reproduces_seed_000():
    import keras

    lines = []
    keras.applications.VGG16(weights=None).summary(print_fn=lambda s, **k: lines.append(s))
    p = parse_summary("\n".join(lines))
    assert p.total_params == 138_357_544
    assert count_neurons(p) == 15_262_696
    assert nnc_bytes_for_profile(p, 8) == 2_083_672_896


# A residual block as Keras 3 prints it in an 80-column terminal: cells wrap over
# lines, long names are cut with "…", Add lists one source per line.
KERAS3_FUNCTIONAL = """
Model: "block"
┏━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┓
┃ Layer (type)        ┃ Output Shape      ┃    Param # ┃ Connected to      ┃
┡━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━┩
│ input_layer         │ (None, 8, 8, 16)  │          0 │ -                 │
│ (InputLayer)        │                   │            │                   │
├─────────────────────┼───────────────────┼────────────┼───────────────────┤
│ branch_conv_long_n… │ (None, 8, 8,      │      2,320 │ input_layer[0][0] │
│ (Conv2D)            │ 16)               │            │                   │
├─────────────────────┼───────────────────┼────────────┼───────────────────┤
│ branch_bn           │ (None, 8, 8,      │         48 │ branch_conv_long… │
│ (BatchNormalizatio… │ 16)               │            │                   │
├─────────────────────┼───────────────────┼────────────┼───────────────────┤
│ branch_act          │ (None, 8, 8,      │          0 │ branch_bn[0][0]   │
│ (Activation)        │ 16)               │            │                   │
├─────────────────────┼───────────────────┼────────────┼───────────────────┤
│ add (Add)           │ (None, 8, 8,      │          0 │ input_layer[0][0… │
│                     │ 16)               │            │ branch_act[0][0]  │
├─────────────────────┼───────────────────┼────────────┼───────────────────┤
│ pool                │ (None, 16)        │          0 │ add[0][0]         │
│ (GlobalAveragePool… │                   │            │                   │
├─────────────────────┼───────────────────┼────────────┼───────────────────┤
│ head_relu (Dense)   │ (None, 10)        │        170 │ pool[0][0]        │
└─────────────────────┴───────────────────┴────────────┴───────────────────┘
 Total params: 2,538 (9.91 KB)
 Trainable params: 2,506 (9.79 KB)
 Non-trainable params: 32 (128.00 B)
"""

KERAS2_FUNCTIONAL = """
__________________________________________________________________________________________________
 Layer (type)                   Output Shape         Param #     Connected to
==================================================================================================
 input_1 (InputLayer)           [(None, 8, 8, 16)]   0           []

 branch_conv (Conv2D)           (None, 8, 8, 16)     2320        ['input_1[0][0]']

 branch_relu (Activation)       (None, 8, 8, 16)     0           ['branch_conv[0][0]']

 add (Add)                      (None, 8, 8, 16)     0           ['input_1[0][0]',
                                                                  'branch_relu[0][0]']

 flatten (Flatten)              (None, 1024)         0           ['add[0][0]']
==================================================================================================
Total params: 2,320
"""


def _sources(profile):
    producer = {t: l.name for l in profile.layers for t in l.output_ids}
    return {l.name: sorted(producer.get(i, "input") for i in l.input_ids) for l in profile.layers}


def test_keras3_functional_table_is_read_with_its_wiring():
    r = read_summary(KERAS3_FUNCTIONAL, activation="silu")
    p = r.profile
    assert r.connected and r.connections == 7 and r.ambiguous_connections == 0
    assert _sources(p) == {"branch_conv_long_n…": ["input"], "branch_bn": ["branch_conv_long_n…"],
                           "branch_act": ["branch_bn"], "add": ["branch_act", "input"], "pool": ["add"],
                           "head_relu": ["pool"]}
    types = {l.name: l.layer_type for l in p.layers}
    assert types["branch_bn"] == "BatchNormalization" and types["pool"] == "GlobalAveragePooling2D"
    bn = next(l for l in p.layers if l.name == "branch_bn")  # 48 = 3 x 16: scale=False, so beta + moving stats
    assert bn.trainable_weight_elements == (16,) and bn.non_trainable_weight_elements == (16, 16)
    act = next(l for l in p.layers if l.name == "branch_act")
    assert act.activation == "silu" and r.assumed_activations == 1  # "branch_act" names no function
    assert next(l for l in p.layers if l.name == "head_relu").activation == "linear"  # a Dense, not an Activation
    assert p.total_params == 2538 and p.output_ids == (6,)  # tensors: input, then one per layer


def test_keras2_functional_table_is_read_with_its_wiring():
    r = read_summary(KERAS2_FUNCTIONAL)
    assert r.connected and r.connections == 5 and r.assumed_activations == 0
    assert _sources(r.profile)["add"] == ["branch_relu", "input"]
    assert next(l for l in r.profile.layers if l.name == "branch_relu").activation == "relu"
    assert r.profile.input_shape == (8, 8, 16)


def test_a_cut_name_that_fits_several_layers_is_counted():
    text = KERAS3_FUNCTIONAL.replace("│ branch_bn[0][0]   │", "│ branch_…          │")
    r = read_summary(text)
    assert r.ambiguous_connections == 1
    assert _sources(r.profile)["branch_act"] == ["branch_bn"]  # the nearest earlier layer that fits


def _keras3_summary(model, width, monkeypatch):
    import contextlib
    import io

    monkeypatch.setenv("COLUMNS", str(max(width, 80)))  # a terminal this wide
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        model.summary(line_length=width)
    return out.getvalue()


@pytest.mark.keras
@pytest.mark.parametrize("name, activation", [("ResNet50", "relu"), ("MobileNetV2", "relu"),
                                              ("EfficientNetB0", "silu"), ("InceptionV3", "relu")])
def test_functional_summaries_of_keras_applications(name, activation, monkeypatch):
    import keras

    from calc.estimate import estimate_memory
    from calc.keras.profile import profile_model
    from calc.types import TrainingConfig

    model = getattr(keras.applications, name)(weights=None, input_shape=(96, 96, 3))
    real = profile_model(model)
    config = TrainingConfig(batch_size=32)
    for width in (120, 250):  # nothing is cut: the wiring is exact, the estimate within 1 %
        r = read_summary(_keras3_summary(model, width, monkeypatch), activation=activation)
        assert r.ambiguous_connections == 0 and _sources(r.profile) == _sources(real)
        assert r.profile.total_params == real.total_params
        ratio = estimate_memory(r.profile, config).peak_bytes / estimate_memory(real, config).peak_bytes
        assert abs(ratio - 1) < 0.01
    narrow = read_summary(_keras3_summary(model, 80, monkeypatch), activation=activation)
    assert narrow.profile.total_params == real.total_params
    if name == "InceptionV3":  # 'batch_normalization_…' fits a hundred layers at 80 columns
        assert narrow.ambiguous_connections > 50


def test_a_sequential_table_needs_the_input_shape():
    # Keras 3 prints no InputLayer row for a Sequential model, and wraps long cells.
    text = """
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━┓
┃ Layer (type)                    ┃ Output Shape           ┃       Param # ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━┩
│ a_rather_long_convolution_name  │ (None, 62, 62, 64)     │         1,792 │
│ (Conv2D)                        │                        │               │
├─────────────────────────────────┼────────────────────────┼───────────────┤
│ relu (ReLU)                     │ (None, 62, 62, 64)     │             0 │
├─────────────────────────────────┼────────────────────────┼───────────────┤
│ dense (Dense)                   │ (None, 62, 62, 10)     │           650 │
└─────────────────────────────────┴────────────────────────┴───────────────┘
 Total params: 2,442 (9.54 KB)
"""
    with pytest.raises(ValueError, match="no InputLayer row"):
        read_summary(text)
    p = read_summary(text, input_shape=(64, 64, 3)).profile
    assert p.input_shape == (64, 64, 3) and p.tensor_elements[0] == 64 * 64 * 3
    assert [l.layer_type for l in p.layers] == ["Conv2D", "ReLU", "Dense"]
    assert [l.input_ids for l in p.layers] == [(0,), (1,), (2,)]  # a chain from the given input
    assert p.total_params == 1792 + 650


@pytest.mark.parametrize("text, shape", [("224, 224, 3", (224, 224, 3)), ("(180, 50, 1)", (180, 50, 1)),
                                         ("32x32x3", (32, 32, 3)), ("", None), ("  ", None)])
def test_input_shapes_are_read(text, shape):
    from calc.summary_text import parse_shape

    assert parse_shape(text) == shape


@pytest.mark.parametrize("text", ["224, -3", "a, b", "1, 2, 3, 4, 5", "0, 4", "100000, 3", "１２"])
def test_bad_input_shapes_are_refused(text):
    from calc.summary_text import parse_shape

    with pytest.raises(ValueError):
        parse_shape(text)
