"""GPU presets as data.

``memory_mib`` is the total that ``nvidia-smi`` reports for the card (MiB), not the
marketing figure. ``overhead_mib`` is the framework overhead that ``nvidia-smi`` shows
on top of TensorFlow's allocator: the CUDA context and the cuDNN/cuBLAS handles,
0.3-0.7 GB with lazy module loading (MEMORY_FACTS.md); we take 0.5 GiB on cards
with lazy loading support (CUDA 11.7+, every architecture listed) and more on the
largest data-centre parts, whose contexts carry more. It is an assumption, not a
measurement of this project: it is kept outside the predicted allocator peak.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20


@dataclass(frozen=True)
class GpuPreset:
    key: str
    name: str
    memory_mib: int
    architecture: str
    bf16: bool
    overhead_mib: int = 512
    kind: str = "data centre"

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    @property
    def overhead_bytes(self) -> int:
        return self.overhead_mib * MIB


def _p(key, name, mib, arch, kind, overhead=512):
    return GpuPreset(key, name, mib, arch, arch not in ("Pascal", "Volta", "Turing"), overhead, kind)


GPU_PRESETS: dict[str, GpuPreset] = {
    p.key: p
    for p in [
        _p("gtx-1080-ti", "GeForce GTX 1080 Ti 11 GB", 11264, "Pascal", "consumer"),
        _p("rtx-2080-ti", "GeForce RTX 2080 Ti 11 GB", 11264, "Turing", "consumer"),
        _p("rtx-3060", "GeForce RTX 3060 12 GB", 12288, "Ampere", "consumer"),
        _p("rtx-3080", "GeForce RTX 3080 10 GB", 10240, "Ampere", "consumer"),
        _p("rtx-3090", "GeForce RTX 3090 24 GB", 24576, "Ampere", "consumer"),
        _p("rtx-4060-ti-16", "GeForce RTX 4060 Ti 16 GB", 16380, "Ada", "consumer"),
        _p("rtx-4070", "GeForce RTX 4070 12 GB", 12282, "Ada", "consumer"),
        _p("rtx-4080", "GeForce RTX 4080 16 GB", 16376, "Ada", "consumer"),
        _p("rtx-4090", "GeForce RTX 4090 24 GB", 24564, "Ada", "consumer"),
        _p("rtx-5090", "GeForce RTX 5090 32 GB", 32607, "Blackwell", "consumer"),
        _p("t4", "Tesla T4 16 GB", 15360, "Turing", "data centre"),
        _p("p100", "Tesla P100 16 GB", 16280, "Pascal", "data centre"),
        _p("v100-16", "Tesla V100 16 GB", 16160, "Volta", "data centre"),
        _p("v100-32", "Tesla V100 32 GB", 32510, "Volta", "data centre"),
        _p("a10", "A10 24 GB", 23028, "Ampere", "data centre"),
        _p("a100-40", "A100 40 GB", 40960, "Ampere", "data centre"),
        _p("a100-80", "A100 80 GB", 81920, "Ampere", "data centre"),
        _p("l4", "L4 24 GB", 23034, "Ada", "data centre"),
        _p("l40s", "L40S 48 GB", 46068, "Ada", "data centre"),
        _p("h100-80", "H100 80 GB", 81559, "Hopper", "data centre", 640),
        _p("h200", "H200 141 GB", 143771, "Hopper", "data centre", 640),
        _p("b200", "B200 192 GB", 183359, "Blackwell", "data centre", 768),
        _p("colab-t4", "Google Colab free tier (T4 16 GB)", 15360, "Turing", "free notebook"),
        _p("kaggle-p100", "Kaggle notebook (P100 16 GB)", 16280, "Pascal", "free notebook"),
        _p("kaggle-t4", "Kaggle notebook (T4 16 GB, one of two)", 15360, "Turing", "free notebook"),
    ]
}


def custom_gpu(memory_gib: float, overhead_mib: int = 512) -> GpuPreset:
    """A card of any size, given in GiB."""
    if not isinstance(memory_gib, (int, float)) or isinstance(memory_gib, bool) or not 1 / 1024 <= memory_gib <= 4096:
        raise ValueError(f"memory_gib must be a number of GiB from 1/1024 (1 MiB) to 4096. Received: memory_gib={memory_gib!r}")
    return GpuPreset("custom", f"Custom {memory_gib:g} GiB", int(memory_gib * 1024), "unknown", True, overhead_mib, "custom")


def lookup_gpu(key: str) -> GpuPreset:
    """A preset by key (``"a100-40"``); raises ``ValueError`` naming the known keys."""
    if key not in GPU_PRESETS:
        raise ValueError(f"Unknown GPU {key!r}. Expected one of: {', '.join(GPU_PRESETS)}")
    return GPU_PRESETS[key]
