"""The words for why runs of a step differ, written once for the CLI, the dashboard and the docs.

``calc.estimate.spread_caveats`` names the kinds a step carries (kind -> the bytes behind
it); the validation report keeps, per kind, how the estimate fared on the measured steps of
that kind (``calc.validation.records.CaveatRecord``). ``caveat_note`` joins the two into the
sentence a user reads.

Every text is an English template; the public functions take ``tr`` (``english`` here, the
CLI's; the dashboard passes ``dashboard.i18n.tr``, which translates the template first), and
the texts chosen later (``CaveatWords``) are marked with ``mark`` where they are written.
This module imports nothing of the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

Translate = Callable[..., str]


def english(text: str, /, **values: object) -> str:
    """The CLI's ``tr``: the English template with its values put in."""
    return text.format(**values) if values else text


def mark(text: str) -> str:
    """Marks a text for translation where it is written (``dashboard.i18n`` reads the literal)."""
    return text


@dataclass(frozen=True)
class CaveatWords:
    group: str  # the group of validation cases, as the tables name it
    steps: str  # how a record's sentence names the steps of this kind
    warning: str  # what a user of such a step is told; ``{size}`` is the bytes behind it, formatted


# The group of validation cases that carry none of the kinds.
NO_CAVEAT = "none"
NO_CAVEAT_GROUP = mark("none of the kinds below")

CAVEATS: dict[str, CaveatWords] = {
    "inference_layout": CaveatWords(
        mark("frozen backbone or last N layers (part of the model in inference)"),
        mark("frozen or last-N steps"),
        mark("Frozen backbone or last N layers: part of the model runs in inference, where each feature map is freed "
             "soon after it is made and TensorFlow's allocator hands out whole chunks, so the real peak jumps between "
             "neighbouring batch sizes and differs between runs of the same step. The estimate simulates the "
             "allocator at every batch (the grey 'allocator' part, {size}; docs/notes/allocator.md)")),
    "large_variable": CaveatWords(
        mark("a variable of 128 MiB or more (VGG's Flatten head)"),
        mark("steps with such a variable"),
        mark("One variable of this model holds {size} (a Flatten head's first Dense layer grows with the image size; "
             "a no-top head with global pooling has none). When the executor applies its gradient decides the peak, "
             "so repeated runs of one step can have two modes, and the estimate lies between them")),
    "large_fixed_request": CaveatWords(
        mark("one request of 128 MiB or more whatever the batch (ConvNeXt)"),
        mark("steps with such a request"),
        mark("The backward pass of this model's grouped depthwise convolutions (compiled by XLA, as Keras does on "
             "TensorFlow) asks for {size} at once, whatever the batch. TensorFlow's allocator may hand that request "
             "a free chunk up to 128 MiB larger, depending on what its pool holds, so repeated runs of one step "
             "differ")),
    "updates_together": CaveatWords(
        mark("mixed_float16 with the peak at the update (all updates start together)"),
        mark("mixed_float16 steps whose peak is the update"),
        mark("Mixed float16: Keras' loss scaling checks every gradient before any update, then the updates of all "
             "variables start together, and this step peaks there ({size} of update temporaries counted, the "
             "average measured on Dense chains). How many of them are alive at once differs between runs")),
    "float16_buffer": CaveatWords(
        mark("mixed_float16 with the peak at a float16 kernel's buffer (small steps)"),
        mark("mixed_float16 steps whose peak is a float16 kernel's buffer"),
        mark("Mixed float16 on a CPU: TensorFlow's own float16 kernels run, and this step peaks while one of them "
             "holds a buffer of {size} (a convolution gradient's im2col buffer, or a Dense layer's float32 copies), "
             "which the allocator may place in a larger free chunk, so repeated runs differ. On a GPU these buffers "
             "do not exist")),
}
CAVEAT_STEPS = {kind: words.steps for kind, words in CAVEATS.items()}
CAVEAT_GROUPS = {NO_CAVEAT: NO_CAVEAT_GROUP, **{kind: words.group for kind, words in CAVEATS.items()}}

OWN_MODEL_STEPS = mark("steps of own models (saved files that are not Keras applications)")


def _record_values(record, steps: str, tr: Translate) -> dict[str, object]:
    return dict(cases=record.cases, steps=tr(steps), low=record.lowest_error, high=record.highest_error,
                margin=record.margin_for_every_run)


def record_sentence(record, steps: str, *, tr: Translate = english) -> str:
    """A ``CaveatRecord`` in words, e.g. ``steps="ConvNeXt steps"``; no final full stop."""
    return tr("on {cases} measured {steps} the estimate was off by {low:+.0%} to {high:+.0%} against the median "
              "run, and a safety margin of {margin:.0%} covers every single run", **_record_values(record, steps, tr))


def gpu_record_sentence(record, steps: str, *, tr: Translate = english) -> str:
    """``record_sentence`` for a record of the H100 slice."""
    return tr("with TensorFlow on an H100, on {cases} measured {steps} the estimate was off by {low:+.0%} to "
              "{high:+.0%} against the median run, and a safety margin of {margin:.0%} covers every single run",
              **_record_values(record, steps, tr))


def caveat_note(kind: str, size: str, record=None, gpu_record=None, *, tr: Translate = english) -> str:
    """The warning for one kind, with the measured record of its kind (and the H100 slice's
    for GPU kernels) where there is one; ends with a full stop."""
    warning = tr(CAVEATS[kind].warning, size=size)
    steps = CAVEAT_STEPS[kind]
    if record is not None and gpu_record is not None:
        return tr("{warning}: {record}; {gpu_record}.", warning=warning, record=record_sentence(record, steps, tr=tr),
                  gpu_record=gpu_record_sentence(gpu_record, steps, tr=tr))
    if record is not None:
        return tr("{warning}: {record}.", warning=warning, record=record_sentence(record, steps, tr=tr))
    if gpu_record is not None:
        return tr("{warning}; {gpu_record}.", warning=warning, gpu_record=gpu_record_sentence(gpu_record, steps, tr=tr))
    return tr("{warning}.", warning=warning)


def own_model_note(record, *, tr: Translate = english) -> str:
    """For a model the user brought, how the estimate fared on the own-model slice."""
    return tr("Your own model: the engine's rules were measured on Keras applications; {record}.",
              record=record_sentence(record, OWN_MODEL_STEPS, tr=tr))
