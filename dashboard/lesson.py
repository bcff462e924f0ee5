"""The Formula page's numbers: each term of the engine's sum and each rule of thumb, for the inputs."""

from __future__ import annotations

from dataclasses import dataclass

from calc.estimate import accumulator_reset_parameters, early_temporaries_per_variable, estimate_memory, max_batch_size, plan_step
from calc.gpus import GpuPreset
from calc.types import MemoryBreakdown, ModelProfile
from dashboard.state import Inputs
from dashboard.views import config_of


@dataclass(frozen=True)
class FormulaNumbers:
    batch: int
    weights_params: int
    trainable_params: int
    slots: int
    reset_constant_params: int  # zeros constants that reset gradient accumulators (0 without accumulation)
    early_per_param: int  # optimizer temporaries made before the gradient, per trainable parameter
    early_alive: float  # the share of them the peak holds (calc.facts.optimizers.EARLY_TEMPORARIES_ALIVE)
    waits_for_all: bool  # mixed_float16: every update waits for every gradient (the loss scale's cond)
    branch_per_param: float  # then: update temporaries per parameter held together (BRANCH_TEMPORARIES)
    breakdown: MemoryBreakdown
    half_kernel_bytes: int  # mixed_float16: the float16 CPU kernels' buffers of the layer at the peak (calc.facts.kernels)
    kept_per_sample: int
    neurons: int
    input_elements: int
    nnc_bytes: int
    cs231n_mb: float
    cs231n_bytes: int
    seed_max_batch: int
    engine_max_batch: int
    measured_bytes: int | None


def formula_numbers(profile: ModelProfile, inputs: Inputs, gpu: GpuPreset, measured: int | None) -> FormulaNumbers:
    from calc import classic
    from calc.estimate import kernel_bytes_at, waits_for_all_gradients
    from calc.facts.optimizers import EARLY_TEMPORARIES_ALIVE, branch_temporaries, slots_per_variable

    config = config_of(inputs)
    b = estimate_memory(profile, config)
    plan = plan_step(profile, config)
    neurons = classic.count_neurons(profile)
    input_elements = sum(profile.tensor_elements[t] for t in profile.input_ids)
    batch = config.per_replica_batch
    cs = classic.cs231n_answer(neurons, profile.total_params, input_elements, batch, as_printed=False)
    return FormulaNumbers(
        batch=batch,
        weights_params=profile.total_params,
        trainable_params=profile.trainable_params,
        slots=slots_per_variable(config.optimizer, config.optimizer_options, config.gradient_accumulation_steps),
        reset_constant_params=accumulator_reset_parameters(profile, config),
        early_per_param=early_temporaries_per_variable(config),
        early_alive=EARLY_TEMPORARIES_ALIVE,
        waits_for_all=waits_for_all_gradients(config),
        branch_per_param=branch_temporaries(config.optimizer, config.optimizer_options),
        breakdown=b,
        half_kernel_bytes=kernel_bytes_at(profile, config, b.peak_phase),
        kept_per_sample=sum(plan.kept_per_sample),
        neurons=neurons,
        input_elements=input_elements,
        nnc_bytes=classic.nnc_bytes(neurons, profile.total_params, batch),
        cs231n_mb=cs.total_mb,
        cs231n_bytes=int(cs.total_mb * classic.MB),
        seed_max_batch=classic.max_batch_rule(gpu.memory_bytes, neurons, profile.trainable_params),
        engine_max_batch=max_batch_size(profile, config, gpu.memory_bytes, overhead_bytes=gpu.overhead_bytes),
        measured_bytes=measured,
    )


def rule_comparison(n: FormulaNumbers) -> list[dict[str, object]]:
    """Each rule's figure beside the engine (and the measurement where one exists)."""
    ref = n.measured_bytes or n.breakdown.peak_bytes
    rows = [
        ("Engine (this tool)", n.breakdown.peak_bytes),
        ("Neural Network Console blog post's rule", n.nnc_bytes),
        ("Stack Exchange answer (cs231n-style)", n.cs231n_bytes),
    ]
    if n.measured_bytes:
        rows.insert(0, ("Measured (TensorFlow allocator peak)", n.measured_bytes))
    return [{"rule": name, "bytes": v, "vs " + ("measured" if n.measured_bytes else "engine"): (v - ref) / ref}
            for name, v in rows]


def measured_for(inputs: Inputs) -> int | None:
    """The measured peak of this exact configuration, when the validation set has it."""
    from calc.validation import case_id, load_measurements
    from dashboard.loaders import spec_for

    if inputs.source != "catalogue":
        return None
    try:
        cid = case_id(spec_for(inputs.model, inputs.image_size, inputs.train_mode == "frozen_backbone"), config_of(inputs))
    except ValueError:
        return None
    for case in load_measurements()["cases"]:
        if case["case"] == cid:
            return int(case["peak_bytes"])
    return None
