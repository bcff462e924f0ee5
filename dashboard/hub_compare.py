"""The Compare page for KerasHub models: presets x cards, each cell XLA's answer as the Estimator gives it
for the same setup. Pure, no Streamlit.

Every preset is set up as the sidebar sets up its own (batch, optimizer, LoRA rank, dtype policy, classes,
frozen backbone), with the sidebar's sequence length cut to the preset's learned positions where it has
fewer (GPT-2, BERT). A cell reads the plans known on this server (``calc.xla.known_plans``); what is not
known yet is compiled in the background, the first plans first.
"""

from __future__ import annotations

import math
from dataclasses import replace

from calc.gpus import GpuPreset
from calc.hub import HubSpec, hub_models, lora_applies, lora_parameters
from dashboard.i18n import tr
from dashboard.state import Inputs
from dashboard.views import config_of, fmt, settled_batch
from dashboard.xla_view import CompareCell


def compared_hubs(inputs: Inputs) -> list[str]:
    """The Compare page's KerasHub presets: the link's, else the sidebar's and the preset of the same task
    and another family nearest to it in parameters (of the same family where no other has the task)."""
    if inputs.hubs:
        return inputs.hubs.split(",")
    models = hub_models()
    own = models[inputs.hub]
    others = [m for m in models.values() if m.task == own.task and m.preset != own.preset]
    if not others:
        return [own.preset]
    nearest = min(others, key=lambda m: (m.family == own.family, abs(math.log(m.params / own.params)), m.preset))
    return [own.preset, nearest.preset]


def hub_inputs(inputs: Inputs, preset: str) -> Inputs:
    """The sidebar's setup for another preset: its sequence length cut to the preset's longest."""
    model = hub_models()[preset]
    seq_len = min(inputs.seq_len, model.sequence_limit) if model.text else inputs.seq_len
    return replace(inputs, hub=preset, seq_len=seq_len, hubs="")


def input_column(spec: HubSpec | None) -> str:
    """What one example is: a text model's tokens, an image model's size."""
    if spec is None:
        return "—"
    if spec.model.text:
        return tr("{tokens:,} tokens", tokens=spec.sequence_length)
    return tr("{size} px", size="x".join(map(str, (spec.model.image_shape or ())[:2])))


def setup_column(spec: HubSpec | None, inputs: Inputs) -> str:
    """What trains, in a few words: LoRA's parameters, every weight, or the head alone."""
    if spec is None:
        return "—"
    model = spec.model
    if model.task != "causal_lm" and inputs.hub_frozen:
        return tr("new head of {classes}", classes=spec.classes)
    if spec.lora_rank and lora_applies(model, inputs.hub_frozen):
        count = lora_parameters(model, spec.lora_rank)
        lora = (tr("LoRA {rank}: {count:,} trainable", rank=spec.lora_rank, count=count) if count is not None
                else tr("LoRA {rank}", rank=spec.lora_rank))
        return tr("{lora}, on {mode} weights", lora=lora, mode=spec.quantize) if spec.quantize else lora
    if model.task != "causal_lm":
        return tr("all: {params:,} + head", params=model.params)
    return tr("all: {params:,}", params=model.params)


def largest_cell(cell: CompareCell, gpus: int) -> str:
    """XLA's largest batch: settled by compiled plans ("N"), a lower bound while the search runs
    ("≥ N"), or why there is none yet."""
    best = None if cell.answer is None else cell.answer.max_batch
    if best is not None and best.settled:
        return settled_batch(best.batch * gpus)
    if best is not None and best.batch:
        return tr("≥ {batch:,}", batch=best.batch * gpus)
    return _pending(cell)


def peak_cell(cell: CompareCell, inputs: Inputs) -> str:
    """The plan's peak at the sidebar's batch, as the Estimator's "Planned peak" shows it (the framework
    overhead not in it): compiled, or drawn between compiled plans ("≈")."""
    plan = None if cell.answer is None else cell.answer.plan
    if plan is None:
        return _pending(cell)
    return fmt(plan.peak_bytes, inputs) if plan.compiled else tr("≈ {value}", value=fmt(plan.peak_bytes, inputs))


def _pending(cell: CompareCell) -> str:
    return {"waiting": tr("planning…"), "failed": tr("fails"), "off": tr("not planned")}.get(
        cell.state, "—" if cell.answer is None else tr("planning…"))


def hub_compare_tables(presets: list[str], specs: dict[str, HubSpec | None], gpus: list[GpuPreset],
                       cells: dict[tuple[str, str], CompareCell], inputs: Inputs) -> tuple[list[dict[str, object]],
                                                                                        list[dict[str, object]]]:
    """Two tables, a row per preset: the largest batch per card, and the plan's peak at the batch."""
    model_col, input_col, trains_col = tr("model"), tr("input"), tr("trains")
    largest, peaks = [], []
    for preset in presets:
        spec = specs[preset]
        head: dict[str, object] = {model_col: preset, input_col: input_column(spec),
                                   trains_col: setup_column(spec, inputs)}
        largest.append({**head, **{g.name: largest_cell(cells[preset, g.key], inputs.num_gpus) for g in gpus}})
        peaks.append({**head, **{g.name: peak_cell(cells[preset, g.key], inputs) for g in gpus}})
    return largest, peaks


def hub_compare_series(cells: dict[tuple[str, str], CompareCell], gpus: list[GpuPreset],
                       inputs: Inputs) -> dict[str, tuple[list[int], list[int]]]:
    """The compiled plans of every cell, in global batches (plan peak, without the overhead, as the
    Compare chart draws a model's peak against the card less its overhead)."""
    series = {}
    names = {g.key: g.name for g in gpus}
    for (preset, key), cell in cells.items():
        if cell.answer is not None and cell.answer.known.plans:
            plans = sorted(cell.answer.known.plans.items())
            series[f"{preset} · {names[key]}"] = ([b * inputs.num_gpus for b, _ in plans],
                                                   [p.peak_bytes for _, p in plans])
    return series


def catalogue_peaks_table(models: list[str], gpus: list[GpuPreset], cells: dict[tuple[str, str], CompareCell],
                          inputs: Inputs) -> list[dict[str, object]]:
    """The Compare page's catalogue models under the XLA step: XLA's planned peak at the batch, a row per model and
    a column per card (plans differ between cards), as ``peak_cell`` gives it."""
    return [{tr("model"): name, **{g.name: peak_cell(cells[name, g.key], inputs) for g in gpus}} for name in models]


def catalogue_compare_series(cells: dict[tuple[str, str], CompareCell], gpus: list[GpuPreset], inputs: Inputs,
                             walk: dict[str, tuple[list[int], list[int]]]) -> dict[str, tuple[list[int], list[int]]]:
    """The Compare chart's catalogue models under the XLA step: each cell's compiled plans (``hub_compare_series``),
    and the walk's curve (``walk``, by model) only for a model none of whose cells knows a plan, marked so."""
    planned = {model for (model, _), cell in cells.items() if cell.answer is not None and cell.answer.known.plans}
    return {**hub_compare_series(cells, gpus, inputs),
            **{tr("{model} (walk)", model=name): curve for name, curve in walk.items() if name not in planned}}


def mesh_cell(cell: CompareCell | None, batch: int, inputs: Inputs) -> str:
    """One card's need on a mesh, as the Estimator's verdict reckons it: the plan's peak at one replica's ``batch``
    and the bytes kept free beside it, against the card's budget; "—" for a mesh past the first that fits (never
    compiled), or where its compile stands."""
    if cell is None:
        return "—"
    plan = None if cell.answer is None else cell.answer.plan
    if plan is None or cell.answer is None:
        return tr("refused") if cell.state == "failed" else _pending(cell)
    budget = cell.answer.budget
    needed = fmt(plan.peak_bytes + budget.kept_at(batch), inputs)
    needed = needed if plan.compiled else tr("≈ {value}", value=needed)
    if budget.fits(plan.peak_bytes, batch):
        return tr("{needed}: fits", needed=needed)
    return tr("{needed}: too much", needed=needed)


def mesh_grid_table(presets: list[str], gpus: list[GpuPreset], grid: dict[tuple[str, str, int], CompareCell],
                    axes: tuple[int, ...], inputs: Inputs) -> list[dict[str, object]]:
    """The Compare page's cards x count: a row per preset and card, a column per model axis (the sidebar's
    data-parallel replicas kept), each cell one card's need (``mesh_cell``)."""
    config = config_of(inputs)
    data, batch = config.num_gpus, config.per_replica_batch
    columns = {axis: tr("{mesh} mesh: {cards} cards", mesh=f"{data}x{axis}", cards=data * axis) if data * axis > 1
               else tr("1 card") for axis in axes}
    rows = []
    for preset in presets:
        for gpu in gpus:
            if not any((preset, gpu.key, axis) in grid for axis in axes):
                continue
            row: dict[str, object] = {tr("model"): preset, tr("card"): gpu.name}
            row.update({columns[axis]: mesh_cell(grid.get((preset, gpu.key, axis)), batch, inputs) for axis in axes})
            rows.append(row)
    return rows
