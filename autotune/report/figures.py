"""The report's figures, drawn by plotly: the page embeds them and the PNGs are their screenshots.

plotly is imported inside the functions: it is an optional dependency (``hf-autotune[report]``).
"""

from __future__ import annotations

import html
from typing import Any

from autotune.progress import format_bytes, format_rate, short_name
from autotune.report.data import FIGURES, Point, ReportData, available

MIB = 2**20
FEASIBLE_COLOUR = "#1f77b4"
INFEASIBLE_COLOUR = "#d62728"
FRONT_COLOUR = "#2ca02c"
CAP_COLOUR = "#7f7f7f"

# Each figure's axis titles (x, y).
AXES: dict[str, tuple[str, str | None]] = {
    "history": ("trial number", "tokens/s"),
    "throughput_memory": ("measured peak memory (MiB)", "tokens/s"),
    "importance": ("importance for tokens/s", None),
    "memory_estimate": ("estimated peak (MiB)", "measured peak (MiB)"),
}


def title(name: str) -> str:
    """The title drawn on figure `name`."""
    if name == "importance":
        return f"{FIGURES[name]} (optuna, over completed trials)"
    return FIGURES[name]


def mib(n: float | None) -> float | None:
    """`n` bytes in MiB, as the figures' memory axes show them."""
    return None if n is None else round(n / MIB, 3)


def estimate_points(data: ReportData) -> tuple[list[float], list[float], list[float]]:
    """Estimates and measured peaks in MiB, and the ends of the identity line drawn around them."""
    est = [mib(e) or 0.0 for _, e, _ in data.estimates]
    peak = [mib(p) or 0.0 for _, _, p in data.estimates]
    lo, hi = min(est + peak), max(est + peak)
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    return est, peak, [lo - pad, hi + pad]


def plotly_figures(data: ReportData) -> dict[str, Any]:
    """The plotly figures the data supports, by name (a missing one gets a note on the page)."""
    return {name: _PLOTLY[name](data) for name in available(data)}


def _layout(fig: Any, name: str) -> Any:
    x_title, y_title = AXES[name]
    axes = {"xaxis_title": x_title, **({"yaxis_title": y_title} if y_title else {})}
    fig.update_layout(title=title(name), **axes, template="plotly_white")
    return fig


def _hover(p: Point) -> str:
    return (
        f"trial {p.number}<br>{html.escape(p.label)}<br>{format_rate(p.tokens_per_s)} tok/s, "
        f"peak {format_bytes(p.peak_bytes)}"
    )


def _feasibility_traces(points: list[Point], x_of: Any, labelled: bool) -> list[Any]:
    """One scatter trace of feasible and one of infeasible points (tokens/s against `x_of`)."""
    import plotly.graph_objects as go

    traces = []
    for feasible, name, colour, symbol in (
        (True, "feasible", FEASIBLE_COLOUR, "circle"),
        (False, "infeasible", INFEASIBLE_COLOUR, "x"),
    ):
        pts = [p for p in points if p.feasible == feasible]
        if not pts:
            continue
        extra: dict[str, Any] = {"mode": "markers"}
        if labelled:
            extra = {
                "mode": "markers+text",
                "text": [f"#{p.number}" for p in pts],
                "textposition": "top center",
                "customdata": [p.peak_bytes for p in pts],
            }
        traces.append(
            go.Scatter(
                x=[x_of(p) for p in pts],
                y=[p.tokens_per_s for p in pts],
                name=name,
                marker={"color": colour, "symbol": symbol, "size": 10 if labelled else 9},
                hovertext=[_hover(p) for p in pts],
                hoverinfo="text",
                **extra,
            )
        )
    return traces


def _history_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for trace in _feasibility_traces(data.history, lambda p: p.number, labelled=False):
        fig.add_trace(trace)
    if data.best_so_far:
        fig.add_trace(
            go.Scatter(
                x=[n for n, _ in data.best_so_far],
                y=[v for _, v in data.best_so_far],
                mode="lines",
                line={"shape": "hv", "color": FRONT_COLOUR},
                name="best feasible so far",
            )
        )
    return _layout(fig, "history")


def _throughput_memory_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for trace in _feasibility_traces(data.scatter, lambda p: mib(p.peak_bytes), labelled=True):
        fig.add_trace(trace)
    if data.front:
        fig.add_trace(
            go.Scatter(
                x=[mib(p.peak_bytes) for p in data.front],
                y=[p.tokens_per_s for p in data.front],
                mode="lines+markers",
                line={"shape": "hv", "color": FRONT_COLOUR, "dash": "dot"},
                marker={"symbol": "circle-open", "size": 16, "color": FRONT_COLOUR},
                name="Pareto front (feasible)",
                hoverinfo="skip",
            )
        )
    if data.cap_bytes is not None:
        fig.add_vline(
            x=mib(data.cap_bytes),
            line={"color": CAP_COLOUR, "dash": "dash"},
            annotation_text=f"memory cap {data.cap_text} ({format_bytes(data.cap_bytes)})",
            annotation_position="top left",
        )
    return _layout(fig, "throughput_memory")


def _importance_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    items = sorted(data.importances.items(), key=lambda kv: kv[1])
    fig = go.Figure(
        go.Bar(
            x=[v for _, v in items],
            y=[short_name(k) for k, _ in items],
            orientation="h",
            marker={"color": FEASIBLE_COLOUR},
            hovertext=[f"{k}: {v:.3f}" for k, v in items],
            hoverinfo="text",
        )
    )
    return _layout(fig, "importance")


def _estimate_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    est, peak, line = estimate_points(data)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=line,
            y=line,
            mode="lines",
            line={"color": CAP_COLOUR, "dash": "dash"},
            name="estimate = measured",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=est,
            y=peak,
            mode="markers+text",
            text=[f"#{n}" for n, _, _ in data.estimates],
            textposition="top center",
            name="trials",
            marker={"color": FEASIBLE_COLOUR, "size": 9},
            customdata=[[e, p] for _, e, p in data.estimates],
            hovertext=[
                f"trial {n}<br>estimate {format_bytes(e)}<br>measured {format_bytes(p)} "
                f"({100 * (e - p) / p:+.1f}%)"
                for n, e, p in data.estimates
            ],
            hoverinfo="text",
        )
    )
    return _layout(fig, "memory_estimate")


_PLOTLY = {
    "history": _history_figure,
    "throughput_memory": _throughput_memory_figure,
    "importance": _importance_figure,
    "memory_estimate": _estimate_figure,
}
