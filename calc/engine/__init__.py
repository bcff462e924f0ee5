"""The engine: a walk over one training step, then the allocator's view of it.

- ``walk``: the walk in phases over one ``state.WalkState``: ``graph`` (the tensors),
  ``keeps`` (what the backward pass holds), ``order`` (the executor's forward order),
  ``fusions`` (the CPU graph passes), ``forward``, ``backward``, ``update`` (the
  optimizer), recorded in a ``ledger.Ledger`` as ``ledger.Moment``s and, for the allocator
  simulation, ``events``.
- ``prune`` and ``plan``: the moments that can be the peak, one plan per configuration.
- ``allocator`` (TensorFlow's BFC allocator), ``resident`` (the variables and slots in its
  pool) and ``floors`` (the walk's peak raised to the simulated allocator's).
- ``counting``, ``training`` and ``half_kernels``: what one request counts, what the config
  trains, the float16 CPU kernels' buffers per layer.

The facts it applies are in ``calc.facts``; its public entry points in ``calc.estimate``.
"""
