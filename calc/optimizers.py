"""Optimizer state in Keras 3, per trainable variable.

Slot counts follow each optimizer's ``build()`` in ``keras/src/optimizers/*.py``
(Keras 3.15): the number of variables of the same shape it creates per trainable
variable.
"""

from __future__ import annotations

from calc.types import Optimizer, OptimizerOptions

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
# minus what was resident before it, in units of the kernel's size.
UPDATE_SCRATCH: dict[Optimizer, int] = {
    Optimizer.SGD: 1,  # 2 with momentum (see update_scratch)
    Optimizer.ADAM: 2,
    Optimizer.ADAMW: 2,
    Optimizer.NADAM: 3,
    Optimizer.ADAMAX: 3,
    Optimizer.RMSPROP: 3,
    Optimizer.ADAGRAD: 2,
    Optimizer.ADADELTA: 5,
    Optimizer.FTRL: 3,
    Optimizer.LION: 4,
    Optimizer.LAMB: 2,
    Optimizer.ADAFACTOR: 2,
}


def update_scratch(optimizer: Optimizer, options: OptimizerOptions) -> int:
    """Variable-sized buffers alive during one variable's update, the gradient included."""
    if optimizer is Optimizer.SGD and options.momentum:
        return 2
    return UPDATE_SCRATCH[optimizer]


# Every optimizer also keeps scalars (iterations, learning rate): far below the
# allocator's 256 KiB tracking threshold, so they never show in the peak.
def slots_per_variable(optimizer: Optimizer, options: OptimizerOptions, accumulation_steps: int) -> int:
    """Full-size optimizer variables per trainable variable.

    ``use_ema`` adds one copy (``_model_variables_moving_average``);
    ``gradient_accumulation_steps > 1`` adds one accumulator per variable.
    """
    slots = OPTIMIZER_SLOTS[optimizer]
    if optimizer is Optimizer.SGD and options.momentum:
        slots += 1
    if optimizer in (Optimizer.ADAM, Optimizer.ADAMW) and options.amsgrad:
        slots += 1
    if optimizer is Optimizer.RMSPROP:
        slots += int(options.momentum) + int(options.centered)
    if options.use_ema:
        slots += 1
    if accumulation_steps > 1:
        slots += 1
    return slots
