"""The Keras boundary: the only modules in ``calc`` that import Keras, TensorFlow or JAX.

- ``calc.keras.profile``: a built ``keras.Model`` read into a ``ModelProfile`` (plain data).
- ``calc.keras.build``: catalogue models built, saved files loaded (safe mode), and their profiles.
- ``calc.keras.step``: the training model compiled as measured, and the real measurement of one
  step on TensorFlow (``measure_in_process``), with the allocator's timeline.
- ``calc.keras.plan``: XLA's buffer plan of Keras's own train step on JAX (``plan_in_process``).

Each imports Keras and its backend inside the functions that need them, so importing
``calc`` stays cheap; the child processes (``calc.workers``) call them.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
