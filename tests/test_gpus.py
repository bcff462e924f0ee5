import pytest

from calc.gpus import GPU_PRESETS, custom_gpu, lookup_gpu


def test_presets_cover_the_cards_people_ask_about():
    for key in ["gtx-1080-ti", "rtx-2080-ti", "rtx-5090", "t4", "p100", "v100-16", "v100-32", "a10",
                "a100-40", "a100-80", "l4", "l40s", "h100-80", "h200", "b200", "colab-t4", "kaggle-p100"]:
        assert key in GPU_PRESETS


def test_bf16_only_from_ampere_on():
    assert not lookup_gpu("t4").bf16 and not lookup_gpu("v100-32").bf16
    assert lookup_gpu("a100-40").bf16 and lookup_gpu("h100-80").bf16


def test_sizes_are_nvidia_smi_mib():
    assert lookup_gpu("a100-80").memory_bytes == 81920 * 2**20
    assert all(1 << 30 < g.memory_bytes < 200 << 30 for g in GPU_PRESETS.values())
    assert all(0 < g.overhead_bytes < 1 << 30 for g in GPU_PRESETS.values())


def test_custom_and_unknown():
    assert custom_gpu(12).memory_bytes == 12 * 2**30
    for bad in (0, -1, 1e9, "12", True):
        with pytest.raises(ValueError, match="memory_gib"):
            custom_gpu(bad)
    with pytest.raises(ValueError, match="Unknown GPU 'a200'"):
        lookup_gpu("a200")
