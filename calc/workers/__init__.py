"""The child processes and their one protocol (``calc.workers.protocol``).

Keras and TensorFlow run only in children (``python -m calc.workers.child JOB``), so a
server or a command that needs no model never imports them, and a crash, a hang or an
out-of-memory kill in one is an error for that request only:

- ``calc.workers.measure``: one training step measured, a fresh child each time.
- ``calc.workers.files``: a saved file's profile, read with Keras safe mode on.
- ``calc.workers.plans``: XLA's plan compiled in a fresh child, with a time limit and a memory budget (the
  benchmarks' cold compile; the dashboard and the command line compile on the engine's workers, ``calc.cluster``).

Builds and compiles for the dashboard run on the engine's workers (``calc.cluster``), not here.
"""
