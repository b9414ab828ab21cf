"""`autotune report`: one self-contained HTML page (and optional PNGs) about a finished study.

The page opens from disk with no server and no network: plotly.js is embedded inline once, in the
first figure, and every other figure reuses it. The PNGs are drawn with matplotlib from the same
data, so no browser is needed to make them. Everything is read from the optuna study: the trials'
user attrs and the study's user attrs as the search stored them.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.errors import UsageError
from autotune.progress import (
    TrialSummary,
    describe_params,
    format_bytes,
    format_rate,
    format_value,
    short_name,
)
from autotune.study.semantics import study_changes
from autotune.study.store import best_trial, measured_count, ranked_trials, study_cap_bytes

MIB = 2**20
FEASIBLE_COLOUR = "#1f77b4"
INFEASIBLE_COLOUR = "#d62728"
FRONT_COLOUR = "#2ca02c"
CAP_COLOUR = "#7f7f7f"

# The figures, in page order: (file stem and div id, title).
FIGURES = {
    "history": "Optimisation history",
    "throughput_memory": "Throughput against peak memory",
    "importance": "Parameter importances",
    "memory_estimate": "Memory estimate against measured peak",
}


@dataclass
class _Point:
    number: int
    tokens_per_s: float
    peak_bytes: int | None
    feasible: bool
    label: str


@dataclass
class ReportData:
    """What the page and the PNGs show, computed once from the study."""

    study_name: str
    trials: list[TrialSummary]
    cap_bytes: int | None
    cap_text: str | None
    # Optimisation history: every measured trial, and the best feasible tokens/s so far.
    history: list[_Point] = field(default_factory=list)
    best_so_far: list[tuple[int, float]] = field(default_factory=list)
    # Throughput against memory: measured trials with a peak (reused duplicates left out).
    scatter: list[_Point] = field(default_factory=list)
    front: list[_Point] = field(default_factory=list)
    # knob -> importance, or why there are none.
    importances: dict[str, float] = field(default_factory=dict)
    importance_note: str | None = None
    # (trial number, estimate bytes, measured peak bytes).
    estimates: list[tuple[int, int, int]] = field(default_factory=list)


def _is_duplicate(t: TrialSummary) -> bool:
    return "duplicate_of" in t.attrs


def _is_feasible(t: TrialSummary) -> bool:
    return t.state == "COMPLETE" and bool(t.attrs.get("feasible", True))


def memory_cap_bytes(study: optuna.Study) -> int | None:
    """The study's memory cap in bytes, or None when it has none (or it cannot be read)."""
    text = study.user_attrs.get("memory_cap")
    if not text:
        return None
    try:
        return study_cap_bytes(study, str(text))
    except UsageError:
        return None


def collect(study: optuna.Study) -> ReportData:
    """Read everything the report shows from `study`."""
    trials = ranked_trials(study)
    cap_text = study.user_attrs.get("memory_cap")
    data = ReportData(
        study_name=study.study_name,
        trials=trials,
        cap_bytes=memory_cap_bytes(study),
        cap_text=str(cap_text) if cap_text else None,
    )
    by_number = sorted(trials, key=lambda t: t.number)
    best: float | None = None
    for t in by_number:
        if t.tokens_per_s is not None:
            point = _Point(
                t.number,
                float(t.tokens_per_s),
                t.peak_memory_bytes,
                _is_feasible(t),
                describe_params(t.params),
            )
            data.history.append(point)
            if t.peak_memory_bytes is not None and not _is_duplicate(t):
                data.scatter.append(point)
            if point.feasible and (best is None or point.tokens_per_s > best):
                best = point.tokens_per_s
        if best is not None:
            data.best_so_far.append((t.number, best))
        estimate = t.attrs.get("memory_estimate_bytes")
        if estimate is not None and t.peak_memory_bytes is not None and not _is_duplicate(t):
            data.estimates.append((t.number, int(estimate), int(t.peak_memory_bytes)))
    data.front = pareto_front([p for p in data.scatter if p.feasible])
    data.importances, data.importance_note = _importances(study)
    return data


def pareto_front(points: list[_Point]) -> list[_Point]:
    """The points no other point beats on both counts (more tokens/s, less peak memory), by memory."""
    front: list[_Point] = []
    for p in sorted(points, key=lambda p: (p.peak_bytes or 0, -p.tokens_per_s)):
        if not front or p.tokens_per_s > front[-1].tokens_per_s:
            front.append(p)
    return front


def _importances(study: optuna.Study) -> tuple[dict[str, float], str | None]:
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    distinct = {tuple(sorted((k, repr(v)) for k, v in t.params.items())) for t in complete}
    if len(distinct) < 2:
        return {}, (
            f"Parameter importances need at least 2 completed trials with different knob values; "
            f"this study has {len(distinct)}."
        )
    try:
        from optuna.importance import get_param_importances

        # optuna's default evaluator (PED-ANOVA in optuna 5, fANOVA before): no extra dependency.
        values = get_param_importances(study)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return {}, f"Parameter importances could not be computed: {first}"
    if not values:
        return {}, "Parameter importances: no knob varies across the completed trials."
    return {k: float(v) for k, v in values.items()}, None


# ----------------------------------------------------------------------------- formatting


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _state_text(t: TrialSummary) -> str:
    if _is_duplicate(t):
        return f"reused #{t.attrs['duplicate_of']}"
    if t.state == "COMPLETE":
        return "ok" if t.attrs.get("feasible", True) else "infeasible"
    text = f"{t.state.lower()} ({t.reason})" if t.reason else t.state.lower()
    return f"{text}: {t.message}" if t.message else text


def _device_text(device: dict[str, Any]) -> str:
    if not device:
        return "unknown"
    if device.get("device") == "cuda":
        return f"{device.get('name')} x{device.get('count', 1)} ({format_bytes(device.get('memory_bytes'))})"
    return f"CPU ({format_bytes(device.get('memory_bytes'))} RAM)"


# ----------------------------------------------------------------------------- plotly figures


def _mib(n: float | None) -> float | None:
    return None if n is None else round(n / MIB, 3)


def _hover(p: _Point) -> str:
    return (
        f"trial {p.number}<br>{html.escape(p.label)}<br>{format_rate(p.tokens_per_s)} tok/s, "
        f"peak {format_bytes(p.peak_bytes)}"
    )


def _feasibility_traces(points: list[Any], x_of: Any, labelled: bool) -> list[Any]:
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
    fig.update_layout(
        title=FIGURES["history"], xaxis_title="trial number", yaxis_title="tokens/s", template="plotly_white"
    )
    return fig


def _throughput_memory_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for trace in _feasibility_traces(data.scatter, lambda p: _mib(p.peak_bytes), labelled=True):
        fig.add_trace(trace)
    if data.front:
        fig.add_trace(
            go.Scatter(
                x=[_mib(p.peak_bytes) for p in data.front],
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
            x=_mib(data.cap_bytes),
            line={"color": CAP_COLOUR, "dash": "dash"},
            annotation_text=f"memory cap {data.cap_text} ({format_bytes(data.cap_bytes)})",
            annotation_position="top left",
        )
    fig.update_layout(
        title=FIGURES["throughput_memory"],
        xaxis_title="measured peak memory (MiB)",
        yaxis_title="tokens/s",
        template="plotly_white",
    )
    return fig


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
    fig.update_layout(
        title=f"{FIGURES['importance']} (optuna, over completed trials)",
        xaxis_title="importance for tokens/s",
        template="plotly_white",
    )
    return fig


def _estimate_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    est = [_mib(e) or 0.0 for _, e, _ in data.estimates]
    peak = [_mib(p) or 0.0 for _, _, p in data.estimates]
    lo, hi = min(est + peak), max(est + peak)
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[lo - pad, hi + pad],
            y=[lo - pad, hi + pad],
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
    fig.update_layout(
        title=FIGURES["memory_estimate"],
        xaxis_title="estimated peak (MiB)",
        yaxis_title="measured peak (MiB)",
        template="plotly_white",
    )
    return fig


def _figures(data: ReportData) -> dict[str, Any]:
    """The plotly figures the data supports, by name (a missing one gets a note on the page)."""
    figures: dict[str, Any] = {}
    if data.history:
        figures["history"] = _history_figure(data)
    if data.scatter:
        figures["throughput_memory"] = _throughput_memory_figure(data)
    if data.importances:
        figures["importance"] = _importance_figure(data)
    if data.estimates:
        figures["memory_estimate"] = _estimate_figure(data)
    return figures


def _notes(data: ReportData) -> dict[str, str]:
    return {
        "history": "No trial has a throughput measurement yet.",
        "throughput_memory": "No trial has both a throughput and a peak memory measurement.",
        "importance": data.importance_note or "No parameter importances.",
        "memory_estimate": "No trial carries a memory estimate next to a measured peak.",
    }


# ----------------------------------------------------------------------------- HTML


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1300px;
       color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; }
dl.header { display: grid; grid-template-columns: max-content 1fr; gap: 0.3em 1.2em; }
dl.header dt { font-weight: 600; }
dl.header dd { margin: 0; }
.figure { margin: 1.5em 0; border: 1px solid #ddd; border-radius: 6px; padding: 0.5em; }
.note { color: #666; font-style: italic; padding: 0.5em 1em; }
table.trials { border-collapse: collapse; font-size: 0.9em; width: 100%; }
table.trials th, table.trials td { border-bottom: 1px solid #e3e3e3; padding: 0.3em 0.6em; text-align: left; }
table.trials td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.trials tr.winner { background: #eaf6ea; font-weight: 600; }
table.trials tr.infeasible td.state { color: #b22; }
table.trials tr.reused td, table.trials tr.skipped td { color: #888; }
"""


def _header(study: optuna.Study, data: ReportData) -> str:
    attrs = study.user_attrs
    workload = attrs.get("workload") or {}
    model = workload.get("model", "unknown")
    model_text = model
    if workload.get("task"):
        model_text += f" ({workload['task']})"
    if workload.get("seq_len"):
        model_text += f", seq len {workload['seq_len']}"
    finished = len(data.trials)
    rows: list[tuple[str, str]] = [
        ("study", data.study_name),
        ("model", model_text),
        ("device", _device_text(attrs.get("device") or {})),
        (
            "memory cap",
            f"{data.cap_text} ({format_bytes(data.cap_bytes)})" if data.cap_bytes is not None else "none",
        ),
        ("trials measured", f"{measured_count(study)} (of {finished} finished)"),
    ]
    best = best_trial(study)
    winner = attrs.get("winner")
    if best is None:
        rows.append(("winner", "no feasible trial"))
    else:
        line = f"trial {best.number}: {describe_params(best.params)}, {format_rate(best.tokens_per_s)} tok/s"
        if winner and winner.get("number") == best.number and winner.get("median_tokens_per_s"):
            line += f" in the search, median {format_rate(winner['median_tokens_per_s'])} tok/s re-measured"
        rows.append(("winner", line))
        if winner and winner.get("number") == best.number and winner.get("verdict"):
            rows.append(("verdict", str(winner["verdict"])))
        changes = study_changes(attrs, best.params, best.attrs.get("training_args"))
        rows.append(
            (
                "changes to the training math",
                "; ".join(c.text() for c in changes)
                or "none (same precision, optimizer family, effective batch)",
            )
        )
    finalists = attrs.get("finalists") or []
    if finalists:
        parts = []
        for f in finalists:
            spread = f" ±{100 * f['spread']:.1f}%" if f.get("spread") is not None else ""
            who = "baseline" if f.get("number", 0) < 0 else f"#{f.get('number')}"
            parts.append(f"{who} {format_rate(f.get('median'))} tok/s{spread}")
        rows.append(("finalists (median of re-measurements)", ", ".join(parts)))
    body = "\n".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in rows)
    return f"<h1>autotune report: {html.escape(data.study_name)}</h1>\n<dl class='header'>\n{body}\n</dl>"


def _table(data: ReportData, winner: int | None) -> str:
    knob_names = list(dict.fromkeys(k for t in data.trials for k in t.params))
    # MFU is known only on devices with a known peak (never guessed): the column appears with it.
    with_mfu = any(t.attrs.get("mfu") is not None for t in data.trials)
    head = ["#", *(short_name(k) for k in knob_names), "tok/s", "±", *(["MFU"] if with_mfu else [])]
    head += ["peak memory", "estimate", "state"]
    titles = ["trial number", *knob_names, "", "95% confidence half-width"]
    titles += [*(["model FLOPs utilisation"] if with_mfu else []), "", "", ""]
    header = "".join(
        f"<th title='{html.escape(ti)}'>{html.escape(h)}</th>" for h, ti in zip(head, titles, strict=True)
    )
    lines = [
        "<table class='trials'>",
        f"<thead><tr>{header}</tr></thead>",
        "<tbody>",
    ]
    for t in data.trials:
        if t.number == winner:
            css = "winner"
        elif _is_duplicate(t):
            css = "reused"
        elif _is_feasible(t):
            css = "ok"
        elif t.tokens_per_s is None:
            css = "skipped"
        else:
            css = "infeasible"
        ci = f"{100 * t.rel_ci_halfwidth:.1f}%" if t.rel_ci_halfwidth is not None else "-"
        cells = [
            ("num", str(t.number)),
            *(("", format_value(t.params.get(k, "-"))) for k in knob_names),
            ("num", format_rate(t.tokens_per_s)),
            ("num", ci),
            *([("num", _share(t.attrs.get("mfu")))] if with_mfu else []),
            ("num", format_bytes(t.peak_memory_bytes)),
            ("num", format_bytes(t.attrs.get("memory_estimate_bytes"))),
            ("state", _state_text(t)),
        ]
        row = "".join(f"<td class='{c}'>{html.escape(v)}</td>" for c, v in cells)
        lines.append(f"<tr class='{css}' data-trial='{t.number}'>{row}</tr>")
    lines += ["</tbody>", "</table>"]
    return "\n".join(lines)


def build_report(study: optuna.Study) -> str:
    """The report of `study` as one self-contained HTML document (plotly.js inline, once)."""
    return _html(study, collect(study))


def _html(study: optuna.Study, data: ReportData) -> str:
    figures = _figures(data)
    notes = _notes(data)
    sections = []
    first = True
    for name, title in FIGURES.items():
        if name in figures:
            div = figures[name].to_html(
                full_html=False,
                include_plotlyjs=first,
                div_id=f"fig-{name}",
                default_height="480px",
                config={"displaylogo": False, "responsive": True},
            )
            first = False
            sections.append(f"<section class='figure' id='{name}'>\n{div}\n</section>")
        else:
            sections.append(
                f"<section class='figure' id='{name}'><h2>{html.escape(title)}</h2>"
                f"<p class='note'>{html.escape(notes[name])}</p></section>"
            )
    best = best_trial(study)
    table = _table(data, best.number if best is not None else None)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            "<html lang='en'>",
            "<head>",
            "<meta charset='utf-8'>",
            f"<title>autotune report: {html.escape(data.study_name)}</title>",
            f"<style>{_CSS}</style>",
            "</head>",
            "<body>",
            _header(study, data),
            *sections,
            "<section id='trials'><h2>Trials, best first</h2>",
            table,
            "</section>",
            "</body>",
            "</html>",
            "",
        ]
    )


# ----------------------------------------------------------------------------- PNGs (matplotlib)


def _png_history(data: ReportData, ax: Any) -> None:
    for feasible, name, colour, marker in (
        (True, "feasible", FEASIBLE_COLOUR, "o"),
        (False, "infeasible", INFEASIBLE_COLOUR, "x"),
    ):
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
    ax.set_xlabel("trial number")
    ax.set_ylabel("tokens/s")
    ax.set_title(FIGURES["history"])
    ax.legend()


def _png_throughput_memory(data: ReportData, ax: Any) -> None:
    for feasible, name, colour, marker in (
        (True, "feasible", FEASIBLE_COLOUR, "o"),
        (False, "infeasible", INFEASIBLE_COLOUR, "x"),
    ):
        pts = [p for p in data.scatter if p.feasible == feasible]
        if pts:
            xs = [_mib(p.peak_bytes) or 0.0 for p in pts]
            ys = [p.tokens_per_s for p in pts]
            ax.scatter(xs, ys, c=colour, marker=marker, label=name)
            for p, x, y in zip(pts, xs, ys, strict=True):
                ax.annotate(
                    f"#{p.number}", (x, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=8
                )
    if data.front:
        ax.step(
            [_mib(p.peak_bytes) or 0.0 for p in data.front],
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
        ax.axvline(
            _mib(data.cap_bytes), color=CAP_COLOUR, linestyle="--", label=f"memory cap {data.cap_text}"
        )
    ax.set_xlabel("measured peak memory (MiB)")
    ax.set_ylabel("tokens/s")
    ax.set_title(FIGURES["throughput_memory"])
    ax.legend()


def _png_importance(data: ReportData, ax: Any) -> None:
    items = sorted(data.importances.items(), key=lambda kv: kv[1])
    ax.barh([short_name(k) for k, _ in items], [v for _, v in items], color=FEASIBLE_COLOUR)
    ax.set_xlabel("importance for tokens/s")
    ax.set_title(f"{FIGURES['importance']} (optuna, over completed trials)")


def _png_estimate(data: ReportData, ax: Any) -> None:
    est = [_mib(e) or 0.0 for _, e, _ in data.estimates]
    peak = [_mib(p) or 0.0 for _, _, p in data.estimates]
    lo, hi = min(est + peak), max(est + peak)
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    ax.plot(
        [lo - pad, hi + pad],
        [lo - pad, hi + pad],
        color=CAP_COLOUR,
        linestyle="--",
        label="estimate = measured",
    )
    ax.scatter(est, peak, c=FEASIBLE_COLOUR, label="trials")
    for (n, _, _), x, y in zip(data.estimates, est, peak, strict=True):
        ax.annotate(f"#{n}", (x, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=8)
    ax.set_xlabel("estimated peak (MiB)")
    ax.set_ylabel("measured peak (MiB)")
    ax.set_title(FIGURES["memory_estimate"])
    ax.legend()


_PNG_DRAW: dict[str, Callable[[ReportData, Any], None]] = {
    "history": _png_history,
    "throughput_memory": _png_throughput_memory,
    "importance": _png_importance,
    "memory_estimate": _png_estimate,
}


def _available(data: ReportData) -> list[str]:
    checks = {
        "history": bool(data.history),
        "throughput_memory": bool(data.scatter),
        "importance": bool(data.importances),
        "memory_estimate": bool(data.estimates),
    }
    return [name for name in FIGURES if checks[name]]


def write_pngs(data: ReportData, png_dir: Path) -> list[Path]:
    """Each figure the data supports as a static PNG in `png_dir`, drawn with matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError(
            "--png needs matplotlib", "install it with: pip install 'autotune[report]'"
        ) from None
    png_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in _available(data):
        fig = Figure(figsize=(10, 6), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        _PNG_DRAW[name](data, ax)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        path = png_dir / f"{name}.png"
        fig.savefig(path, format="png")
        written.append(path)
    return written


def write_report(study: optuna.Study, path: Path, png_dir: Path | None = None) -> list[Path]:
    """Write the HTML report of `study` to `path` (and the PNGs into `png_dir` when given).

    Returns:
        The files written: the HTML first, then the PNGs.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = collect(study)
    path.write_text(_html(study, data), encoding="utf-8")
    written = [path]
    if png_dir is not None:
        written += write_pngs(data, Path(png_dir))
    return written


__all__ = [
    "FIGURES",
    "ReportData",
    "build_report",
    "collect",
    "memory_cap_bytes",
    "pareto_front",
    "write_report",
]
