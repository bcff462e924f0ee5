"""``estimate`` and ``max-batch``: the walk or XLA's plan, the caveat notes, the batch that fits."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

from calc.catalogue import ModelFile, ModelSpec
from calc.gpus import GpuPreset
from calc.types import Device, TrainingConfig
from calc.cli.options import (GIB, gpu_from_args, hub_spec_and_config, is_hub, print_out, profile_and_config,
                              spec_and_config)
from calc.hub import HubSpec

def _caveat_notes(caveats: dict[str, int], device: Device = Device.CPU) -> list[str]:
    """One note per caveat kind (``calc.caveats``), each followed by its measured record when
    the report has one (for GPU kernels, the H100 slice's record too)."""
    from calc.caveats import caveat_note
    from calc.validation import GPU_TF_REPORT, caveat_record, load_report

    def report_or_nothing(*path):
        try:
            return load_report(*path)
        except (OSError, ValueError):
            return {}

    report = report_or_nothing() if caveats else {}
    gpu_report = report_or_nothing(GPU_TF_REPORT) if caveats and device is Device.GPU else {}
    return [caveat_note(kind, f"{nbytes / GIB:.3f} GiB", caveat_record(report, kind), caveat_record(gpu_report, kind))
            for kind, nbytes in caveats.items()]


def _own_model_note() -> list[str]:
    """How the estimate fared on the own-model slice (architectures the engine was not fitted on)."""
    from calc.caveats import own_model_note
    from calc.validation import CUSTOM_REPORT, load_report, overall_record

    try:
        record = overall_record(load_report(CUSTOM_REPORT))
    except (OSError, ValueError):
        return []
    return [] if record is None else [own_model_note(record)]


def _step(args: argparse.Namespace) -> str:
    """``--step``, or what Keras runs by default: XLA on a GPU preset, else the graph executor."""
    step = args.step or ("xla" if args.gpu else "graph")
    if args.remat != "none" and step != "xla":
        raise ValueError("--remat is answered by the XLA plan: add --step xla and --gpu PRESET.")
    return step


def _plan_spec(args: argparse.Namespace) -> ModelSpec | ModelFile | HubSpec:
    import os

    if is_hub(args):
        return hub_spec_and_config(args)[0]
    return ModelFile(os.path.abspath(args.file)) if args.file else spec_and_config(args)[0]


def _xla_plan_or_reason(args: argparse.Namespace, config: TrainingConfig, gpu: GpuPreset | None):
    """(plan, None) or (None, one-line reason the walk is shown instead).

    The plan is drawn on the curve of the plans known for this configuration where the curve
    draws it (``calc.xla.KnownPlans.at``), unless ``--compile``; else compiled.
    """

    from calc.xla import PlanError, compute_plan, known_plans

    if gpu is None:
        return None, "the XLA plan compiles for a card: add --gpu PRESET"
    remat = "" if args.remat == "none" else args.remat
    spec = _plan_spec(args)
    try:
        explain = getattr(args, "explain", False)
        if not args.compile and not explain:
            known = known_plans(spec, config, gpu.key, remat).at(config.per_replica_batch)
            if known is not None:
                return known, None
        return compute_plan(spec, config, gpu.key, remat, explained=explain), None
    except PlanError as exc:
        return None, str(exc)


def cmd_estimate(args: argparse.Namespace) -> int:
    from calc.estimate import estimate_memory, fit_on_gpu, spread_caveats

    if is_hub(args):
        return _estimate_hub(args)
    name, profile, config = profile_and_config(args)
    gpu = gpu_from_args(args)
    step = _step(args)
    if step == "xla":
        plan, reason = _xla_plan_or_reason(args, config, gpu)
        if plan is not None and gpu is not None:
            return _print_plan(args, name, config, gpu, plan)
        print(f"calc: the XLA plan is unavailable ({reason}); showing the graph-executor walk instead",
              file=sys.stderr)
    b = estimate_memory(profile, config)
    out: dict[str, Any] = {
        "model": name,
        "step": "graph",
        "batch_size": config.batch_size,
        "per_device_batch": config.per_replica_batch,
        "optimizer": config.optimizer.value,
        "precision": config.precision.value,
        "train_mode": config.train_mode.value,
        "device": config.device.value,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "peak_bytes": b.peak_bytes,
        "components": b.components(),
        "peak_phase": b.peak_phase,
        "unknown_layer_types": list(profile.unknown_layer_types),
        "caveats": spread_caveats(profile, config),
    }
    if step == "xla":
        out["xla_unavailable"] = reason
    lines = [f"{name}  batch {config.batch_size}  {config.optimizer.value}  {config.precision.value}  "
             f"{config.train_mode.value}  on {config.device.value}  (graph executor, jit_compile=False)"]
    lines += [f"  {k:20s} {v / GIB:10.3f} GiB" for k, v in b.components().items()]
    lines.append(f"  {'predicted peak':20s} {b.peak_bytes / GIB:10.3f} GiB  ({b.peak_bytes:,} bytes, at {b.peak_phase})")
    if gpu is not None:
        fit = fit_on_gpu(profile, config, gpu.memory_bytes, overhead_bytes=gpu.overhead_bytes, safety_margin=args.margin)
        out.update(gpu=gpu.key, gpu_memory_bytes=gpu.memory_bytes, framework_overhead_bytes=gpu.overhead_bytes,
                   fits=fit.fits, max_batch_size=fit.max_batch)
        verdict = "fits" if fit.fits else "does NOT fit"
        lines.append(f"  + framework overhead {gpu.overhead_bytes / GIB:.3f} GiB on {gpu.name}: {verdict} "
                     f"({fit.needed_bytes / GIB:.2f} of {fit.usable_bytes / GIB:.2f} GiB usable); "
                     f"largest batch that fits: {fit.max_batch}")
    lines += [f"  note: {note}" for note in _caveat_notes(out["caveats"], config.device)]
    if args.file:
        lines += [f"  note: {note}" for note in _own_model_note()]
    if profile.unknown_layer_types:
        lines.append(f"  note: layer types without a rule (counted as keeping input and output): {', '.join(profile.unknown_layer_types)}")
    print_out(out, args.json, lines)
    return 0


def _print_plan(args: argparse.Namespace, name: str, config: TrainingConfig, gpu: GpuPreset, plan, *,
                hub: dict[str, Any] | None = None, notes: list[str] | None = None) -> int:
    from calc.xla.budget import kept_lines, step_budget

    budget = step_budget(gpu, args.margin, _plan_spec(args), config.precision.value, config)
    kept = budget.kept_at(config.per_replica_batch)
    needed = plan.peak_bytes + kept + gpu.overhead_bytes
    out: dict[str, Any] = {
        "model": name,
        "step": "xla",
        "batch_size": config.batch_size,
        "per_device_batch": config.per_replica_batch,
        "optimizer": config.optimizer.value,
        "precision": config.precision.value,
        "train_mode": config.train_mode.value,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "remat": plan.remat or None,
        "peak_bytes": plan.peak_bytes,
        "components": plan.components(),
        "plan_source": "compiled" if plan.compiled else "drawn",
        "drawn_through": list(plan.drawn_through) or None,
        "target": plan.target,
        "compile_seconds": plan.compile_seconds,
        "versions": plan.versions,
        "gpu": gpu.key, "gpu_memory_bytes": gpu.memory_bytes, "framework_overhead_bytes": gpu.overhead_bytes,
        "margin": budget.margin,
        "kept_free": {"mechanism": budget.kept.mechanism or None, "bytes": kept, "residual": budget.measured.fraction,
                      "user_margin": args.margin},
        "fits": needed <= budget.usable_bytes,
        "peak_breakdown": plan.breakdown(),
        "peak_explained": plan.explained.to_dict() if plan.explained is not None else None,
        **({"mesh": mesh_object(config)} if config.devices > 1 else {}),
    }
    how = ("compiled" if plan.compiled else
           f"drawn on the line through the plans compiled at batches {plan.drawn_through[0]} and "
           f"{plan.drawn_through[1]}; --compile compiles this batch's own")
    precision, mode = config.precision.value, config.train_mode.value
    if hub is not None:  # a KerasHub model's policy and LoRA are its own
        precision, mode = hub["dtype"], "lora" if hub["lora_rank"] else mode
        out.update(precision=precision, train_mode=mode, hub=hub)
    where = gpu.name if config.devices == 1 else f"each card of {mesh_words(config, gpu.name)}"
    lines = [f"{name}  batch {config.batch_size}  {config.optimizer.value}  {precision}  "
             f"{mode}  (XLA's plan of the step Keras compiles on {where}, jit_compile=True"
             f"{', RematScope ' + plan.remat if plan.remat else ''})"]
    lines += notes or []
    lines += [f"  {k:20s} {v / GIB:10.3f} GiB" for k, v in plan.components().items()]
    lines.append(f"  {'planned peak':20s} {plan.peak_bytes / GIB:10.3f} GiB  ({plan.peak_bytes:,} bytes, {how}; "
                 f"{plan.versions}, XLA autotuning off)")
    kept_part = f" + {kept / GIB:.3f} GiB kept free" if kept else ""
    lines.append(f"  + framework overhead {gpu.overhead_bytes / GIB:.3f} GiB{kept_part} on {gpu.name}: "
                 f"{'fits' if out['fits'] else 'does NOT fit'} ({needed / GIB:.2f} of {budget.usable_bytes / GIB:.2f} "
                 f"GiB usable with a {budget.margin:.1%} margin); `max-batch` finds the largest batch")
    if getattr(args, "explain", False):
        lines += explained_lines(plan)
    lines += [f"  kept free: {line}" for line in kept_lines(budget, config.per_replica_batch)]
    print_out(out, args.json, lines)
    return 0


def mesh_object(config: TrainingConfig) -> dict[str, Any]:
    """``--json``'s ``mesh``: its axes and hosts; ``peak_bytes`` and ``components`` beside it are one card's."""
    return {"data": config.num_gpus, "model": config.model_parallel, "hosts": config.hosts, "devices": config.devices,
            "layout": "data parallel" if config.model_parallel == 1 else "the preset's layout map",
            "per_device_batch": config.per_replica_batch, "peak_is_per_device": True}


def mesh_words(config: TrainingConfig, card: str) -> str:
    """"a 1x2 mesh of 2 NVIDIA L4 (model parallel by the preset's layout map, one host)"."""
    how = ("data parallel" if config.model_parallel == 1 else
           "model parallel by the preset's layout map" if config.num_gpus == 1 else
           "data x model parallel by the preset's layout map")
    hosts = "one host" if config.hosts == 1 else f"{config.hosts} hosts"
    return f"a {config.mesh} mesh of {config.devices} {card} ({how}, {hosts})"


def _hub_setup(args: argparse.Namespace) -> tuple[HubSpec, TrainingConfig, GpuPreset]:
    """A KerasHub model's spec, config and card: XLA's plan is its only answer."""
    if args.step == "graph":
        raise ValueError("the graph-executor walk covers Keras applications; a KerasHub model is answered by "
                         "XLA's plan (--step xla).")
    spec, config = hub_spec_and_config(args)
    gpu = gpu_from_args(args)
    if gpu is None:
        raise ValueError("a KerasHub model is answered by XLA's plan, which compiles for a card: add --gpu PRESET.")
    return spec, config, gpu


def _estimate_hub(args: argparse.Namespace) -> int:
    from calc.facts.optimizers import slots_per_variable
    from calc.hub import lora_parameters

    spec, config, gpu = _hub_setup(args)
    plan, reason = _xla_plan_or_reason(args, config, gpu)
    if plan is None:
        raise ValueError(f"the XLA plan is unavailable: {reason}")
    model = spec.model
    lora = lora_parameters(model, spec.lora_rank) if spec.lora_rank else None
    head = "" if model.task == "causal_lm" else f", and the new head of {spec.classes} classes"
    setup = {"preset": spec.preset, "task": model.task, "params": model.params, "sequence_length": spec.sequence_length,
             "lora_rank": spec.lora_rank or None, "lora_params": lora, "dtype": spec.dtype,
             "classes": spec.classes if model.task != "causal_lm" else None, "quantize": spec.quantize or None,
             "optimizer_slots": slots_per_variable(config.optimizer, config.optimizer_options, 1)}
    notes = [f"  {model.preset}: {model.params:,} parameters ({model.description}); "
             + (f"{spec.sequence_length} tokens per example; " if model.text else "")
             + (f"LoRA rank {spec.lora_rank} on every layer's query and value: {lora:,} trainable parameters, "
                f"float32{head}; the rest frozen in {spec.dtype}" if lora is not None else
                f"every weight trained, in {spec.dtype}")
             + (f"; quantized as model.quantize(\"{spec.quantize}\") quantizes it before LoRA"
                if spec.quantize else "")]
    return _print_plan(args, spec.key, config, gpu, plan, hub=setup, notes=notes)


def cmd_max_batch(args: argparse.Namespace) -> int:
    from calc.estimate import max_batch_size

    if is_hub(args):
        spec, hub_config, card = _hub_setup(args)
        found: dict[str, Any] = {"model": spec.key, "step": "xla", "gpu": card.key, "gpu_memory_bytes": card.memory_bytes,
                                 "framework_overhead_bytes": card.overhead_bytes, "safety_margin": args.margin}
        if not _print_max_batch_xla(args, spec.key, hub_config, card, 0, found):
            raise ValueError(f"the XLA plan is unavailable: {found['xla_unavailable']}")
        return 0
    gpu = gpu_from_args(args)
    if gpu is None:
        raise ValueError("max-batch needs --gpu PRESET or --memory-gib N.")
    name, profile, config = profile_and_config(args)
    fit = max_batch_size(profile, config, gpu.memory_bytes, overhead_bytes=gpu.overhead_bytes, safety_margin=args.margin)
    out = {"model": name, "step": "graph", "gpu": gpu.key, "gpu_memory_bytes": gpu.memory_bytes,
           "framework_overhead_bytes": gpu.overhead_bytes, "safety_margin": args.margin, "max_batch_size": fit}
    if _step(args) == "xla" and _print_max_batch_xla(args, name, config, gpu, fit, out):
        return 0
    print_out(out, args.json, [f"{name} on {gpu.name} (margin {args.margin:.0%}), graph executor (jit_compile=False): "
                            f"largest batch {fit}"])
    return 0




def _print_max_batch_xla(args: argparse.Namespace, name: str, config: TrainingConfig, gpu: GpuPreset, walk: int,
                         out: dict[str, Any]) -> bool:
    """The largest batch by XLA's plans (the search from the plans known, compiling what it lacks);
    False, with one line on stderr, where no plan can be made (the walk's answer is printed then)."""
    from calc.xla import PlanError, plan_max_batch
    from calc.xla.budget import kept_lines, step_budget

    spec = _plan_spec(args)
    budget = step_budget(gpu, args.margin, spec, config.precision.value, config)
    try:
        found = plan_max_batch(spec, config, gpu.key, budget.plan_bytes, max(1, walk // config.num_gpus),
                               "" if args.remat == "none" else args.remat, kept_per_sample=budget.kept.per_sample_bytes)
    except PlanError as exc:
        if walk:  # a KerasHub model has no walk: its caller says the plan is unavailable
            print(f"calc: the XLA plan is unavailable ({exc}); showing the graph-executor walk instead",
                  file=sys.stderr)
        out["xla_unavailable"] = str(exc)
        return False
    best = found.max_batch * config.num_gpus
    out.update(step="xla", max_batch_size=best, graph_max_batch_size=walk or None, compiles=found.compiles,
               known_before=found.known, settled=True, exceeds=found.exceeds, margin=budget.margin,
               kept_free={"mechanism": budget.kept.mechanism or None, "per_sample_bytes": budget.kept.per_sample_bytes,
                          "residual": budget.measured.fraction, "user_margin": args.margin},
               compiled=[{"per_device_batch": b, "needed_bytes": n + budget.kept_at(b),
                          "fits": budget.fits(n, b)} for b, n in found.compiled])
    if found.max_batch and found.fits_bytes is not None and found.exceeds_bytes is not None:
        edge = (f"batch {found.max_batch} per device planned {found.fits_bytes / GIB:.2f} GiB and fits, "
                f"{found.exceeds} planned {found.exceeds_bytes / GIB:.2f} GiB and does not")
    elif found.max_batch:
        edge = f"batch {found.max_batch} per device fits"
    else:
        edge = "not even batch 1 per device fits"
    how = (f"{found.compiles} plans compiled, {found.known} known before" if found.known else
           f"{found.compiles} plans compiled")
    print_out(out, args.json, [
        f"{name} on {gpu.name} (margin {budget.margin:.1%}), XLA's plan (jit_compile=True): largest batch {best}; "
        f"{edge} ({budget.plan_bytes / GIB:.2f} GiB for the plan and what is kept free beside it, after the "
        f"framework overhead); {how}; found by "
        f"searching XLA's plans from the line through known plans"
        + (f" (the graph-executor walk says {walk})" if walk else ""),
        *(f"  kept free at batch {found.max_batch}: {line}" for line in kept_lines(budget, found.max_batch))])
    return True


KIND_LABELS = {
    "weights": "weights", "optimizer_state": "optimizer state", "input_batch": "input batch",
    "activations": "activations", "gradients": "gradients", "optimizer": "optimizer temporaries",
    "workspace": "cuDNN/cuBLAS workspace", "layout_copies": "layout copies", "other": "other XLA values",
    "packing": "heap packing", "step_outputs": "step outputs", "outside_step": "outside the step",
    "quantized_weights": "quantized frozen weights", "quantization_scales": "quantization scales",
}
LAYERS_PRINTED = 12


def explained_lines(plan) -> list[str]:
    """The ``--explain`` table: the whole peak by kind, when it comes, and the layers that fill it."""
    breakdown = plan.breakdown()
    if breakdown is None:
        return ["  note: what fills this peak is unknown (a drawn point; --compile --explain compiles it)"]
    ex = plan.explained
    when = {"backward": "in the backward pass of", "forward": "in the forward pass of",
            "update": "in the optimizer's update"}.get(ex.moment_phase, "at XLA's own")
    lines = [f"  what fills the peak ({plan.peak_bytes:,} bytes), {when} {ex.moment_layer} "
             f"(instruction {ex.moment_instruction}):"]
    lines += [f"    {KIND_LABELS[k]:34s} {v / GIB:10.3f} GiB  {v / plan.peak_bytes:6.1%}" for k, v in breakdown.items() if v]
    lines.append("  layers live at the peak (temporaries), largest first:")
    for name, per in ex.layers[:LAYERS_PRINTED]:
        total = sum(v for _, v in per)
        parts = ", ".join(f"{KIND_LABELS[k]} {v / 2**20:,.1f} MiB" for k, v in sorted(per, key=lambda kv: -kv[1]) if v)
        lines.append(f"    {name:34s} {total / 2**20:10,.1f} MiB  ({parts})")
    if len(ex.layers) > LAYERS_PRINTED:
        rest = sum(v for _, per in ex.layers[LAYERS_PRINTED:] for _, v in per)
        lines.append(f"    {'(' + str(len(ex.layers) - LAYERS_PRINTED) + ' more)':34s} {rest / 2**20:10,.1f} MiB")
    return lines


def cmd_fewest_cards(args: argparse.Namespace) -> int:
    """The fewest cards of a preset that train a KerasHub setup at its batch: the model axis doubled until one card's
    plan fits (the preset's layout map shards the weights), each plan read or compiled."""
    from calc.xla.budget import step_budget
    from calc.xla.search import MODEL_AXES, fewest_cards, kept_on_axis

    if not is_hub(args):
        raise ValueError("fewest-cards takes a KerasHub model: a Keras application has no layout map to shard by.")
    spec, config, gpu = _hub_setup(args)
    if config.model_parallel != 1:
        raise ValueError("fewest-cards chooses the model axis itself: give the data-parallel replicas alone "
                         "(--gpus N or --mesh Nx1).")
    budget = step_budget(gpu, args.margin, spec, "")
    found = fewest_cards(spec, config, gpu.key, budget.plan_bytes, remat="" if args.remat == "none" else args.remat)
    cards = None if found.model_parallel is None else config.num_gpus * found.model_parallel
    out = {"model": spec.key, "step": "xla", "gpu": gpu.key, "batch_size": config.batch_size,
           "data_parallel": config.num_gpus, "model_parallel": found.model_parallel, "cards": cards,
           "margin": budget.margin, "budget_bytes": budget.plan_bytes,
           "tried": [{"mesh": f"{config.num_gpus}x{m}", "needed_bytes": n, "fits": n <= budget.plan_bytes,
                      "kept_free_bytes": kept_on_axis(spec, config, m)} for m, n in found.tried],
           "stopped": found.stopped or None}
    tried = "; ".join(f"{config.num_gpus}x{m} needs {n / GIB:.2f} GiB a card" for m, n in found.tried)
    if cards is not None:
        head = f"fewest cards: {cards} ({config.num_gpus}x{found.model_parallel} mesh)"
    elif found.stopped:
        head = f"no mesh found: {found.stopped}"
    else:
        head = f"even {config.num_gpus}x{MODEL_AXES[-1]} does not fit"
    print_out(out, args.json, [
        f"{spec.key} on {gpu.name} (margin {budget.margin:.1%}), batch {config.batch_size}, XLA's plan of one card: "
        f"{head}; {budget.plan_bytes / GIB:.2f} GiB for a card's plan and what is kept free beside it"
        + (f" ({tried})" if tried else "")])
    return 0


def cmd_max_seq(args: argparse.Namespace) -> int:
    """The longest sequence a KerasHub text model trains at the batch given, by XLA's plans."""
    from calc.xla import PlanError
    from calc.xla.budget import kept_lines, step_budget
    from calc.xla.kept import kept_for
    from calc.xla.search import plan_max_sequence

    if not is_hub(args):
        raise ValueError("max-seq takes a KerasHub text model (`python -m calc models --hub`).")
    spec, config, gpu = _hub_setup(args)
    if not spec.model.text:
        raise ValueError(f"{spec.preset} is an image model: it has no sequence to lengthen.")
    budget = step_budget(gpu, args.margin, spec, "", config)
    try:
        found = plan_max_sequence(spec, config, gpu.key, budget.plan_bytes, "" if args.remat == "none" else args.remat)
    except PlanError as exc:
        raise ValueError(f"the XLA plan is unavailable: {exc}") from None
    out = {"model": spec.preset, "step": "xla", "gpu": gpu.key, "batch_size": config.batch_size,
           "per_device_batch": config.per_replica_batch, "lora_rank": spec.lora_rank or None, "dtype": spec.dtype,
           "margin": budget.margin, "max_sequence_length": found.max_sequence, "exceeds": found.exceeds,
           "model_limit": found.limit, "compiles": found.compiles,
           "kept_free": {"mechanism": budget.kept.mechanism or None, "residual": budget.measured.fraction,
                         "user_margin": args.margin},
           "compiled": [{"sequence_length": n, "needed_bytes": b, "fits": b <= budget.plan_bytes}
                        for n, b in found.compiled]}
    if found.exceeds is None:
        edge = f"the model's own limit, {found.limit:,} tokens, fits"
    elif found.max_sequence:
        edge = f"{found.max_sequence:,} tokens fit and {found.exceeds:,} do not"
    else:
        edge = "not even one token fits"
    print_out(out, args.json, [
        f"{spec.preset} on {gpu.name} (margin {budget.margin:.1%}), batch {config.batch_size}, XLA's plan "
        f"(jit_compile=True): longest sequence {found.max_sequence:,}; {edge} ({budget.plan_bytes / GIB:.2f} GiB for "
        f"the plan and the bytes kept free beside it, after the framework overhead); {found.compiles} plans read "
        f"or compiled",
        *(f"  kept free at {found.max_sequence:,} tokens: {line}" for line in
          kept_lines(replace(budget, kept=kept_for(replace(spec, sequence_length=max(1, found.max_sequence)), "",
                                                   config)),
                     config.per_replica_batch))])
    return 0
