"""XLA's plan of one training step as data: its components in bytes, built from the child's answer.

The plan's numbers are XLA's own buffer assignment of the compiled step, counted as its
``memory_analysis()`` counts them (``calc.keras.plan.plan_in_process``, run on a plan worker of
``calc.cluster``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from calc.xla.peak import PeakExplained

# keras.RematScope modes the plan answers. "larger_than" is not one: Keras 3.15 measures a
# layer's output with compute_output_spec inside the traced step, which fails under JAX
# ("DynamicJaxprTracer has no attribute sparse"); "list_of_layers" needs layer names.
REMAT_MODES = ("full", "activations")
TIMEOUT_S = 600.0  # one compile's time limit, in seconds


class PlanError(ValueError):
    """The plan could not be computed; the message is one line for the user."""


@dataclass(frozen=True)
class XlaPlan:
    """The peak of the compiled step on one device, in bytes; the components sum to it.

    ``outputs_bytes`` is what the step returns beyond the state it updates in place (the
    donated state aliases its outputs): the loss and the metrics.
    """

    weights_bytes: int
    optimizer_state_bytes: int  # the optimizer's variables, and the metrics' (a few bytes)
    input_batch_bytes: int
    temporaries_bytes: int  # XLA's temporary buffers: activations, gradients, update scratch
    outputs_bytes: int
    outside_step_bytes: int  # what the runtime holds beside the compiled program
    target: str
    remat: str = ""
    compile_seconds: float = 0.0
    versions: str = ""
    # Empty for a compiled plan; for one drawn on the line through two compiled plans
    # (``calc.xla.curve``), their batches.
    drawn_through: tuple[int, ...] = ()
    # What fills the temporaries at their peak, by kind and layer (``calc.xla.peak``): a compiled
    # plan's, where its compile kept it; None for a drawn plan.
    explained: PeakExplained | None = None
    # Of ``weights_bytes``, the weights that train (LoRA's alone, the head's of a frozen backbone); 0 where
    # the plan does not say.
    trainable_weights_bytes: int = 0
    # Of ``weights_bytes``, a quantized model's 8- and 4-bit kernels and the scales quantization keeps beside them.
    quantized_weights_bytes: int = 0
    quantization_scales_bytes: int = 0

    @property
    def compiled(self) -> bool:
        return not self.drawn_through

    @property
    def peak_bytes(self) -> int:
        return sum(self.components().values())

    def components(self) -> dict[str, int]:
        """The peak's parts; a quantized model's weights split into its quantized kernels, their scales and the
        rest (the adapters, the norms and what stays in the policy's dtype)."""
        quantized = self.quantized_weights_bytes + self.quantization_scales_bytes
        split = {"quantized_weights": self.quantized_weights_bytes,
                 "quantization_scales": self.quantization_scales_bytes} if quantized else {}
        return {
            "weights": self.weights_bytes - quantized,
            **split,
            "optimizer_state": self.optimizer_state_bytes,
            "input_batch": self.input_batch_bytes,
            "xla_temporaries": self.temporaries_bytes,
            "step_outputs": self.outputs_bytes,
            "outside_step": self.outside_step_bytes,
        }

    def breakdown(self) -> dict[str, int] | None:
        """The whole peak by kind: the state, the batch and the outputs as in ``components``, the
        temporaries split as ``explained`` says (activations, gradients, ...). Sums to
        ``peak_bytes``; None without an explanation."""
        if self.explained is None:
            return None
        out = {k: v for k, v in self.components().items() if k != "xla_temporaries"}
        after = ("step_outputs", "outside_step")
        return {**{k: v for k, v in out.items() if k not in after}, **self.explained.kind_bytes(),
                **{k: out[k] for k in after}}


def plan_from_analysis(raw: dict[str, Any], target: str, remat: str = "") -> XlaPlan:
    """The plan from the child's answer: peak = arguments + temporaries + outputs - aliased.

    With the state donated (``donate_argnums=0``) its outputs take the arguments' buffers,
    so the aliased bytes equal the state's. What TensorFlow's runtime holds beside the
    compiled program is counted as 0: before its XLA step the allocator held the state
    and 0.01-7.9 MiB more in the 22 H100 cases (calc/data/gpu_tf_h100_xla.json), nothing
    that follows from the model's size (docs/XLA_PLAN.md).
    """
    weights = raw["trainable_bytes"] + raw["non_trainable_bytes"]
    optimizer = raw["optimizer_bytes"] + raw["metrics_bytes"]
    batch = raw["batch_bytes"]
    peak = raw["argument_bytes"] + raw["temp_bytes"] + raw["output_bytes"] - raw["alias_bytes"]
    return XlaPlan(
        weights_bytes=weights,
        optimizer_state_bytes=optimizer,
        input_batch_bytes=batch,
        temporaries_bytes=raw["temp_bytes"],
        outputs_bytes=peak - weights - optimizer - batch - raw["temp_bytes"],
        outside_step_bytes=0,
        target=target,
        remat=remat,
        compile_seconds=float(raw.get("compile_seconds", 0.0)) + float(raw.get("build_seconds", 0.0)),
        versions=f"jax {raw.get('jax', '?')}, keras {raw.get('keras', '?')}",
        explained=PeakExplained.of(raw.get("peak"), raw["temp_bytes"]),
        trainable_weights_bytes=int(raw.get("trainable_bytes", 0)),
        quantized_weights_bytes=int(raw.get("quantized_bytes", 0)),
        quantization_scales_bytes=int(raw.get("scale_bytes", 0)),
    )


def drawn_plan(a: XlaPlan, batch_a: int, b: XlaPlan, batch_b: int, batch: int, peak_bytes: int) -> XlaPlan:
    """The plan at ``batch`` on the line through two compiled plans, ``peak_bytes`` its drawn peak.

    The state and the step's outputs do not change with the batch; the input batch grows in
    proportion to it (both plans carry it exactly); the temporaries are the rest, so the
    components sum to ``peak_bytes``.
    """
    batch_bytes = round(a.input_batch_bytes + (batch - batch_a) * (b.input_batch_bytes - a.input_batch_bytes)
                        / (batch_b - batch_a))
    temporaries = peak_bytes - a.weights_bytes - a.optimizer_state_bytes - batch_bytes - a.outputs_bytes \
        - a.outside_step_bytes
    return replace(a, input_batch_bytes=batch_bytes, temporaries_bytes=temporaries, compile_seconds=0.0,
                   drawn_through=(batch_a, batch_b), explained=None)
