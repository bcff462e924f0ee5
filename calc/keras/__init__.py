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


def clear_session() -> None:
    """``keras.backend.clear_session()``: Keras's graph and names reset, and a full collection.

    A full collection walks every object the process holds; with TensorFlow, JAX and keras-hub
    imported that is over a million, half a second a walk or more. At the first call in a
    process (while nothing is frozen yet), what that collection left alive (the imported modules and their caches: a worker calls
    this before its first build) is frozen out of the collector's generations (``gc.freeze``):
    every later collection walks only what was made since, and frees it as before.
    """
    import gc

    import keras

    keras.backend.clear_session()
    if not gc.get_freeze_count():
        gc.freeze()
