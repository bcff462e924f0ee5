"""What the card adds to XLA's plan by a known mechanism, in bytes per sample: kept free by every verdict.

XLA's plan is compiled for the card without one, so what the card's own compile chooses is not in it
(docs/ACCURACY.md, "Margins"):

- **A causal LM's logits** (``LOGITS``): on an H200 with XLA's autotuner on (as a user runs), the steps
  whose process peaked over their plan did so by one buffer the size of the step's logits in the
  compute dtype (batch x tokens x vocabulary x 2 bytes in bfloat16; docs/KERASHUB.md). A text step with
  a language-model head keeps that buffer free. The autotuner tunes each card's own partitioned
  program, so on a mesh it is one card's logits: one replica's where the head has its own weights, and
  DATA / MODEL replicas' where the head is the token embedding, whose vocabulary the layout map puts on
  the model axis and its hidden size on the data axis (XLA's partitioner gathers the batch over the data
  axis to contract it; ``tools/mesh_logits.py`` reads it from the partitioned module, docs/MESHES.md).
- **A convolution's cuDNN workspace** (``WORKSPACE``): TensorFlow's XLA step asks cuDNN's autotuner for
  each convolution's algorithm on the card, and the chosen algorithm's workspace is live while it
  runs; the plan gives every convolution none. Where the steps measured on an H100 were large, the
  excess stayed under the operands (input and output) of the model's largest convolution (VGG16 0.89
  of them, ResNet50 0.86, InceptionV3 0.79): a catalogue model keeps that much free.

What the measured steps still show beyond these bytes is the record's residual share
(``calc.validation.margins``). Pure Python: the largest convolution is read from the model's shipped
ledger at its default size and scaled to the image's area, so every page and the command line read the
same bytes whether or not the ledger at this size was built.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from calc.catalogue import ModelFile, ModelSpec, make_spec
from calc.hub import HubModel, HubSpec
from calc.types import TrainingConfig

LOGITS = "logits"
WORKSPACE = "conv_workspace"
CONVOLUTIONS = ("Conv1D", "Conv2D", "Conv3D", "DepthwiseConv1D", "DepthwiseConv2D", "SeparableConv1D",
                "SeparableConv2D", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose")


@dataclass(frozen=True)
class Kept:
    """Bytes a verdict keeps free beside the plan, growing with the one-device batch, and their mechanism."""

    mechanism: str = ""  # LOGITS, WORKSPACE, or "" where the step has neither
    per_sample_bytes: int = 0
    share: tuple[int, int] = (1, 1)  # of one replica's logits, one card's (``logits_share``)

    def at(self, batch: int) -> int:
        """The bytes at one device's ``batch``."""
        return self.per_sample_bytes * max(0, batch)


def compute_bytes(dtype_or_precision: str) -> int:
    """A tensor's bytes per element in the step's compute dtype: 4 in float32, 2 under a 16-bit policy."""
    return 4 if dtype_or_precision == "float32" else 2


def logits_share(model: HubModel, config: TrainingConfig | None) -> tuple[int, int]:
    """The replicas' logits one card of ``config``'s mesh holds, as a reduced (numerator, denominator): DATA / MODEL
    where a model axis splits a head tied to the token embedding, else one replica's (1, 1)."""
    if config is None or config.model_parallel == 1 or not model.head_tied:
        return 1, 1
    common = math.gcd(config.num_gpus, config.model_parallel)
    return config.num_gpus // common, config.model_parallel // common


def share_text(share: tuple[int, int]) -> str:
    """A share as the pages and the command line write it: "1/2", "2"."""
    return f"{share[0]}/{share[1]}" if share[1] > 1 else str(share[0])


def logits_per_sample(spec: HubSpec) -> int:
    """A causal LM's logits for one sequence: tokens x vocabulary x the compute dtype's bytes (0 for other tasks)."""
    model = spec.model
    if model.task != "causal_lm":
        return 0
    return spec.sequence_length * int(model.backbone.get("vocabulary_size", 0)) * compute_bytes(spec.dtype)


def _largest_convolution(profile) -> int:
    """The elements of the largest convolution's input and output, one sample's (0 without a convolution)."""
    best = 0
    for layer in profile.layers:
        if layer.layer_type in CONVOLUTIONS:
            operands = (sum(profile.tensor_elements[i] for i in layer.input_ids)
                        + sum(profile.tensor_elements[i] for i in layer.output_ids))
            best = max(best, operands)
    return best


@functools.cache
def _native_convolution(name: str) -> tuple[int, int]:
    """(elements of the largest convolution's operands, image area) at a catalogue model's default size, from
    its shipped ledger; (0, 1) where none is shipped."""
    from calc.profiles import get_profile

    spec = make_spec(name)
    try:
        profile = get_profile(spec, build=False)
    except ValueError:
        return 0, 1
    return _largest_convolution(profile), spec.height * spec.width


def convolution_per_sample(spec: ModelSpec | ModelFile, precision: str) -> int:
    """The largest convolution's operands for one sample, in bytes: a catalogue model's scaled from its default
    size to ``spec``'s image area (a convolution's tensors grow with the image's area); an own file's from its
    ledger where it is known, else 0."""
    if isinstance(spec, ModelFile):
        from calc.profiles import known_file_profile

        try:
            profile = known_file_profile(spec)
        except OSError:
            return 0
        elements = 0 if profile is None else _largest_convolution(profile)
    else:
        native, area = _native_convolution(spec.name)
        elements = -(-native * spec.height * spec.width // area)
    return elements * compute_bytes(precision)


def kept_for(spec: ModelSpec | ModelFile | HubSpec, precision: str, config: TrainingConfig | None = None) -> Kept:
    """What one card of a step of ``spec`` keeps free beside its plan (``precision``: the catalogue's; a KerasHub
    model's compute dtype is its own; ``config``: its mesh, where it has one)."""
    if isinstance(spec, HubSpec):
        if not (logits := logits_per_sample(spec)):
            return Kept()
        numerator, denominator = share = logits_share(spec.model, config)
        return Kept(LOGITS, -(-logits * numerator // denominator), share)  # one card's, rounded up a sample
    workspace = convolution_per_sample(spec, precision)
    return Kept(WORKSPACE, workspace) if workspace else Kept()
