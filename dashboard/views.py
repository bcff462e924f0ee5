"""What a page shows, computed from the inputs and a profile: pure, no Streamlit."""

from __future__ import annotations

from dataclasses import dataclass

from calc.estimate import (
    GpuFit,
    estimate_memory,
    fit_on_gpu,
    max_batch_size,
    memory_curve,
    plan_step,
    spread_caveats,
    step_timeline,
)
from calc import caveats
from calc.gpus import GPU_PRESETS, GpuPreset
from calc.hub import hub_models
from calc.types import MemoryBreakdown, ModelProfile, OptimizerOptions, TrainingConfig
from calc.validation import CaveatRecord, caveat_record
from calc.validation.report import walk_to_xla_range
from dashboard.figures import LABELS, bar_parts
from dashboard.i18n import tr
from dashboard.plain import plain
from dashboard.state import Inputs

CURVE_MAX = 4096


def hub_frozen(inputs: Inputs) -> bool:
    """Whether a KerasHub classifier's backbone is frozen (a causal LM has no new head to train alone)."""
    return inputs.source == "hub" and inputs.hub_frozen and hub_models()[inputs.hub].task != "causal_lm"


def config_of(inputs: Inputs) -> TrainingConfig:
    """The engine's config; a KerasHub model's precision is its dtype policy (``calc.hub.HubSpec``), its step
    a GPU's, and what trains its LoRA rank's, so the hidden inputs of the other models do not enter it."""
    hub = inputs.source == "hub"
    mode = ("frozen_backbone" if hub_frozen(inputs) else "all") if hub else inputs.train_mode
    model_axis = inputs.model_parallel if hub else 1  # a catalogue model has no layout map to shard by
    cards = inputs.num_gpus * model_axis
    return TrainingConfig(
        batch_size=inputs.batch_size,
        optimizer=inputs.optimizer,
        optimizer_options=OptimizerOptions(momentum=inputs.momentum, amsgrad=inputs.amsgrad,
                                           centered=inputs.centered, use_ema=inputs.ema),
        gradient_accumulation_steps=inputs.grad_accum,
        precision="float32" if hub else inputs.precision,
        train_mode=mode,
        last_n_layers=inputs.last_n if inputs.train_mode == "last_n" and not hub else 0,
        num_gpus=inputs.num_gpus,
        model_parallel=model_axis,
        hosts=inputs.hosts if cards % inputs.hosts == 0 else 1,  # the sidebar's hosts split its cards, else one
        device="gpu" if hub else inputs.device,
    )


@dataclass(frozen=True)
class EstimateView:
    breakdown: MemoryBreakdown
    overhead_bytes: int
    capacity_bytes: int
    usable_bytes: int
    needed_bytes: int
    fits: bool
    max_batch: int
    curve_batches: tuple[int, ...]
    curve_bytes: tuple[int, ...]
    unknown_layer_types: tuple[str, ...]
    # calc.estimate.spread_caveats: why runs of this step differ widely, kind -> bytes behind it.
    caveats: dict[str, int]

    @property
    def headroom_fraction(self) -> float:
        return (self.usable_bytes - self.needed_bytes) / self.usable_bytes


def fit_of(profile: ModelProfile, inputs: Inputs, gpu: GpuPreset) -> GpuFit:
    """The walk's fit on ``gpu``, with the safety margin: the one largest batch every page shows."""
    return fit_on_gpu(profile, config_of(inputs), gpu.memory_bytes, overhead_bytes=gpu.overhead_bytes,
                      safety_margin=inputs.margin / 100, limit=1 << 16)


def estimate_view(profile: ModelProfile, inputs: Inputs, gpu: GpuPreset) -> EstimateView:
    config = config_of(inputs)
    fit = fit_of(profile, inputs, gpu)
    top = max(CURVE_MAX, 2 * fit.max_batch, 2 * inputs.batch_size)
    batches = curve_batches(top, inputs.num_gpus, (inputs.batch_size, fit.max_batch, fit.max_batch + inputs.num_gpus))
    curve = memory_curve(profile, config, batches)
    return EstimateView(
        breakdown=fit.breakdown,
        overhead_bytes=gpu.overhead_bytes,
        capacity_bytes=gpu.memory_bytes,
        usable_bytes=fit.usable_bytes,
        needed_bytes=fit.needed_bytes,
        fits=fit.fits,
        max_batch=fit.max_batch,
        curve_batches=batches,
        curve_bytes=tuple(c + gpu.overhead_bytes for c in curve),
        unknown_layer_types=plan_step(profile, config).unknown_layer_types,
        caveats=spread_caveats(profile, config),
    )


def card_view(inputs: Inputs, gpu: GpuPreset) -> EstimateView:
    """What a page has beside XLA's plan where no walk is: the card, its overhead and margin, the batches
    the curve may draw; no walk (its breakdown is empty, its largest batch 0: XLA's answers alone). A
    KerasHub model's page, and a catalogue model's while its ledger at this size is built."""
    top = max(CURVE_MAX, 2 * inputs.batch_size)
    usable = int(gpu.memory_bytes * (1 - inputs.margin / 100))
    return EstimateView(breakdown=MemoryBreakdown(0, 0, 0, 0, 0, 0, 0), overhead_bytes=gpu.overhead_bytes,
                        capacity_bytes=gpu.memory_bytes, usable_bytes=usable, needed_bytes=gpu.overhead_bytes,
                        fits=True, max_batch=0, curve_batches=curve_batches(top, inputs.num_gpus, (inputs.batch_size,)),
                        curve_bytes=(), unknown_layer_types=(), caveats={})


def curve_batches(top: int, step: int, marks: tuple[int, ...], *, dense: int = 32, points: int = 96) -> tuple[int, ...]:
    """Global batches where the curve is evaluated: multiples of ``step`` (GPUs).

    Every batch up to ``dense`` devices' worth, then about ``points`` log-spaced ones up
    to ``top`` (5 % apart up to 4096), plus the marked batches (current, largest that fits, the
    next one). Every drawn point is the engine's estimate at that batch, which replays
    the step through the allocator simulation (``calc.engine.floors.floored``, 1-7 ms a
    batch for catalogue models), so the count is what a change of model or optimizer
    costs. Between chunk-size switches the walk is linear in the batch and the drawn
    line is exact; where the simulated allocator makes the peak jump between
    neighbouring batches, the line between drawn points is only a guide.
    """
    per_device_top = max(1, top // step)
    chosen = set(range(1, min(dense, per_device_top) + 1))
    if per_device_top > dense:
        ratio = (per_device_top / dense) ** (1 / points)
        chosen.update(min(per_device_top, round(dense * ratio**i)) for i in range(points + 1))
    chosen.update(m // step for m in marks if 0 < m and m % step == 0 and m // step <= per_device_top)
    return tuple(b * step for b in sorted(chosen))


@dataclass(frozen=True)
class LayerRow:
    name: str
    layer_type: str
    output_shape: str
    params: int
    kept_bytes_per_sample: int
    share: float


def layer_rows(profile: ModelProfile, inputs: Inputs) -> list[LayerRow]:
    kept = plan_step(profile, config_of(inputs)).kept_per_sample
    total = sum(kept) or 1
    return [
        LayerRow(
            l.name, l.layer_type,
            ", ".join("(" + ", ".join(["B", *map(str, s)]) + ")" for s in l.output_shapes),
            l.params, k, k / total,
        )
        for l, k in zip(profile.layers, kept)
    ]


def walk_peak_bytes(profile: ModelProfile, inputs: Inputs) -> int:
    """The walk's peak for one device's batch."""
    return estimate_memory(profile, config_of(inputs)).peak_bytes


def walk_peak_rows(profile: ModelProfile, inputs: Inputs) -> tuple[str, list[dict[str, object]]]:
    """The walk's peak for one device's batch, part by part (the Estimator's bar, without the overhead),
    then the peak; and the moment of the peak."""
    breakdown = estimate_memory(profile, config_of(inputs))
    named = [(tr(LABELS[k]), v) for k, v in bar_parts(breakdown.components(), 0)]
    named.append((tr("Predicted peak (graph executor)"), breakdown.peak_bytes))
    divisor = unit_divisor(inputs)
    return breakdown.peak_phase, [{tr("component"): name, tr("bytes"): nbytes, inputs.unit: round(nbytes / divisor, 3)}
                                  for name, nbytes in named]


def timeline(profile: ModelProfile, inputs: Inputs) -> list[tuple[str, int]]:
    return step_timeline(profile, config_of(inputs))


def unit_divisor(inputs: Inputs) -> float:
    """Bytes per display unit: GiB = 1024^3, GB = 10^9."""
    return 1024**3 if inputs.unit == "GiB" else 1e9


def fmt(nbytes: float, inputs: Inputs, digits: int = 2) -> str:
    """Bytes in the chosen display unit, labelled."""
    return f"{nbytes / unit_divisor(inputs):,.{digits}f} {inputs.unit}"


# --- which step is shown: the graph-executor walk, or XLA's compiled plan ------------------


def xla_reason(inputs: Inputs) -> str | None:
    """Why XLA's plan does not apply to these inputs (one line, for ``step="xla"``), or None.

    The plan is compiled for a GPU preset's card (``calc.xla.target_for``), of a catalogue
    model or an uploaded file; a pasted summary, CPU kernels or a custom size get the walk.
    """
    if inputs.source == "hub":
        return tr("A KerasHub model is answered by XLA's plan, which compiles for a GPU preset's card: choose "
                  "one.") if inputs.gpu == "custom" else None
    if inputs.source == "summary":
        return tr("The XLA plan compiles a model, and a pasted summary is only its table; this shows the "
                  "graph-executor walk (jit_compile=False). Upload the saved file for XLA's plan.")
    if inputs.device != "gpu":
        return tr("The XLA plan is of a GPU's step; with CPU kernels this shows the graph-executor walk "
                  "(jit_compile=False).")
    if inputs.gpu == "custom":
        return tr("The XLA plan compiles for a GPU preset's card, and a custom size names none; this shows the "
                  "graph-executor walk (jit_compile=False).")
    return None


def remat_mode(inputs: Inputs) -> str:
    """The ``keras.RematScope`` mode to plan ("" for none)."""
    return "" if inputs.remat == "none" else inputs.remat


@dataclass(frozen=True)
class CurveView:
    """The batch curve as the Estimator draws it: (global batch, bytes on the card) pairs, the
    framework overhead included, each series saying what it is."""

    walk: tuple[tuple[int, int], ...]  # the graph-executor walk
    drawn: tuple[tuple[int, int], ...] = ()  # XLA: on the line through compiled plans
    compiled: tuple[tuple[int, int], ...] = ()  # XLA: plans compiled at these very batches
    current: tuple[int, int] | None = None  # the chosen batch, on whatever the page shows
    best: tuple[int, int] | None = None  # the largest batch that fits, where its bytes are known
    x_max: int = 0  # where the x axis ends (0: the walk's whole range)


@dataclass(frozen=True)
class ShownStep:
    """The numbers the Estimator shows: of the walk, or of XLA's plan where one is known."""

    step: str  # "graph": the graph-executor walk; "xla": XLA's plan (compiled or drawn)
    peak_label: str
    components: dict[str, int]  # sum to peak_bytes
    peak_bytes: int
    overhead_bytes: int
    capacity_bytes: int
    usable_bytes: int
    max_batch: int  # global
    max_batch_label: str
    margin_fraction: float  # the share of the card the verdict keeps free
    curve: CurveView
    # False while the walk stands in for XLA's plan, which is being compiled: the verdict may change.
    final: bool = True
    remat_saving_bytes: int | None = None  # the plan without remat less the plan with it
    # While the walk stands in: (global batch, needed bytes) of the compiled plan that decides the
    # verdict already (a batch as large that fits, or one as small that does not), else None.
    decided_by: tuple[int, int] | None = None
    # XLA's largest batch while its search is under way: at least ``max_batch``, and less than this
    # global batch, whose plan does not fit (None: no plan above it known yet).
    searching: bool = False
    below: int | None = None
    bound_by_walk: bool = False  # ``decided_by`` is the range XLA's step took of the walk's peak, not a plan
    kept_bytes: int = 0  # kept free beside XLA's plan for what the card adds (``calc.xla.kept``), at this batch

    @property
    def needed_bytes(self) -> int:
        return self.peak_bytes + self.overhead_bytes + self.kept_bytes

    @property
    def fits(self) -> bool:
        if self.decided_by is not None:
            return self.decided_by[1] <= self.usable_bytes
        return self.needed_bytes <= self.usable_bytes

    @property
    def headroom_fraction(self) -> float:
        return (self.usable_bytes - self.needed_bytes) / self.usable_bytes


def settled_batch(batch: int) -> str:
    """A largest batch that compiled plans settled, as every page shows it: "none" when not even one sample fits."""
    return f"{batch:,}" if batch else tr("none")


def max_batch_value(shown: ShownStep) -> str:
    """The largest batch as the metric shows it: a number ("none" when not even one sample fits), or while
    XLA's search is under way the bound the compiled plans give ("≥ 120", or "< 8" when not even the
    smallest compiled fits)."""
    if not shown.searching:
        return settled_batch(shown.max_batch)
    if shown.max_batch == 0 and shown.below is not None:
        return f"< {shown.below:,}"
    if shown.max_batch == 0:  # no plan known yet: nothing to say, and not the walk's number
        return "…"
    return f"≥ {shown.max_batch:,}"


def walk_curve(view: EstimateView, inputs: Inputs, x_max: int = 0) -> tuple[tuple[int, int], ...]:
    """The walk's curve, up to ``x_max`` (global batches) when one is given."""
    return tuple((b, t) for b, t in zip(view.curve_batches, view.curve_bytes) if not x_max or b <= x_max)


def shown_walk(view: EstimateView, inputs: Inputs, *, standing_in: bool = False) -> ShownStep:
    """The walk's numbers: the graph executor chosen, XLA's plan not applicable, or (``standing_in``)
    while XLA's first plan of this configuration compiles."""
    lookup = dict(zip(view.curve_batches, view.curve_bytes))
    top = x_axis_end(inputs.batch_size, view.max_batch)
    curve = CurveView(walk=walk_curve(view, inputs, top),
                      current=(inputs.batch_size, lookup[inputs.batch_size]) if inputs.batch_size in lookup else None,
                      best=(view.max_batch, lookup[view.max_batch]) if view.max_batch in lookup else None, x_max=top)
    label = (tr("Largest batch (walk, until XLA's plans)") if standing_in
             else tr("Largest batch that fits (graph-executor walk)"))
    return ShownStep(
        step="graph", peak_label=tr("Predicted peak (graph executor)"), components=view.breakdown.components(),
        peak_bytes=view.breakdown.peak_bytes, overhead_bytes=view.overhead_bytes, capacity_bytes=view.capacity_bytes,
        usable_bytes=view.usable_bytes, max_batch=view.max_batch, max_batch_label=label,
        margin_fraction=inputs.margin / 100, curve=curve, final=not standing_in,
    )


def x_axis_end(*batches: int) -> int:
    """The curve's x axis ends a third past the largest batch it must show, where a line looks like a line."""
    return max(16, round(1.3 * max(batches)))


def remat_delta(shown: ShownStep, inputs: Inputs) -> str | None:
    """The peak metric's delta: what remat changes against the plan without it (negative saves)."""
    if shown.remat_saving_bytes is None:
        return None
    return tr("{change:+,.2f} {unit} against no remat", change=-shown.remat_saving_bytes / unit_divisor(inputs),
              unit=inputs.unit)


def remat_line(shown: ShownStep, inputs: Inputs) -> str | None:
    """Remat's saving, from the two plans (with and without it); None until both are known."""
    if shown.remat_saving_bytes is None:
        return None
    without = shown.peak_bytes + shown.remat_saving_bytes
    return tr("Remat {mode}: XLA plans {with_remat} with it against {without} without, {saving} ({share:.1%}) less.",
              mode=inputs.remat, with_remat=fmt(shown.peak_bytes, inputs), without=fmt(without, inputs),
              saving=fmt(shown.remat_saving_bytes, inputs), share=shown.remat_saving_bytes / without)


def curve_caption(shown: ShownStep) -> str:
    if shown.curve.compiled:
        return tr("XLA's plan, plus the framework overhead: circles are plans compiled at that batch ({compiled} "
                  "so far); the line is drawn through them where XLA keeps every activation (a straight line in "
                  "the batch) and stops where its temporaries would reach half XLA's rematerialisation limit (80 % "
                  "of the card x 95 %, less the state): nearer the card XLA may recompute activations to fit, and "
                  "only compiled plans count.{walk}",
                  compiled=len(shown.curve.compiled),
                  walk=tr(" The grey line is the graph-executor walk (jit_compile=False), for comparison{pending}.",
                          pending="" if shown.final else tr("; the red point is the walk's, until this batch's plan "
                                                            "is compiled")) if shown.curve.walk else "")
    if not shown.final:
        return tr("The graph-executor walk (jit_compile=False), plus the framework overhead, while XLA's first plans "
                  "of this configuration compile.")
    return tr("The line is the graph-executor walk (jit_compile=False): its peak at each drawn batch size, plus the "
              "framework overhead.")


def verdict(view: EstimateView | ShownStep, inputs: Inputs) -> str:
    """Fits or not, from the peak to what the card must hold: peak + framework overhead against the
    usable memory (the card less the safety margin); with several GPUs, each GPU's share."""
    kept = view.kept_bytes if isinstance(view, ShownStep) else 0
    peak = view.needed_bytes - view.overhead_bytes - kept
    margin = round(100 * view.margin_fraction, 1) if isinstance(view, ShownStep) else inputs.margin
    values = dict(peak=fmt(peak, inputs), overhead=fmt(view.overhead_bytes, inputs),
                  kept=tr(" + {kept} kept free for what the card adds to XLA's plan", kept=fmt(kept, inputs))
                  if kept else "",
                  needed=fmt(view.needed_bytes, inputs), usable=fmt(view.usable_bytes, inputs),
                  margin=f"{margin:g}", gpus=config_of(inputs).devices, per=config_of(inputs).per_replica_batch)
    if isinstance(view, ShownStep) and not view.final and view.bound_by_walk and view.decided_by is not None:
        low, high, cases = walk_to_xla_range()
        if view.fits:
            return tr("Fits: on the {cases} steps measured on an H100, TensorFlow's XLA step took at most {high:.0%} "
                      "of the graph-executor walk's peak; here that is {needed} with the framework overhead, of "
                      "{usable} usable after the {margin}% margin (this batch's plan is not compiled yet).",
                      cases=cases, high=high, **{**values, "needed": fmt(view.decided_by[1], inputs)})
        return tr("Does not fit: on the {cases} steps measured on an H100, TensorFlow's XLA step took at least {low:.0%} "
                  "of the graph-executor walk's peak; here that is {needed} with the framework overhead, more than "
                  "the {usable} usable after the {margin}% margin (this batch's plan is not compiled yet).",
                  cases=cases, low=low, **{**values, "needed": fmt(view.decided_by[1], inputs)})
    if isinstance(view, ShownStep) and not view.final and view.decided_by is not None:
        batch, needed = view.decided_by
        if view.fits:
            return tr("Fits: XLA's plan at batch {other}, compiled, needs {needed} with the framework overhead, of "
                      "{usable} usable after the {margin}% margin, and a smaller batch never needs more (this "
                      "batch's own plan is not compiled yet).", other=batch, **{**values, "needed": fmt(needed, inputs)})
        return tr("Does not fit: XLA's plan at batch {other}, compiled, already needs {needed} with the framework "
                  "overhead, more than the {usable} usable after the {margin}% margin, and a larger batch never "
                  "needs less.", other=batch, **{**values, "needed": fmt(needed, inputs)})
    if isinstance(view, ShownStep) and not view.final:
        return tr("XLA's plan of this batch is not known yet. Meanwhile the graph-executor walk (jit_compile=False) says "
                  "{needed} needed ({peak} + {overhead} framework overhead) of {usable} usable: XLA's step was a "
                  "median {median:.0%} away from the walk on measured steps, so no verdict until the plan is "
                  "compiled.", median=walk_xla_median(), **values)
    if config_of(inputs).devices > 1:
        if view.fits:
            return tr("Fits: each of the {gpus} GPUs (batch {per} each) needs the peak {peak} + {overhead} framework "
                      "overhead (CUDA context, libraries){kept} = {needed}, of {usable} usable after the {margin}% "
                      "margin ({headroom:.0%} headroom).", headroom=view.headroom_fraction, **values)
        return tr("Does not fit: each of the {gpus} GPUs (batch {per} each) needs the peak {peak} + {overhead} "
                  "framework overhead (CUDA context, libraries){kept} = {needed}, {more} more than the {usable} usable "
                  "after the {margin}% margin.", more=fmt(view.needed_bytes - view.usable_bytes, inputs), **values)
    if view.fits:
        return tr("Fits: the peak {peak} + {overhead} framework overhead (CUDA context, libraries){kept} = {needed}, of "
                  "{usable} usable after the {margin}% margin ({headroom:.0%} headroom).",
                  headroom=view.headroom_fraction, **values)
    return tr("Does not fit: the peak {peak} + {overhead} framework overhead (CUDA context, libraries){kept} = {needed}, "
              "{more} more than the {usable} usable after the {margin}% margin.",
              more=fmt(view.needed_bytes - view.usable_bytes, inputs), **values)


def walk_xla_median() -> float:
    """How far the walk was from TensorFlow's XLA step on the measured H100 steps: the median error."""
    from calc.validation import GPU_TF_XLA_REPORT, load_report

    try:
        return float(load_report(GPU_TF_XLA_REPORT)["summary"]["median_abs_error"])
    except (OSError, ValueError, KeyError):
        return float("nan")


def per_gpu_caption(inputs: Inputs) -> str:
    """What the page's numbers are of on several cards ("" on one)."""
    config = config_of(inputs)
    if config.model_parallel > 1:
        return tr("A {mesh} mesh of {gpus} GPUs on {hosts} host(s): {data} replica(s) of the batch, each over {model} "
                  "cards that share the weights by the preset's layout map (keras.distribution.ModelParallel). XLA's "
                  "SPMD partitioner planned one card's program: the peak, the chart's bars and the verdict are one "
                  "card's (batch {per} on each replica); the batch sizes, the curve's x axis and the largest batch are "
                  "global.", mesh=config.mesh, gpus=config.devices, hosts=config.hosts, data=config.num_gpus,
                  model=config.model_parallel, per=config.per_replica_batch)
    if config.devices > 1:
        return tr("Data parallel on {gpus} GPUs: the peak, the chart's bars and the verdict are one GPU's (batch {per}); "
                  "the batch sizes, the curve's x axis and the largest batch are global.", gpus=config.devices,
                  per=config.per_replica_batch)
    return ""


def breakdown_table(shown: ShownStep) -> list[dict[str, object]]:
    """The breakdown's rows in English, the parts named as the engine names them
    (``MemoryBreakdown.components``, ``XlaPlan.components``): the JSON download's.
    ``shown_table`` is what the page shows."""
    rows = [{"component": k, "bytes": v} for k, v in shown.components.items()]
    peak = "XLA's planned peak" if shown.step == "xla" else "predicted allocator peak"
    rows.append({"component": peak, "bytes": shown.peak_bytes})
    rows.append({"component": "framework overhead (not in the peak)", "bytes": shown.overhead_bytes})
    rows.append({"component": "needed on the GPU", "bytes": shown.needed_bytes})
    return rows


def shown_table(shown: ShownStep, inputs: Inputs) -> list[dict[str, object]]:
    """The breakdown as the page shows it: the bar chart's parts under its legend's names
    (``figures.bar_parts``), then the peak (named as its metric), the framework overhead and
    what the GPU must hold; in bytes, and in the chosen unit."""
    parts = bar_parts(shown.components, shown.overhead_bytes)
    named = [(tr(LABELS[k]), v) for k, v in parts if k != "framework_overhead"]
    named += [(shown.peak_label, shown.peak_bytes), (tr(LABELS["framework_overhead"]), shown.overhead_bytes)]
    if shown.kept_bytes:
        named.append((tr(LABELS["kept_free"]), shown.kept_bytes))
    named.append((tr("Needed on the GPU (peak + overhead)") if not shown.kept_bytes else
                  tr("Needed on the GPU (peak + overhead + kept free)"), shown.needed_bytes))
    divisor = unit_divisor(inputs)
    return [{tr("component"): name, tr("bytes"): nbytes, inputs.unit: round(nbytes / divisor, 3)}
            for name, nbytes in named]


def markdown_table(rows: list[dict[str, object]]) -> str:
    """``rows`` as a Markdown table: text as typed (escaped), whole numbers with thousands
    separators, fractions with 3 decimals, numbers right-aligned; the last row in bold.

    The Estimator's breakdown is drawn this way rather than with ``st.dataframe``: every row
    shows without a scrollbar, and the first page needs none of the data grid's 1.2 MB of
    JavaScript, which the browser would load and run before it draws the charts.
    """
    def cell(value: object) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return plain(value)
        return f"{value:,}" if isinstance(value, int) else f"{value:,.3f}"

    columns = list(rows[0])
    aligns = ["---:" if isinstance(rows[0][c], (int, float)) else ":---" for c in columns]
    lines = ["| " + " | ".join(plain(c) for c in columns) + " |", "| " + " | ".join(aligns) + " |"]
    for i, row in enumerate(rows):
        cells = [cell(row[c]) for c in columns]
        lines.append("| " + " | ".join(f"**{c}**" if i == len(rows) - 1 else c for c in cells) + " |")
    return "\n".join(lines)


def heaviest_layers(rows: list[LayerRow], n: int) -> list[LayerRow]:
    return sorted(rows, key=lambda r: r.kept_bytes_per_sample, reverse=True)[:n]


def timeline_series(profile: ModelProfile, inputs: Inputs) -> tuple[list[str], list[int]]:
    moments = timeline(profile, inputs)
    return [p for p, _ in moments], [t for _, t in moments]


COMPARED_GPUS = ("t4", "a10", "a100-40", "h100-80")


def compared_models(inputs: Inputs) -> list[str]:
    """The Compare page's models: the link's, else the sidebar's model and one other."""
    if inputs.models:
        return inputs.models.split(",")
    return [inputs.model, "EfficientNetB0" if inputs.model != "EfficientNetB0" else "ResNet50"]


def compared_gpus(inputs: Inputs) -> list[str]:
    """The Compare page's cards: the link's, else the sidebar's and the common ones beside it."""
    if inputs.gpus:
        return inputs.gpus.split(",")
    own = [inputs.gpu] if inputs.gpu in GPU_PRESETS else []
    return own + [g for g in COMPARED_GPUS if g not in own]


def walk_peak_column(inputs: Inputs) -> str:
    """The Compare table's peak, as every page names a peak: without the framework overhead."""
    return tr("peak at batch {batch} ({unit}, framework overhead not included)", batch=inputs.batch_size,
              unit=inputs.unit)


def compare_table(profiles: dict[str, ModelProfile], gpus: list[GpuPreset], inputs: Inputs) -> list[dict[str, object]]:
    """Largest batch that fits, models x GPUs ("which card do I need?")."""
    config = config_of(inputs)
    rows = []
    for name, profile in profiles.items():
        peak = estimate_memory(profile, config).peak_bytes
        row: dict[str, object] = {tr("model"): name, walk_peak_column(inputs): round(peak / unit_divisor(inputs), 3)}
        for gpu in gpus:
            row[gpu.name] = max_batch_size(profile, config, gpu.memory_bytes, overhead_bytes=gpu.overhead_bytes,
                                           safety_margin=inputs.margin / 100, limit=1 << 16)
        rows.append(row)
    return rows


def compare_curves(profiles: dict[str, ModelProfile], inputs: Inputs) -> dict[str, tuple[list[int], list[int]]]:
    config = config_of(inputs)
    batches = list(curve_batches(CURVE_MAX, inputs.num_gpus, ()))
    return {name: (batches, memory_curve(p, config, batches)) for name, p in profiles.items()}


def summary_caption(reading) -> str:
    """How a pasted summary was read (``calc.summary_text.SummaryReading``)."""
    p = reading.profile
    if reading.connected:
        return tr("Read {layers} layers, {params:,} parameters from the pasted summary, wired from its 'Connected to' "
                  "column ({connections} connections). Activations fused into Conv/Dense layers are not in the text "
                  "and count as linear.", layers=len(p.layers), params=p.total_params, connections=reading.connections)
    return tr("Read {layers} layers, {params:,} parameters from the pasted summary, read as a chain, each layer feeding "
              "the next. Activations fused into Conv/Dense layers are not in the text and count as linear.",
              layers=len(p.layers), params=p.total_params)


def summary_warnings(reading) -> list[str]:
    notes = []
    if reading.ambiguous_connections:
        notes.append(tr("{count} connections were cut short by the table's width and fit several earlier layers; "
                        "each was read as the nearest one. For an exact reading print the summary wider: "
                        "model.summary(line_length=200).", count=reading.ambiguous_connections))
    if reading.assumed_activations:
        notes.append(tr("{count} Activation rows do not name their function; read as {activation} (change it in "
                        "the sidebar).", count=reading.assumed_activations, activation=reading.assumed_activation))
    return notes


def caveat_rows(report: dict) -> list[dict]:
    """Per group of validation cases, the estimate's record, for the Validation page's table."""
    rows = []
    for kind, steps in caveats.CAVEAT_GROUPS.items():
        if (record := caveat_record(report, kind)) is not None:
            rows.append({"steps with": tr(steps), "cases": record.cases, "lowest error": record.lowest_error,
                         "highest error": record.highest_error,
                         "margin that covered every run": record.margin_for_every_run})
    return rows


def own_model_note(inputs: Inputs, record: CaveatRecord | None) -> str | None:
    """For a model the user brought (a file or a pasted summary), how the estimate fared on
    the own-model slice; None for a catalogue model or without a record."""
    if inputs.source == "catalogue" or record is None:
        return None
    return caveats.own_model_note(record, tr=tr)


def caveat_notes(view: EstimateView, inputs: Inputs, records: dict[str, CaveatRecord],
                 gpu_records: dict[str, CaveatRecord] | None = None) -> list[str]:
    """The warnings for this step's caveats, each with the measured record of its kind.

    ``records``: kind -> record of the validation cases of that kind
    (``dashboard.loaders.caveat_records()``); a kind without one gets the warning alone.
    ``gpu_records``: the same from the H100 slice, added for GPU kernels.
    """
    gpu = (gpu_records or {}) if inputs.device == "gpu" else {}
    return [caveats.caveat_note(kind, fmt(view.caveats[kind], inputs), records.get(kind), gpu.get(kind), tr=tr)
            for kind in caveats.CAVEATS if kind in view.caveats]
