"""GPU targets: each CUDA card of the GPU presets as XLA's compiler sees it, read from
``calc/data/gpu_targets.json``."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from calc.xla.plan import PlanError

TARGETS_PATH = Path(__file__).parent.parent / "data" / "gpu_targets.json"


@dataclass(frozen=True)
class GpuTarget:
    """A CUDA card as XLA's compiler sees it (``stream_executor.GpuTargetConfigProto``)."""

    key: str
    name: str
    compute_capability: str
    core_count: int
    l2_cache_size: int
    memory_bandwidth: int
    clock_rate_ghz: float
    device_memory_size: int
    shared_memory_per_core: int
    shared_memory_per_block_optin: int
    threads_per_core_limit: int
    fpus_per_core: int
    source: str

    def config_text(self) -> str:
        """The target in the text form ``jax.experimental.topologies.get_topology_desc`` takes."""
        major, minor = self.compute_capability.split(".")
        return "\n".join([
            "gpu_device_info {",
            "  threads_per_block_limit: 1024",
            "  threads_per_warp: 32",
            "  shared_memory_per_block: 49152",
            f"  shared_memory_per_core: {self.shared_memory_per_core}",
            f"  threads_per_core_limit: {self.threads_per_core_limit}",
            f"  core_count: {self.core_count}",
            f"  fpus_per_core: {self.fpus_per_core}",
            "  block_dim_limit_x: 2147483647",
            "  block_dim_limit_y: 65535",
            "  block_dim_limit_z: 65535",
            f"  memory_bandwidth: {self.memory_bandwidth}",
            f"  l2_cache_size: {self.l2_cache_size}",
            f"  clock_rate_ghz: {self.clock_rate_ghz}",
            f"  device_memory_size: {self.device_memory_size}",
            f"  shared_memory_per_block_optin: {self.shared_memory_per_block_optin}",
            f"  cuda_compute_capability {{ major: {int(major)} minor: {int(minor)} }}",
            "  registers_per_core_limit: 65536",
            "  registers_per_block_limit: 65536",
            "  thread_dim_limit_x: 1024",
            "  thread_dim_limit_y: 1024",
            "  thread_dim_limit_z: 64",
            "}",
            'platform_name: "CUDA"',
            "dnn_version_info { major: 9 minor: 10 }",
            f'device_description_str: "{self.name}"',
            "",
        ])


@functools.cache
def gpu_targets() -> dict[str, GpuTarget]:
    """Every target, keyed by GPU preset key (``calc.gpus.GPU_PRESETS``)."""
    data = json.loads(TARGETS_PATH.read_text())
    limits = data["limits_by_compute_capability"]
    targets = {key: GpuTarget(key=key, **{**limits[t["compute_capability"]], **t})
               for key, t in data["targets"].items()}
    for preset, same in data["presets"].items():
        targets[preset] = targets[same]
    return targets


def target_for(gpu_key: str) -> GpuTarget:
    """The target of a GPU preset; ``PlanError`` for one without (a custom size)."""
    target = gpu_targets().get(gpu_key)
    if target is None:
        raise PlanError(f"no XLA target for GPU {gpu_key!r} (a custom size names no card): choose a preset")
    return target
