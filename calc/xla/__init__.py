"""XLA's own memory plan of the training step Keras runs on a GPU, computed without a GPU.

Keras 3 compiles the training step with XLA on a GPU (``jit_compile="auto"``), and XLA
decides every buffer of the compiled program at compile time. JAX can compile for a
CUDA target with no GPU present, so a child process (``KERAS_BACKEND=jax``) builds the
model, jits Keras's own ``train_step`` for the target and reads the program's memory as
``memory_analysis()`` counts it, from the buffer assignment XLA dumps before it emits a kernel
(``calc.keras.plan.plan_in_process``, run on a plan worker of ``calc.cluster``; ``calc.keras.codegen``).
This package is the parent side, and imports neither JAX nor Keras:

- ``calc.xla.targets``: the GPU presets' cards as XLA's compiler sees them.
- ``calc.xla.plan``: ``XlaPlan``, the plan's components in bytes, from the child's answer.
- ``calc.xla.cache``: the request that decides a plan, its key, the shipped plans and the disk cache.
- ``calc.xla.compute``: a plan found or compiled once (one compile per machine, single flight),
  and a configuration's known plans as a curve.
- ``calc.xla.curve``: ``PlanCurve``, compiled plans along the batch and the line drawn between
  them where XLA would not rematerialise; the largest batch they tell, and the search's next step.
- ``calc.xla.budget``: what a plan may take on a card, with the margin its measured record asks for.
- ``calc.xla.search``: the largest batch whose plan fits a card, compiling what the curve lacks.
- ``calc.xla.assignment``: XLA's buffer assignment and compiled module, read from the protocol buffer
  XLA dumps (the compile child's ``--xla_dump_to``).
- ``calc.xla.peak``: what fills the plan's temporaries at their peak, by kind and by Keras layer.
"""

from calc.xla.budget import PlanBudget, plan_budget
from calc.xla.cache import plan_versions, unavailable_reason
from calc.xla.compute import KnownPlans, cached_plan, compute_plan, family_request, known_curve, known_plans
from calc.xla.curve import CompiledPoint, CurvePoint, MaxBatch, PlanCurve, PointSource, settle_width
from calc.xla.peak import PeakExplained
from calc.xla.plan import REMAT_MODES, PlanError, XlaPlan, plan_from_analysis
from calc.xla.search import XlaMaxBatch, max_batch_xla, plan_max_batch
from calc.xla.targets import GpuTarget, gpu_targets, target_for

__all__ = [
    "REMAT_MODES", "KnownPlans", "PeakExplained", "known_plans", "CompiledPoint", "PlanBudget", "plan_budget", "CurvePoint", "GpuTarget", "MaxBatch", "PlanCurve", "PlanError", "PointSource",
    "XlaMaxBatch", "XlaPlan", "cached_plan", "compute_plan", "family_request", "gpu_targets", "known_curve",
    "max_batch_xla", "plan_from_analysis", "plan_max_batch", "plan_versions", "settle_width", "target_for",
    "unavailable_reason",
]
