"""The rules of thumb from the seed documents, reproduced as their authors computed them.

Each function takes the quantities the seed uses and returns bytes (or the figure
the seed printed), so the dashboard can put them beside the engine and a
measurement. Where a seed rounded an intermediate figure, the ``as_printed``
variant rounds it the same way, so its worked example comes out to the digit.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.types import ModelProfile

MB = 1024**2  # the seeds divide by 1024^2 and call it MB


def count_neurons(profile: ModelProfile) -> int:
    """Seed 000's "number of neurons": every Output Shape in ``model.summary()`` summed.

    The input layer's output counts too (the seed's first term is 224x224x3 =
    150,528), and so do pooling and Flatten outputs.
    """
    total = sum(profile.tensor_elements[t] for t in profile.input_ids)
    for layer in profile.layers:
        total += sum(profile.tensor_elements[t] for t in layer.output_ids)
    return total


def nnc_bytes(neurons: int, params: int, batch_size: int) -> int:
    """Seed 000 (Sony Neural Network Console tutorial):

    bytes = (neurons x batch + params) x 2 (data & grad) x 4 bytes.

    Example: VGG16 at 224x224, batch 8 -> (15,262,696 x 8 + 138,357,544) x 8
    = 2,083,672,896 bytes.
    """
    return (neurons * batch_size + params) * 2 * 4


@dataclass(frozen=True)
class Cs231nAnswer:
    """Seed 002's accepted answer, in MB of 1024^2 bytes."""

    activations_mb_per_image: float
    parameters_mb: float
    miscellaneous_mb: float
    total_mb: float


def cs231n_answer(
    activations: int, params: int, input_elements: int, batch_size: int, *, as_printed: bool = True
) -> Cs231nAnswer:
    """Seed 002: activations x 2 (value and gradient) x 4 bytes per image, times the batch;
    parameters x 3 (value, gradient, momentum) x 4 bytes; the input batch x 4 bytes.

    With ``as_printed`` every MB figure is rounded to two decimals before the sum,
    as the answer did: 532,752 activations, 19,072,984 parameters, a 180x50x1 input
    and batch 128 give 4.06 x 128 + 218.27 + 4.39 = 742.34 MB.
    """
    act = activations * 2 * 4 / MB
    par = params * 4 * 3 / MB
    misc = batch_size * input_elements * 4 / MB
    if as_printed:
        act, par, misc = round(act, 2), round(par, 2), round(misc, 2)
        return Cs231nAnswer(act, par, misc, round(act * batch_size + par + misc, 2))
    return Cs231nAnswer(act, par, misc, act * batch_size + par + misc)


def cs231n_question_mb(activations: int, params: int, input_elements: int, batch_size: int) -> float:
    """Seed 002's question, before the answer: activations x 4 bytes (not times the
    batch, no gradient) + parameters x 3 x 4 + input batch x 4, two-decimal MB.
    Its example: 2.03 + 218.27 + 4.39 = 224.69 MB.
    """
    act = round(activations * 4 / MB, 2)
    par = round(params * 4 * 3 / MB, 2)
    misc = round(batch_size * input_elements * 4 / MB, 2)
    return round(act + par + misc, 2)


def nnc_bytes_for_profile(profile: ModelProfile, batch_size: int) -> int:
    return nnc_bytes(count_neurons(profile), profile.total_params, batch_size)


def max_batch_rule(gpu_bytes: int, tensor_elements: int, trainable_params: int) -> int:
    """Seed 004's answer: max batch = GPU bytes / 4 / (tensor size + trainable params).

    ``tensor_elements`` is the per-sample activation count. The rule divides all of
    the memory by the parameters as if they too grew with the batch, so it is far
    too small for large models and ignores optimizer state entirely.
    """
    if tensor_elements + trainable_params <= 0:
        raise ValueError("tensor_elements + trainable_params must be positive.")
    return int(gpu_bytes // 4 // (tensor_elements + trainable_params))


@dataclass(frozen=True)
class TinyCnnRow:
    height: int
    width: int
    depth: int
    filter_height: int
    filter_width: int

    @property
    def neurons(self) -> int:
        return self.height * self.width * self.depth

    @property
    def seed_weights(self) -> int:
        """The seed's weight column: filter_h x filter_w x depth x 4 (108 for layer 1)."""
        return self.filter_height * self.filter_width * self.depth * 4


# Seed 003's table: seven 3x3 conv layers of a tiny-cnn network on a 512x512x3 image.
TINY_CNN_TABLE: tuple[TinyCnnRow, ...] = tuple(
    TinyCnnRow(512 >> i, 512 >> i, 3 << i, 3, 3) for i in range(7)
)


def tiny_cnn_bytes(rows: tuple[TinyCnnRow, ...] = TINY_CNN_TABLE, bytes_per_value: int = 4) -> int:
    """Seed 003: (sum of neurons + sum of weights) x bytes per value.

    With 4 bytes: (1,560,576 + 13,716) x 4 = 6,297,168 bytes, the figure the seed
    prints; the "about 12 MB" beside it is the same count at 8 bytes (12,594,336).
    """
    return (sum(r.neurons for r in rows) + sum(r.seed_weights for r in rows)) * bytes_per_value


def tiny_cnn_corrected_weights(rows: tuple[TinyCnnRow, ...] = TINY_CNN_TABLE) -> int:
    """The answer's correction: a 3x3 conv from depth d to 2d has 3 x 3 x d x 2d weights
    (layer 7: 3 x 3 x 96 x 192 = 165,888, not 6,912)."""
    return sum(r.filter_height * r.filter_width * (r.depth // 2) * r.depth for r in rows[1:])
