"""Plotly figure builders: pure functions of numbers, no Streamlit."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from dashboard.i18n import mark, tr
from dashboard.plain import plain_label

COLORS = {
    "weights": "#4C78A8",
    "frozen_weights": "#4C78A8",
    "trainable_weights": "#9467BD",
    "gradients": "#F58518",
    "optimizer_state": "#E45756",
    "activations": "#72B7B2",
    "backward_transient": "#54A24B",
    "input_batch": "#EECA3B",
    "other": "#B279A2",
    "allocator": "#BAB0AC",
    "framework_overhead": "#9D755D",
    "kept_free": "#D4D4D4",
    "xla_temporaries": "#72B7B2",
    "xla_activations": "#72B7B2",
    "xla_gradients": "#F58518",
    "xla_workspace": "#FF9DA6",
    "xla_layout_copies": "#9ECAE9",
    "xla_other": "#D8B5A5",
    "xla_packing": "#BAB0AC",
    "step_outputs": "#B279A2",
    "outside_step": "#BAB0AC",
    "quantized_weights": "#1F4E79",
    "quantization_scales": "#A0CBE8",
}
LABELS = {
    "weights": mark("Weights"),
    "frozen_weights": mark("Frozen weights"),
    "trainable_weights": mark("Trainable weights"),
    "gradients": mark("Gradients"),
    "optimizer_state": mark("Optimizer state"),
    "activations": mark("Activations kept for backward"),
    "backward_transient": mark("Backward transients"),
    "input_batch": mark("Input batch"),
    "other": mark("Optimizer update temporaries"),
    "allocator": mark("Allocator chunks beyond tensor sizes (simulated)"),
    "framework_overhead": mark("Framework overhead (CUDA context, libraries)"),
    "kept_free": mark("Kept free for what the card adds to XLA's plan"),
    "xla_temporaries": mark("XLA temporaries (activations, gradients, scratch)"),
    "xla_activations": mark("Activations (live at XLA's peak)"),
    "xla_gradients": mark("Gradients (live at XLA's peak)"),
    "xla_workspace": mark("cuDNN and cuBLAS workspace"),
    "xla_layout_copies": mark("Weights and batch copied into another layout"),
    "xla_other": mark("Other XLA values"),
    "xla_packing": mark("XLA heap packing"),
    "step_outputs": mark("Step outputs"),
    "outside_step": mark("Outside the step"),
    "quantized_weights": mark("Quantized frozen weights"),
    "quantization_scales": mark("Quantization scales"),
}
PLAN_COLOR = "#F58518"
# Lines, arrows and reference marks: a mid grey reads on Streamlit's light and dark themes
# alike (black vanishes on the dark one, white on the light); texts take the theme's colour.
NEUTRAL = "#8C8C8C"
BAR_WIDTH = 0.5  # of the breakdown's one category: the bar spans x = -0.25..0.25


def bar_parts(components: dict[str, int], overhead: int, kept: int = 0) -> list[tuple[str, int]]:
    """The breakdown's parts as the bar chart stacks them, bottom up: (``LABELS`` key, bytes); ``kept``: what
    XLA's verdict keeps free beside the plan (``calc.xla.kept``), on top.

    The Estimator's table lists the same parts under the same names; parts of 0 bytes are left out
    (SGD without momentum has no optimizer state, a plan may hold no gradient at its peak).
    """
    parts = [*components.items(), ("framework_overhead", overhead), ("kept_free", kept)]
    return [(key, value) for key, value in parts if value]  # a part of 0 bytes is no part


def _hlines(fig: go.Figure, lines: list[tuple[float, str, str, str, str]], label_x: float | None = None) -> None:
    """Horizontal lines across the plot (y, dash, colour, label, label position).

    ``label_x``: the labels start there, in the x axis's coordinates, instead of at the
    plot's edge (the breakdown puts its label beside its bar, not on it).
    Plain layout shapes and annotations set once: ``fig.add_hline`` costs ~10 ms a
    call in Plotly 7, most of a rerun's figure time.
    """
    shapes, notes = [], []
    for y, dash, color, label, where in lines:
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y,
                           line=dict(dash=dash, color=color, width=2)))
        right = where.endswith("right")
        place = (dict(xref="paper", x=1 if right else 0, xanchor="right" if right else "left") if label_x is None
                 else dict(xref="x", x=label_x, xanchor="left"))
        notes.append(dict(**place, yref="y", y=y, yanchor="bottom" if where.startswith("top") else "top", text=label,
                          showarrow=False))
    fig.update_layout(shapes=shapes, annotations=notes)


def breakdown_figure(components: dict[str, int], overhead: int, capacity: int, divisor: float, unit: str,
                     kept: int = 0) -> go.Figure:
    fig = go.Figure()
    step = tr("this step")
    for key, value in bar_parts(components, overhead, kept):
        label = tr(LABELS[key])
        fig.add_bar(x=[step], y=[value / divisor], name=label, marker_color=COLORS[key], width=BAR_WIDTH,
                    hovertemplate=f"{label}: %{{y:.3f}} {unit}<extra></extra>")
    # The card's line runs across the plot; its label sits right of the bar, never on it.
    _hlines(fig, [(capacity / divisor, "dash", NEUTRAL, tr("GPU memory {size:.2f} {unit}", size=capacity / divisor,
                                                            unit=unit), "top left")], label_x=BAR_WIDTH / 2 + 0.05)
    # The legend below the plot leaves the plot the column's width, so the label fits beside the bar.
    fig.update_layout(barmode="stack", yaxis_title=unit, height=460, margin=dict(t=30, b=30), xaxis_range=[-0.5, 1.5],
                      legend=dict(title=tr("Component"), orientation="h", x=0, xanchor="left", y=-0.12,
                                  yanchor="top", traceorder="normal", bgcolor="rgba(0,0,0,0)"))
    return fig


def curve_figure(curve, capacity: int, usable: int, best: str, divisor: float, unit: str) -> go.Figure:
    """The batch curve (``dashboard.views.CurveView``) against the card, on linear axes.

    With XLA's plan: its line (drawn through compiled plans), its compiled plans as circles,
    and the walk in grey for comparison; with the walk alone: the walk's line. The chosen
    batch and the largest that fits are marked on what the page shows; ``best``: the largest batch as
    the metric writes it ("24", or "≥ 24" while XLA's search runs), so the legend says what the metric says.
    """
    fig = go.Figure()
    xla = bool(curve.drawn or curve.compiled)
    hover = tr("batch {batch}: {memory}", batch="%{x}", memory=f"%{{y:.2f}} {unit}") + "<extra></extra>"
    if curve.walk:
        fig.add_scatter(x=[b for b, _ in curve.walk], y=[t / divisor for _, t in curve.walk], mode="lines",
                        name=tr("graph-executor walk (jit_compile=False)"), hovertemplate=hover,
                        line=dict(color=NEUTRAL, dash="dot") if xla else None)
    if curve.drawn:
        fig.add_scatter(x=[b for b, _ in curve.drawn], y=[t / divisor for _, t in curve.drawn], mode="lines",
                        name=tr("XLA plan, drawn between compiled plans"), line=dict(color=PLAN_COLOR, width=3),
                        hovertemplate=tr("XLA plan (drawn), batch {batch}: {memory}", batch="%{x}",
                                         memory=f"%{{y:.2f}} {unit}") + "<extra></extra>")
    if curve.compiled:
        fig.add_scatter(x=[b for b, _ in curve.compiled], y=[t / divisor for _, t in curve.compiled], mode="markers",
                        name=tr("XLA plan (compiled)"), marker=dict(size=9, symbol="circle-open", color=PLAN_COLOR,
                                                                    line=dict(width=2)),
                        hovertemplate=tr("XLA plan, batch {batch}: {memory}", batch="%{x}",
                                         memory=f"%{{y:.2f}} {unit}") + "<extra></extra>")
    lines = [(capacity / divisor, "dash", NEUTRAL, tr("GPU memory"), "top left")]
    if usable != capacity:
        lines.append((usable / divisor, "dot", NEUTRAL, tr("with safety margin"), "bottom left"))  # clear of the
    _hlines(fig, lines)  # points, which meet the line on the right
    if curve.current is not None:
        batch, nbytes = curve.current
        fig.add_scatter(x=[batch], y=[nbytes / divisor], mode="markers", name=tr("batch {batch}", batch=batch),
                        marker=dict(size=12, color="#E45756"))
    if curve.best is not None and best:
        batch, nbytes = curve.best
        fig.add_scatter(x=[batch], y=[nbytes / divisor], mode="markers",
                        name=tr("largest that fits: {batch}", batch=best),
                        marker=dict(size=12, symbol="diamond", color="#54A24B"))
    # The part that matters is where the curve meets the card: the y axis ends a little above
    # the card (or the chosen batch), the x axis a third past the batches it must show.
    shown_top = max(1.3 * capacity, 1.1 * (curve.current[1] if curve.current else 0)) / divisor
    fig.update_layout(xaxis_title=tr("batch size"), yaxis_title=unit, height=460, margin=dict(t=30, b=30),
                      yaxis_range=[0, shown_top],
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.25, yanchor="top",
                                  bgcolor="rgba(0,0,0,0)"))
    if curve.x_max:
        fig.update_xaxes(range=[0, curve.x_max])
    return fig


def sequence_figure(view, divisor: float, unit: str) -> go.Figure:
    """The plans a search for the longest sequence compiled (``dashboard.xla_view.SequenceView``),
    as points with no line between them, against the card; the page's length and the longest that
    fits are marked."""
    fig = go.Figure()
    fig.add_scatter(x=[n for n, _ in view.points], y=[b / divisor for _, b in view.points], mode="markers",
                    name=tr("XLA plan (compiled)"), marker=dict(size=9, symbol="circle-open", color=PLAN_COLOR,
                                                                line=dict(width=2)),
                    hovertemplate=tr("XLA plan, {tokens} tokens: {memory}", tokens="%{x}",
                                     memory=f"%{{y:.2f}} {unit}") + "<extra></extra>")
    lines = [(view.capacity_bytes / divisor, "dash", NEUTRAL, tr("GPU memory"), "top left")]
    if view.usable_bytes != view.capacity_bytes:
        lines.append((view.usable_bytes / divisor, "dot", NEUTRAL, tr("with safety margin"), "bottom right"))
    _hlines(fig, lines)
    at = dict(view.points)
    if view.current in at:
        fig.add_scatter(x=[view.current], y=[at[view.current] / divisor], mode="markers",
                        name=tr("{tokens} tokens", tokens=view.current), marker=dict(size=12, color="#E45756"))
    if view.longest and view.longest in at:
        fig.add_scatter(x=[view.longest], y=[at[view.longest] / divisor], mode="markers",
                        name=tr("longest that fits: {tokens}", tokens=view.longest),
                        marker=dict(size=12, symbol="diamond", color="#54A24B"))
    top = max([1.3 * view.capacity_bytes] + [1.1 * b for _, b in view.points if b < 2 * view.capacity_bytes])
    fig.update_layout(xaxis_title=tr("sequence length (tokens)"), yaxis_title=unit, height=420,
                      margin=dict(t=30, b=30), yaxis_range=[0, top / divisor], xaxis_type="log",
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.25, yanchor="top",
                                  bgcolor="rgba(0,0,0,0)"))
    return fig


def layers_figure(names, kept_bytes, divisor: float, unit: str) -> go.Figure:
    fig = go.Figure(go.Bar(x=[k / divisor for k in kept_bytes], y=[plain_label(n) for n in names], orientation="h",
                           marker_color=COLORS["activations"]))
    fig.update_layout(xaxis_title=tr("{unit} kept per sample", unit=unit), height=30 * len(names) + 120,
                      yaxis=dict(autorange="reversed"), margin=dict(t=30, b=30))
    return fig


def timeline_figure(phases, totals, divisor: float, unit: str) -> go.Figure:
    colors = ["#4C78A8" if p.startswith("forward") else "#E45756" if p.startswith("backward") else "#54A24B"
              for p in phases]
    fig = go.Figure(go.Scatter(x=list(range(len(phases))), y=[t / divisor for t in totals], mode="lines+markers",
                               text=[plain_label(p) for p in phases], marker=dict(color=colors, size=4),
                               hovertemplate=f"%{{text}}: %{{y:.3f}} {unit}<extra></extra>"))
    peak = max(range(len(totals)), key=totals.__getitem__)
    fig.add_annotation(x=peak, y=totals[peak] / divisor, text=tr("peak: {moment}", moment=plain_label(phases[peak])), showarrow=True,
                       arrowcolor=NEUTRAL)
    fig.update_layout(xaxis_title=tr("moment of the step (forward → loss → backward → update)"),
                      yaxis_title=unit, height=420, margin=dict(t=30, b=30))
    return fig


def validation_figure(measured, predicted, labels, divisor: float, unit: str, extra=None) -> go.Figure:
    fig = go.Figure()
    fig.add_scatter(x=[m / divisor for m in measured], y=[p / divisor for p in predicted], mode="markers",
                    text=list(labels), name=tr("validation set"),
                    hovertemplate=tr("{case}<br>measured {measured}, predicted {predicted}", case="%{text}",
                                     measured="%{x:.3f}", predicted="%{y:.3f}") + "<extra></extra>")
    if extra:  # this session's "measure now" results: (measured bytes, predicted bytes, label)
        fig.add_scatter(x=[m / divisor for m, _, _ in extra], y=[p / divisor for _, p, _ in extra],
                        mode="markers+text", text=[plain_label(t) for _, _, t in extra], textposition="middle right",
                        name=tr("measured now"), marker=dict(size=14, symbol="star", color="#E45756"),
                        hovertemplate=tr("{case}<br>measured {measured}, predicted {predicted}", case="%{text}",
                                         measured="%{x:.3f}", predicted="%{y:.3f}") + "<extra></extra>")
    top = max([*measured, *predicted, *(m for m, _, _ in extra or []), *(p for _, p, _ in extra or [])],
              default=1) / divisor * 1.05
    fig.add_scatter(x=[0, top], y=[0, top], mode="lines", name="y = x", line=dict(dash="dash", color=NEUTRAL))
    fig.update_layout(xaxis_title=tr("measured peak ({unit})", unit=unit), yaxis_title=tr("predicted peak ({unit})", unit=unit),
                      height=480)
    return fig


def curves_figure(series: dict[str, tuple[list[int], list[int]]], limits: dict[str, int], divisor: float, unit: str,
                  markers: bool = False) -> go.Figure:
    """Memory over the batch, a line a series (``markers``: each point marked, for compiled plans); a card's
    line each, cards of the same usable memory (within 1 % of the plot's height) on one line, named together."""
    fig = go.Figure()
    for name, (batches, totals) in series.items():
        fig.add_scatter(x=batches, y=[t / divisor for t in totals], mode="lines+markers" if markers else "lines",
                        name=name)
    top = 1.3 * max(limits.values(), default=0)
    merged: list[tuple[int, list[str]]] = []
    for name, limit in sorted(limits.items(), key=lambda kv: kv[1]):
        if merged and limit - merged[-1][0] <= top / 100:
            merged[-1][1].append(name)
        else:
            merged.append((limit, [name]))
    _hlines(fig, [(limit / divisor, "dash", NEUTRAL, ", ".join(names), "top right") for limit, names in merged])
    fig.update_layout(xaxis_title=tr("batch size"), yaxis_title=unit, height=460)
    if limits:  # where the curves cross the cards, not where they end
        fig.update_yaxes(range=[0, top / divisor])
    largest = max((max(b) for b, _ in series.values() if b), default=1)
    fig.update_xaxes(type="log", range=[0, math.log10(max(2, largest) * 1.3)])  # from batch 1: no batch is smaller
    return fig
