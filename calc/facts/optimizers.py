"""Optimizer state and update temporaries in Keras 3, per trainable variable: one entry per optimizer.

Adding an optimizer: a member of ``calc.types.Optimizer`` and one ``OptimizerFacts`` entry
in ``OPTIMIZERS`` below (``tests/test_estimate.py`` checks that every member has one).

Sources, per field of ``OptimizerFacts``:

- ``slots``: the number of variables of the variable's shape that the optimizer's
  ``build()`` creates per trainable variable (``keras/src/optimizers/*.py``, Keras 3.15).
  Every optimizer also keeps scalars (iterations, learning rate): far below the
  allocator's 256 KiB tracking threshold, so they never show in the peak.
- ``update_scratch``: variable-sized buffers alive at once while one variable's
  ``update_step`` runs, its gradient included (the elementwise ops of the update make
  temporaries; TensorFlow reuses an input's buffer where nothing else reads it). Measured
  with ``archive/probes/probe_optimizers.py``: one 4096x4096 Dense kernel, the peak of a
  step minus what was resident before it, in units of the kernel's size. Measured twice
  (four runs of Ftrl, Adadelta and Lion, one of the rest): every optimizer the same both
  times but Ftrl, 3 in one run and 4-5 in the others (its update's many elementwise ops,
  whose order the executor chooses), and Adadelta 4-5. Ftrl is counted at the upper mode,
  as Adam's bimodal update is (``branch_temporaries``): the side that under-predicts less.
- ``early_temporaries``: variable-sized temporaries an update computes from its slots
  alone, before the gradient exists. In the traced step a read of a slot that no earlier
  op writes depends on nothing (automatic control dependencies order it only before the
  slot's own assign), so the executor runs such products at the start of the step and
  each stays alive until its variable's update consumes it: through the whole forward
  pass and the backward pass up to that update. From each optimizer's ``update_step``:
  SGD momentum: m * momentum; RMSprop: rho * velocity (+ momentum * m, + rho *
  average_grad when centered); Adadelta: rho * accumulated_grad, sqrt(accumulated_delta_var
  + eps), rho * accumulated_delta_var; Ftrl: 2 * l2_shrinkage * variable, accum **
  -lr_power; Adamax: beta_2 * u; Lion: m * beta_1, m * beta_2; use_ema: momentum *
  average. Adam, Nadam, Adagrad, Lamb and Adafactor only read their slots after the
  gradient. Measured (``archive/probes/probe_gradients.py``, a chain of N 4 MiB Dense
  kernels, batch 8): the step's increment grows by 1.0 kernel per layer for SGD momentum
  and RMSprop, 1.9 for Ftrl, 3.1 for Adadelta, 2.2 for Lion, 2.0 for RMSprop momentum,
  1.0 for AdamW, 0.67 for Adamax and for Adam with use_ema, 0 for SGD, Adam, Nadam,
  Adagrad, Lamb and Adafactor. On ResNet50 (128 px, batch 8) the step's increment over
  SGD's was 0.93x the parameters for SGD momentum, 0.98x for RMSprop: alive at the peak.
- ``decoupled_weight_decay`` (AdamW): the decay (keras/src/backend/tensorflow/optimizer.py
  ``_apply_weight_decay``: variable.assign_sub(variable * wd * lr)) writes every variable
  while the forward pass still holds its value for the backward pass; TensorFlow's
  resource-variable update copies a buffer that another tensor still references
  (resource_variable_ops.cc, PrepareToUpdateVariable), so a second copy of each variable
  lives until its layer's backward: measured as one early temporary per variable (Dense
  chain: 1.0 kernel per layer; ResNet50 128 px b8: adamw's step +97 MiB over sgd's,
  params 98 MiB). Under mixed precision the layers hold a 16-bit cast instead, the buffer
  is unshared and updated in place: no copy (ResNet50 mixed_bfloat16 adamw is within 1 %
  without it, +16 % with it).
- ``branch_temporaries``: under mixed_float16 Keras' LossScaleOptimizer applies every
  update inside one ops.cond whose predicate needs every gradient
  (``calc.engine.training.waits_for_all_gradients``). When the branch starts, the update
  ops of all variables are ready at once, and the peak of the update holds, besides every
  gradient, update temporaries of many variables together. Measured
  (``archive/probes/probe_gradients.py --precision mixed_float16``, chains of 8 to 64
  Dense kernels, one to three runs each): the step's increment beyond the gradients, per
  variable. The runs scatter (SGD momentum 0.27-0.99, Adadelta 1.25-2.9; RMSprop and
  Adagrad 1.0 in every run), as do real steps whose peak is the update (ResNet152 128 px
  b6 Adadelta with EMA: 1543 / 1587 / 1912 MiB); counted: their mean. Adam, AdamW and
  Nadam are bimodal (Adam 0.13-0.19 or 0.69-1.03, Nadam 0.63-0.69 or 2.0): counted at
  the upper mode, the side that does not run out of memory; measured after the means
  were first counted, real steps agreed (ResNet50 96 px b4 Adam, EfficientNetB4 128 px
  b2 Nadam: 10-12 % above the mean's prediction; docs/notes/optimizer-temporaries.md).
- ``densifies_sparse``: an Embedding's gradient is tf.IndexedSlices; Keras' optimizers
  densify it where an op mixes it with a slot (UnsortedSegmentSum, table-sized). Plain
  SGD scatters lr * values into the table and never densifies.
- ``options``: the ``OptimizerOptions`` switches the optimizer takes (its Keras 3
  constructor arguments), each adding one full-size slot in ``build()`` (SGD/RMSprop
  momentums, RMSprop's average gradient, Adam's velocity_hat) and what ``OptionFacts``
  says. ``use_ema`` applies to every optimizer (``EMA_*`` below).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from calc.types import Optimizer, OptimizerOptions


@dataclass(frozen=True)
class OptionFacts:
    """What one ``OptimizerOptions`` switch adds to the optimizer that takes it.

    ``branch_temporaries``, when given, replaces the optimizer's figure (it was measured
    with the option on); with several options on, the largest counts.
    """

    slots: int = 1
    update_scratch: int = 0
    early_temporaries: int = 0
    branch_temporaries: float | None = None
    densifies_sparse: bool = False


@dataclass(frozen=True)
class OptimizerFacts:
    """One optimizer's memory, per trainable variable, in units of the variable's size."""

    slots: int
    update_scratch: int
    early_temporaries: int
    branch_temporaries: float
    options: dict[str, OptionFacts] = field(default_factory=dict)
    decoupled_weight_decay: bool = False
    densifies_sparse: bool = True


OPTIMIZERS: dict[Optimizer, OptimizerFacts] = {
    Optimizer.SGD: OptimizerFacts(
        slots=0, update_scratch=1, early_temporaries=0, branch_temporaries=0.0, densifies_sparse=False,
        options={"momentum": OptionFacts(update_scratch=1, early_temporaries=1, branch_temporaries=0.7,
                                         densifies_sparse=True)}),
    # momentums, velocities (+ velocity_hats with amsgrad)
    Optimizer.ADAM: OptimizerFacts(slots=2, update_scratch=2, early_temporaries=0, branch_temporaries=1.0,
                                   options={"amsgrad": OptionFacts()}),
    Optimizer.ADAMW: OptimizerFacts(slots=2, update_scratch=2, early_temporaries=0, branch_temporaries=1.0,
                                    options={"amsgrad": OptionFacts()}, decoupled_weight_decay=True),
    Optimizer.NADAM: OptimizerFacts(slots=2, update_scratch=3, early_temporaries=0, branch_temporaries=2.0),
    Optimizer.ADAMAX: OptimizerFacts(slots=2, update_scratch=3, early_temporaries=1, branch_temporaries=1.0),  # m, u
    # velocities (+ momentums, + average_gradients if centered)
    Optimizer.RMSPROP: OptimizerFacts(
        slots=1, update_scratch=3, early_temporaries=1, branch_temporaries=1.0,
        options={"momentum": OptionFacts(early_temporaries=1, branch_temporaries=1.7),
                 "centered": OptionFacts(early_temporaries=1, branch_temporaries=1.9)}),
    Optimizer.ADAGRAD: OptimizerFacts(slots=1, update_scratch=2, early_temporaries=0, branch_temporaries=1.0),
    # accumulated_grads, accumulated_delta_vars
    Optimizer.ADADELTA: OptimizerFacts(slots=2, update_scratch=5, early_temporaries=3, branch_temporaries=1.7),
    # accumulators, linears
    Optimizer.FTRL: OptimizerFacts(slots=2, update_scratch=5, early_temporaries=2, branch_temporaries=1.4),
    Optimizer.LION: OptimizerFacts(slots=1, update_scratch=4, early_temporaries=2, branch_temporaries=1.0),  # momentums
    Optimizer.LAMB: OptimizerFacts(slots=2, update_scratch=2, early_temporaries=0, branch_temporaries=0.8),
    # velocities (full size) besides the factored r, c
    Optimizer.ADAFACTOR: OptimizerFacts(slots=1, update_scratch=2, early_temporaries=0, branch_temporaries=0.1),
}

# use_ema, on every optimizer: one copy of each variable (``_model_variables_moving_average``)
# and its early temporary, momentum * average. Under mixed_float16 it adds to the update
# branch: Adam with EMA 0.73 against Adam's 0.5 (the means at 8-32 kernels).
EMA_SLOTS = 1
EMA_EARLY_TEMPORARIES = 1
BRANCH_EMA = 0.2

# How much of the early temporaries the peak holds, on average. The walk makes them all at
# the step's start, but fewer are there at the measured peak: on the 68 float32
# full-training validation cases without a spread caveat, the measured peak over the
# walk's requests falls as their share of the step grows (correlation -0.57; by least
# squares 6.9 % - 0.33 x their share), i.e. about a third of them is missing at the
# peak. Probes agree in part: a Dense chain held 0.67 per variable for Adamax and Adam
# with EMA, InceptionResNetV2 0.47 for SGD momentum, ResNet50 0.93
# (archive/probes/probe_gradients.py; docs/notes/optimizer-temporaries.md). Which run late is the
# executor's scheduling, which the walk does not simulate. Counting 2/3 and 3/4 of them
# gave the same median on the 195 cases then measured (2.6 %); 3/4 under-predicts fewer.
EARLY_TEMPORARIES_ALIVE = 0.75

# Keras applies each gradient as soon as it exists (no control dependency between
# the per-variable updates), but the executor runs the update ops behind backward
# ops already queued, so some gradients wait. How many is the executor's scheduling,
# which the walk does not simulate: six weighted layers' worth fitted the ResNet50 /
# MobileNetV2 measurements at batch 1-32 best (archive/probes/probe_layers.py and the
# validation set; 3 to 10 change the median error by under half a point).
GRADIENT_LAG = 6


def _options_on(optimizer: Optimizer, options: OptimizerOptions) -> list[OptionFacts]:
    """The facts of the switches in ``options`` that are on and that ``optimizer`` takes."""
    return [facts for name, facts in OPTIMIZERS[optimizer].options.items() if getattr(options, name)]


def applicable_options(optimizer: Optimizer | str) -> list[str]:
    """The ``OptimizerOptions`` switches that change ``optimizer`` (besides ``use_ema``)."""
    return list(OPTIMIZERS[Optimizer(optimizer)].options)


def slots_per_variable(optimizer: Optimizer, options: OptimizerOptions, accumulation_steps: int) -> int:
    """Full-size optimizer variables per trainable variable.

    ``use_ema`` adds one copy; ``gradient_accumulation_steps > 1`` adds one accumulator per variable.
    """
    slots = OPTIMIZERS[optimizer].slots + sum(o.slots for o in _options_on(optimizer, options))
    if options.use_ema:
        slots += EMA_SLOTS
    if accumulation_steps > 1:
        slots += 1
    return slots


def update_scratch(optimizer: Optimizer, options: OptimizerOptions) -> int:
    """Variable-sized buffers alive during one variable's update, the gradient included."""
    return OPTIMIZERS[optimizer].update_scratch + sum(o.update_scratch for o in _options_on(optimizer, options))


def early_temporaries(optimizer: Optimizer, options: OptimizerOptions, mixed_precision: bool = False) -> int:
    """Variable-sized update temporaries per trainable variable computed before the gradient.

    ``mixed_precision``: layers read a 16-bit cast of each variable, so AdamW's weight
    decay finds the variable's buffer unshared and updates it in place (no copy).
    """
    facts = OPTIMIZERS[optimizer]
    n = facts.early_temporaries + sum(o.early_temporaries for o in _options_on(optimizer, options))
    if facts.decoupled_weight_decay and not mixed_precision:
        n += 1
    if options.use_ema:
        n += EMA_EARLY_TEMPORARIES
    return n


def branch_temporaries(optimizer: Optimizer, options: OptimizerOptions) -> float:
    """Update temporaries per variable the peak of mixed_float16's update branch holds, beyond the gradient."""
    measured = [o.branch_temporaries for o in _options_on(optimizer, options) if o.branch_temporaries is not None]
    k = max(measured) if measured else OPTIMIZERS[optimizer].branch_temporaries
    return k + (BRANCH_EMA if options.use_ema else 0.0)


def densifies_sparse_gradients(optimizer: Optimizer, options: OptimizerOptions) -> bool:
    """Whether the update turns an Embedding's sparse gradient into a table-sized tensor."""
    return OPTIMIZERS[optimizer].densifies_sparse or any(o.densifies_sparse for o in _options_on(optimizer, options))
