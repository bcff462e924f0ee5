"""Core data types of the engine: plain, frozen, integer bytes.

Nothing here imports Keras. A ``ModelProfile`` is what the Keras adapter extracts
from a model once; everything else is computed from it and a ``TrainingConfig``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace


class Precision(str, enum.Enum):
    """Keras dtype policies (``keras.mixed_precision.set_dtype_policy`` names)."""

    FLOAT32 = "float32"
    MIXED_FLOAT16 = "mixed_float16"
    MIXED_BFLOAT16 = "mixed_bfloat16"

    @property
    def compute_bytes(self) -> int:
        return 4 if self is Precision.FLOAT32 else 2

    @property
    def is_mixed(self) -> bool:
        return self is not Precision.FLOAT32


class Optimizer(str, enum.Enum):
    """Keras 3 optimizer identifiers (``keras.optimizers.get`` names)."""

    SGD = "sgd"
    ADAM = "adam"
    ADAMW = "adamw"
    NADAM = "nadam"
    ADAMAX = "adamax"
    RMSPROP = "rmsprop"
    ADAGRAD = "adagrad"
    ADADELTA = "adadelta"
    FTRL = "ftrl"
    LION = "lion"
    LAMB = "lamb"
    ADAFACTOR = "adafactor"


class Device(str, enum.Enum):
    """Where the step runs: which of TensorFlow's kernels, and so which temporaries, it has.

    ``cpu``: the CPU kernels the validation set was measured on (float16 convolution and
    matrix-product buffers, XLA's dense filter gradient for grouped convolutions).
    ``cpu_fp16``: a CPU with AVX512-FP16 (Intel Sapphire Rapids and later), where oneDNN
    runs float16 convolutions and matrix products itself, so without those float16
    buffers (``archive/probes/probe_f16_kernels.py`` measured none there); XLA's filter
    gradient as on any CPU. ``calc.workers.measure.local_cpu_device`` says which this machine is.
    ``gpu``: cuDNN and cuBLAS, which have neither (measured on an H100:
    ``calc/data/gpu_tf_h100.json``); their workspaces are not modelled.
    """

    CPU = "cpu"
    CPU_FP16 = "cpu_fp16"
    GPU = "gpu"


class TrainMode(str, enum.Enum):
    """What is trained."""

    ALL = "all"
    FROZEN_BACKBONE = "frozen_backbone"
    LAST_N = "last_n"


@dataclass(frozen=True)
class OptimizerOptions:
    """Options of the optimizer that change its memory.

    ``momentum`` applies to SGD and RMSprop, ``amsgrad`` to Adam/AdamW,
    ``centered`` to RMSprop.
    """

    momentum: bool = False
    amsgrad: bool = False
    centered: bool = False
    use_ema: bool = False


@dataclass(frozen=True)
class LayerStats:
    """One call of one layer (a node of the functional graph), nested models flattened.

    Tensor ids index ``ModelProfile.tensor_elements``; a layer called twice (shared
    weights) appears twice, its parameters counted on the first call only.
    """

    name: str
    layer_type: str
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    trainable_weight_elements: tuple[int, ...] = ()
    non_trainable_weight_elements: tuple[int, ...] = ()
    activation: str = "linear"
    float32_compute: bool = False
    in_backbone: bool = False
    shares_weights: bool = False
    detail: str = ""

    @property
    def trainable_params(self) -> int:
        return sum(self.trainable_weight_elements)

    def detail_ints(self, key: str) -> tuple[int, ...]:
        """``kernel_size=(7, 7)`` in the detail -> (7, 7); () when absent."""
        for part in self.detail.split(") "):
            if part.startswith(key + "="):
                digits = part[len(key) + 1:].strip("()[] ")
                try:
                    return tuple(int(v) for v in digits.replace(" ", "").split(",") if v)
                except ValueError:
                    return ()
        return ()

    @property
    def non_trainable_params(self) -> int:
        return sum(self.non_trainable_weight_elements)

    @property
    def params(self) -> int:
        return self.trainable_params + self.non_trainable_params


@dataclass(frozen=True)
class ModelProfile:
    """The per-layer ledger of a model, free of any framework object."""

    name: str
    input_shape: tuple[int, ...]
    layers: tuple[LayerStats, ...]
    tensor_elements: tuple[int, ...]
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    label_elements: int = 1
    unknown_layer_types: tuple[str, ...] = ()

    def __hash__(self) -> int:
        # The engine's caches key on the profile; hashing hundreds of layers on every
        # lookup was a fifth of a frozen curve's time, so the hash is computed once.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.name, self.input_shape, self.layers, self.tensor_elements, self.input_ids,
                           self.output_ids, self.label_elements, self.unknown_layer_types))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:
        # String hashes differ between processes: a pickled copy computes its own.
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def total_params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def trainable_params(self) -> int:
        return sum(layer.trainable_params for layer in self.layers)

    @property
    def has_backbone(self) -> bool:
        return any(layer.in_backbone for layer in self.layers)


# Larger than any per-step batch trained in practice (the largest published data-parallel
# ImageNet batches are ~10^5-10^6); above it an estimate only measures the typo.
MAX_BATCH_SIZE = 1 << 24
MAX_DEVICES_PER_HOST = 8  # the meshes XLA's plan takes (calc.xla.cache.plan_request)
MAX_HOSTS = 4


@dataclass(frozen=True)
class TrainingConfig:
    """One training setup. Validated on construction."""

    batch_size: int = 32
    optimizer: Optimizer = Optimizer.ADAM
    optimizer_options: OptimizerOptions = field(default_factory=OptimizerOptions)
    precision: Precision = Precision.FLOAT32
    train_mode: TrainMode = TrainMode.ALL
    last_n_layers: int = 0
    gradient_accumulation_steps: int = 1
    num_gpus: int = 1  # data-parallel replicas: the global batch is split over them
    device: Device = Device.CPU
    # A keras.distribution mesh beyond data parallelism: its model axis (the preset's layout map shards the
    # weights over it) and the hosts its devices sit on. The mesh is num_gpus x model_parallel devices.
    model_parallel: int = 1
    hosts: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", Device(self.device))
        object.__setattr__(self, "optimizer", Optimizer(self.optimizer))
        object.__setattr__(self, "precision", Precision(self.precision))
        object.__setattr__(self, "train_mode", TrainMode(self.train_mode))
        for name in ("batch_size", "gradient_accumulation_steps", "num_gpus", "model_parallel", "hosts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer. Received: {name}={value!r}")
        if self.batch_size > MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be at most {MAX_BATCH_SIZE:,}. Received: batch_size={self.batch_size:,}")
        if self.train_mode is TrainMode.LAST_N and (
            isinstance(self.last_n_layers, bool)
            or not isinstance(self.last_n_layers, int)
            or self.last_n_layers < 1
        ):
            raise ValueError(
                "last_n_layers must be a positive integer when train_mode='last_n'. "
                f"Received: last_n_layers={self.last_n_layers!r}"
            )
        if self.batch_size % self.num_gpus:
            raise ValueError(
                "batch_size must be divisible by num_gpus (data parallelism splits the "
                f"global batch). Received: batch_size={self.batch_size}, num_gpus={self.num_gpus}"
            )
        if self.hosts > MAX_HOSTS or self.devices % self.hosts:
            raise ValueError(f"a mesh's cards sit on 1 to {MAX_HOSTS} hosts, the same number on each. "
                             f"Received: {self.devices} cards on {self.hosts} hosts")

    @property
    def per_replica_batch(self) -> int:
        return self.batch_size // self.num_gpus

    def at_replica_batch(self, batch: int) -> TrainingConfig:
        """The same setup, mesh and all, with ``batch`` examples on each data-parallel replica."""
        return replace(self, batch_size=batch * self.num_gpus)

    @property
    def devices(self) -> int:
        """The cards the step runs on: the data-parallel replicas times the model axis."""
        return self.num_gpus * self.model_parallel

    @property
    def mesh(self) -> str:
        """The mesh as ``DATAxMODEL`` (``1x1``: one card)."""
        return f"{self.num_gpus}x{self.model_parallel}"


@dataclass(frozen=True)
class MemoryBreakdown:
    """Predicted allocator peak of one training step on one device, in bytes.

    The components sum to ``peak_bytes``. ``framework_overhead_bytes`` (CUDA context,
    library handles) is not part of the allocator peak; it is what ``nvidia-smi`` shows
    on top and is filled in only when a GPU preset is given.
    """

    weights_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    activations_bytes: int
    backward_transient_bytes: int
    input_batch_bytes: int
    other_bytes: int  # optimizer update temporaries beyond the running update's (calc.facts.optimizers: early_temporaries, branch_temporaries)
    peak_phase: str = ""
    # Whole chunks the BFC allocator hands out beyond the tensors' sizes, where a
    # simulation of it at this batch says more than the walk (calc.engine.allocator,
    # calc.engine.floors.floored).
    allocator_bytes: int = 0

    @property
    def peak_bytes(self) -> int:
        return sum(self.components().values())

    def components(self) -> dict[str, int]:
        return {
            "weights": self.weights_bytes,
            "gradients": self.gradients_bytes,
            "optimizer_state": self.optimizer_state_bytes,
            "activations": self.activations_bytes,
            "backward_transient": self.backward_transient_bytes,
            "input_batch": self.input_batch_bytes,
            "other": self.other_bytes,
            "allocator": self.allocator_bytes,
        }
