"""The report's figures as static PNGs, drawn with matplotlib from the same data (no browser needed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.errors import UsageError
from autotune.progress import short_name
from autotune.report.data import ReportData, available
from autotune.report.figures import (
    AXES,
    CAP_COLOUR,
    FEASIBLE_COLOUR,
    FRONT_COLOUR,
    INFEASIBLE_COLOUR,
    estimate_points,
    mib,
    title,
)

_FEASIBILITY = (
    (True, "feasible", FEASIBLE_COLOUR, "o"),
    (False, "infeasible", INFEASIBLE_COLOUR, "x"),
)


def write_pngs(data: ReportData, png_dir: Path) -> list[Path]:
    """Each figure the data supports as a static PNG in `png_dir`, drawn with matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError(
            "--png needs matplotlib", "install it with: pip install 'hf-autotune[report]'"
        ) from None
    png_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in available(data):
        fig = Figure(figsize=(10, 6), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        _DRAW[name](data, ax)
        _label(ax, name)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        path = png_dir / f"{name}.png"
        fig.savefig(path, format="png")
        written.append(path)
    return written


def _label(ax: Any, name: str) -> None:
    x_title, y_title = AXES[name]
    ax.set_xlabel(x_title)
    if y_title:
        ax.set_ylabel(y_title)
    ax.set_title(title(name))


def _annotate(ax: Any, text: str, x: float, y: float) -> None:
    ax.annotate(text, (x, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=8)


def _history(data: ReportData, ax: Any) -> None:
    for feasible, name, colour, marker in _FEASIBILITY:
        pts = [p for p in data.history if p.feasible == feasible]
        if pts:
            ax.scatter(
                [p.number for p in pts], [p.tokens_per_s for p in pts], c=colour, marker=marker, label=name
            )
    if data.best_so_far:
        ax.step(
            [n for n, _ in data.best_so_far],
            [v for _, v in data.best_so_far],
            where="post",
            color=FRONT_COLOUR,
            label="best feasible so far",
        )
    ax.legend()


def _throughput_memory(data: ReportData, ax: Any) -> None:
    for feasible, name, colour, marker in _FEASIBILITY:
        pts = [p for p in data.scatter if p.feasible == feasible]
        if pts:
            xs = [mib(p.peak_bytes) or 0.0 for p in pts]
            ys = [p.tokens_per_s for p in pts]
            ax.scatter(xs, ys, c=colour, marker=marker, label=name)
            for p, x, y in zip(pts, xs, ys, strict=True):
                _annotate(ax, f"#{p.number}", x, y)
    if data.front:
        ax.step(
            [mib(p.peak_bytes) or 0.0 for p in data.front],
            [p.tokens_per_s for p in data.front],
            where="post",
            color=FRONT_COLOUR,
            linestyle=":",
            marker="o",
            markerfacecolor="none",
            markersize=14,
            label="Pareto front (feasible)",
        )
    if data.cap_bytes is not None:
        ax.axvline(mib(data.cap_bytes), color=CAP_COLOUR, linestyle="--", label=f"memory cap {data.cap_text}")
    ax.legend()


def _importance(data: ReportData, ax: Any) -> None:
    items = sorted(data.importances.items(), key=lambda kv: kv[1])
    ax.barh([short_name(k) for k, _ in items], [v for _, v in items], color=FEASIBLE_COLOUR)


def _estimate(data: ReportData, ax: Any) -> None:
    est, peak, line = estimate_points(data)
    ax.plot(line, line, color=CAP_COLOUR, linestyle="--", label="estimate = measured")
    ax.scatter(est, peak, c=FEASIBLE_COLOUR, label="trials")
    for (n, _, _), x, y in zip(data.estimates, est, peak, strict=True):
        _annotate(ax, f"#{n}", x, y)
    ax.legend()


_DRAW: dict[str, Callable[[ReportData, Any], None]] = {
    "history": _history,
    "throughput_memory": _throughput_memory,
    "importance": _importance,
    "memory_estimate": _estimate,
}
