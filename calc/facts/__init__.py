"""What the engine knows about TensorFlow, Keras and the allocator, one subject per module.

Every constant here is sourced (a TensorFlow kernel or a Keras ``build()``) or measured (a
probe under ``archive/probes/``, a trace by ``tools/trace_step.py``, the validation set);
the comment beside it says which. The engine (``calc.engine``) applies them.

- ``layers``: what each layer type keeps for its backward pass and how TensorFlow runs it.
- ``optimizers``: each optimizer's slots and update temporaries, one entry per optimizer.
- ``kernels``: the float16 CPU kernels' buffers and XLA's grouped-convolution filter.
- ``allocator``: the BFC allocator's rounding, splitting and counting thresholds.
- ``dtypes``: element sizes.
"""
