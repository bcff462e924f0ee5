"""Optimizer state in Keras 3, per trainable variable.

Slot counts follow each optimizer's ``build()`` in ``keras/src/optimizers/*.py``
(Keras 3.15): the number of variables of the same shape it creates per trainable
variable.
"""

from __future__ import annotations

from calc.types import Optimizer, OptimizerOptions

# Which optimizers each option of ``OptimizerOptions`` applies to (their Keras 3
# constructor arguments); each one that applies adds one full-size slot in ``build()``
# (SGD/RMSprop momentums, RMSprop's average gradient, Adam's velocity_hat).
# ``use_ema`` applies to every optimizer.
OPTION_OPTIMIZERS: dict[str, frozenset[Optimizer]] = {
    "momentum": frozenset({Optimizer.SGD, Optimizer.RMSPROP}),
    "centered": frozenset({Optimizer.RMSPROP}),
    "amsgrad": frozenset({Optimizer.ADAM, Optimizer.ADAMW}),
}


def applicable_options(optimizer: Optimizer | str) -> list[str]:
    """The ``OptimizerOptions`` switches that change ``optimizer`` (besides ``use_ema``)."""
    return [name for name, applies in OPTION_OPTIMIZERS.items() if Optimizer(optimizer) in applies]


# Full-size slot variables per trainable variable, before options.
OPTIMIZER_SLOTS: dict[Optimizer, int] = {
    Optimizer.SGD: 0,  # + momentum
    Optimizer.ADAM: 2,  # momentums, velocities (+ velocity_hats with amsgrad)
    Optimizer.ADAMW: 2,
    Optimizer.NADAM: 2,
    Optimizer.ADAMAX: 2,  # m, u
    Optimizer.RMSPROP: 1,  # velocities (+ momentums, + average_gradients if centered)
    Optimizer.ADAGRAD: 1,  # accumulators
    Optimizer.ADADELTA: 2,  # accumulated_grads, accumulated_delta_vars
    Optimizer.FTRL: 2,  # accumulators, linears
    Optimizer.LION: 1,  # momentums
    Optimizer.LAMB: 2,
    Optimizer.ADAFACTOR: 1,  # velocities (full size) besides the factored r, c
}

# Variable-sized buffers alive at once while one variable's ``update_step`` runs,
# its gradient included (the elementwise ops of the update make temporaries;
# TensorFlow reuses an input's buffer where nothing else reads it). Measured with
# benchmarks/probe_optimizers.py: one 4096x4096 Dense kernel, the peak of a step
# minus what was resident before it, in units of the kernel's size. Measured again at
# stop 19 (four runs of Ftrl, Adadelta and Lion, one of the rest): every optimizer as
# below but Ftrl, 5 / 4 / 4 / 5 where stop 2 had measured 3 (its update's many
# elementwise ops, whose order the executor chooses), and Adadelta 4 / 5 / 5 / 5.
# Ftrl is counted at the upper mode, as Adam's bimodal update is (BRANCH_TEMPORARIES):
# on the 19 Ftrl validation cases the under-predictions shrank (NASNetMobile 64 px b2
# -19.4 -> -12.5 %, EfficientNetV2B1 64x96 b2 -8.6 -> -1.8 %, EfficientNetB3 256x64 b4
# bf16 -8.1 -> -4.9 %), median 3.0 -> 2.9 %, nothing else moved.
UPDATE_SCRATCH: dict[Optimizer, int] = {
    Optimizer.SGD: 1,  # 2 with momentum (see update_scratch)
    Optimizer.ADAM: 2,
    Optimizer.ADAMW: 2,
    Optimizer.NADAM: 3,
    Optimizer.ADAMAX: 3,
    Optimizer.RMSPROP: 3,
    Optimizer.ADAGRAD: 2,
    Optimizer.ADADELTA: 5,
    Optimizer.FTRL: 5,
    Optimizer.LION: 4,
    Optimizer.LAMB: 2,
    Optimizer.ADAFACTOR: 2,
}


def update_scratch(optimizer: Optimizer, options: OptimizerOptions) -> int:
    """Variable-sized buffers alive during one variable's update, the gradient included."""
    if optimizer is Optimizer.SGD and options.momentum:
        return 2
    return UPDATE_SCRATCH[optimizer]


# Variable-sized temporaries per trainable variable that an optimizer's update computes
# from its slots alone, before the gradient exists. In the traced step a read of a slot
# that no earlier op writes depends on nothing (automatic control dependencies order
# it only before the slot's own assign), so the executor runs such products at the
# start of the step and each stays alive until its variable's update consumes it:
# through the whole forward pass and the backward pass up to that update. From each
# optimizer's ``update_step`` (keras/src/optimizers/*.py, Keras 3.15):
#   SGD momentum: m * momentum; RMSprop: rho * velocity (+ momentum * m,
#   + rho * average_grad when centered); Adadelta: rho * accumulated_grad,
#   sqrt(accumulated_delta_var + eps), rho * accumulated_delta_var; Ftrl:
#   2 * l2_shrinkage * variable, accum ** -lr_power; Adamax: beta_2 * u; Lion:
#   m * beta_1, m * beta_2; use_ema: momentum * average. Adam, Nadam, Adagrad,
#   Lamb and Adafactor only read their slots after the gradient. AdamW's decoupled
#   weight decay (keras/src/backend/tensorflow/optimizer.py _apply_weight_decay:
#   variable.assign_sub(variable * wd * lr)) writes every variable while the forward
#   pass still holds its value for the backward pass; TensorFlow's resource-variable
#   update copies a buffer that another tensor still references
#   (resource_variable_ops.cc, PrepareToUpdateVariable), so a second copy of each
#   variable lives until its layer's backward: measured as one more buffer per
#   variable (Dense chain: 1.0 kernel per layer; ResNet50 128 px b8: adamw's step
#   +97 MiB over sgd's, params 98 MiB). Under mixed precision the layers hold a 16-bit
#   cast instead, the buffer is unshared and updated in place: no copy (ResNet50
#   mixed_bfloat16 adamw is within 1 % without it, +16 % with it).
# Measured (benchmarks/probe_gradients.py, a chain of N 4 MiB Dense kernels, batch 8):
# the step's increment grows by 1.0 kernel per layer for SGD momentum and RMSprop,
# 1.9 for Ftrl, 3.1 for Adadelta, 2.2 for Lion, 2.0 for RMSprop momentum, 1.0 for
# AdamW, 0.67 for Adamax and for Adam with use_ema, 0 for SGD, Adam, Nadam, Adagrad,
# Lamb and Adafactor. On ResNet50 (128 px, batch 8) the step's increment over SGD's was
# 0.93x the parameters for SGD momentum, 0.98x for RMSprop: alive at the peak.
EARLY_TEMPORARIES: dict[Optimizer, int] = {
    Optimizer.SGD: 0,  # 1 with momentum (see early_temporaries)
    Optimizer.ADAM: 0,
    Optimizer.ADAMW: 1,  # measured; the decoupled weight decay, see above
    Optimizer.NADAM: 0,
    Optimizer.ADAMAX: 1,
    Optimizer.RMSPROP: 1,
    Optimizer.ADAGRAD: 0,
    Optimizer.ADADELTA: 3,
    Optimizer.FTRL: 2,
    Optimizer.LION: 2,
    Optimizer.LAMB: 0,
    Optimizer.ADAFACTOR: 0,
}


# How much of those temporaries the peak holds, on average. The walk makes them all at
# the step's start, but fewer are there at the measured peak: on the 68 float32
# full-training validation cases without a spread caveat, the measured peak over the
# walk's requests falls as their share of the step grows (correlation -0.57; by least
# squares 6.9 % - 0.33 x their share), i.e. about a third of them is missing at the
# peak. Probes agree in part: a Dense chain held 0.67 per variable for Adamax and Adam
# with EMA, InceptionResNetV2 0.47 for SGD momentum, ResNet50 0.93 (benchmarks/
# probe_gradients.py; docs/MEASUREMENTS.md). Which run late is the executor's
# scheduling, which the walk does not simulate. Counting 2/3 and 3/4 of them gave the
# same median on the 195 cases measured before stop 12 (2.6 %); 3/4 under-predicts fewer.
EARLY_TEMPORARIES_ALIVE = 0.75


def early_temporaries(optimizer: Optimizer, options: OptimizerOptions, mixed_precision: bool = False) -> int:
    """Variable-sized update temporaries per trainable variable computed before the gradient.

    ``mixed_precision``: layers read a 16-bit cast of each variable, so AdamW's weight
    decay finds the variable's buffer unshared and updates it in place (no copy).
    """
    n = EARLY_TEMPORARIES[optimizer]
    if optimizer is Optimizer.ADAMW and mixed_precision:
        n -= 1
    if optimizer is Optimizer.SGD and options.momentum:
        n += 1
    if optimizer is Optimizer.RMSPROP:
        n += int(options.momentum) + int(options.centered)
    if options.use_ema:
        n += 1
    return n


# Under mixed_float16 Keras' LossScaleOptimizer applies every update inside one ops.cond
# whose predicate needs every gradient (calc.estimate.waits_for_all_gradients). When the
# branch starts, the update ops of all variables are ready at once, and the peak of the
# update holds, besides every gradient, update temporaries of many variables together.
# Measured (benchmarks/probe_gradients.py --precision mixed_float16, chains of 8 to 64
# Dense kernels, one to three runs each): the step's increment beyond the gradients, per
# variable. The runs scatter (SGD momentum 0.27-0.99, Adadelta 1.25-2.9; RMSprop and
# Adagrad 1.0 in every run), as do real steps whose peak is the update (ResNet152 128 px
# b6 Adadelta with EMA: 1543 / 1587 / 1912 MiB); counted: their mean. Adam, AdamW and
# Nadam are bimodal (Adam 0.13-0.19 or 0.69-1.03, Nadam 0.63-0.69 or 2.0): counted at
# the upper mode, the side that does not run out of memory; measured after the means
# were first counted, real steps agreed (ResNet50 96 px b4 Adam, EfficientNetB4 128 px
# b2 Nadam: 10-12 % above the mean's prediction; docs/MEASUREMENTS.md, stop 12).
BRANCH_TEMPORARIES: dict[Optimizer, float] = {
    Optimizer.SGD: 0.0,  # 0.7 with momentum (see branch_temporaries)
    Optimizer.ADAM: 1.0,
    Optimizer.ADAMW: 1.0,
    Optimizer.NADAM: 2.0,
    Optimizer.ADAMAX: 1.0,
    Optimizer.RMSPROP: 1.0,  # 1.7 with momentum, 1.9 centered
    Optimizer.ADAGRAD: 1.0,
    Optimizer.ADADELTA: 1.7,
    Optimizer.FTRL: 1.4,
    Optimizer.LION: 1.0,
    Optimizer.LAMB: 0.8,
    Optimizer.ADAFACTOR: 0.1,
}
# use_ema: Adam with EMA 0.73 against Adam's 0.5 (the means at 8-32 kernels).
BRANCH_EMA = 0.2


def branch_temporaries(optimizer: Optimizer, options: OptimizerOptions) -> float:
    """Update temporaries per variable the peak of mixed_float16's update branch holds, beyond the gradient."""
    k = BRANCH_TEMPORARIES[optimizer]
    if optimizer is Optimizer.SGD and options.momentum:
        k = 0.7
    if optimizer is Optimizer.RMSPROP and options.centered:
        k = 1.9
    elif optimizer is Optimizer.RMSPROP and options.momentum:
        k = 1.7
    return k + (BRANCH_EMA if options.use_ema else 0.0)


# Every optimizer also keeps scalars (iterations, learning rate): far below the
# allocator's 256 KiB tracking threshold, so they never show in the peak.
def slots_per_variable(optimizer: Optimizer, options: OptimizerOptions, accumulation_steps: int) -> int:
    """Full-size optimizer variables per trainable variable.

    ``use_ema`` adds one copy (``_model_variables_moving_average``);
    ``gradient_accumulation_steps > 1`` adds one accumulator per variable.
    """
    slots = OPTIMIZER_SLOTS[optimizer]
    slots += sum(bool(getattr(options, name)) for name in applicable_options(optimizer))
    if options.use_ema:
        slots += 1
    if accumulation_steps > 1:
        slots += 1
    return slots
