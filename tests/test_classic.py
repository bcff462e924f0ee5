"""The seeds' worked examples, to the digit, with the numbers the seeds print."""

from calc.classic import (
    TINY_CNN_TABLE,
    cs231n_answer,
    cs231n_question_mb,
    max_batch_rule,
    nnc_bytes,
    tiny_cnn_bytes,
    tiny_cnn_corrected_weights,
)


def test_seed_000_vgg16_batch_8():
    assert nnc_bytes(15_262_696, 138_357_544, 8) == 2_083_672_896


def test_seed_000_batch_32_is_not_four_times():
    # The seed says batch 32 needs "4x, about 8 GB"; its own rule gives 5.0 GB.
    b32 = nnc_bytes(15_262_696, 138_357_544, 32)
    assert b32 == (15_262_696 * 32 + 138_357_544) * 8 == 5_014_110_528
    assert b32 < 4 * nnc_bytes(15_262_696, 138_357_544, 8)


def test_seed_002_answer_and_question():
    a = cs231n_answer(532_752, 19_072_984, 180 * 50 * 1, 128)
    assert (a.activations_mb_per_image, a.parameters_mb, a.miscellaneous_mb) == (4.06, 218.27, 4.39)
    assert a.total_mb == 742.34
    assert cs231n_question_mb(532_752, 19_072_984, 9000, 128) == 224.69
    unrounded = cs231n_answer(532_752, 19_072_984, 9000, 128, as_printed=False)
    assert abs(unrounded.total_mb - (532_752 * 8 * 128 + 19_072_984 * 12 + 128 * 9000 * 4) / 2**20) < 1e-9


def test_seed_003_tiny_cnn_table():
    assert [r.neurons for r in TINY_CNN_TABLE] == [786432, 393216, 196608, 98304, 49152, 24576, 12288]
    assert [r.seed_weights for r in TINY_CNN_TABLE] == [108, 216, 432, 864, 1728, 3456, 6912]
    assert tiny_cnn_bytes() == 6_297_168
    assert tiny_cnn_bytes(bytes_per_value=8) == 12_594_336
    assert tiny_cnn_corrected_weights() == sum(9 * (3 << (i - 1)) * (3 << i) for i in range(1, 7))
    assert 3 * 3 * 96 * 192 == 165_888


def test_seed_004_max_batch_rule():
    assert max_batch_rule(11 * 2**30, 1_000_000, 24_000_000) == 11 * 2**30 // 4 // 25_000_000
