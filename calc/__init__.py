"""GPU memory of one Keras/TensorFlow training step: the engine.

Pure Python; only ``calc.keras`` imports Keras, TensorFlow or JAX, and only when a model has
to be built, measured or planned (in a child process, ``calc.workers``).
"""

from calc.catalogue import CATALOGUE, ModelSpec, make_spec
from calc.estimate import estimate_memory, max_batch_size, memory_curve
from calc.gpus import GPU_PRESETS, GpuPreset, custom_gpu, lookup_gpu
from calc.types import (
    Device,
    LayerStats,
    MemoryBreakdown,
    ModelProfile,
    Optimizer,
    OptimizerOptions,
    Precision,
    TrainingConfig,
    TrainMode,
)

__all__ = [
    "CATALOGUE", "Device", "GPU_PRESETS", "GpuPreset", "LayerStats", "MemoryBreakdown", "ModelProfile",
    "ModelSpec", "Optimizer", "OptimizerOptions", "Precision", "TrainMode", "TrainingConfig",
    "custom_gpu", "estimate_memory", "lookup_gpu", "make_spec", "max_batch_size", "memory_curve",
]
