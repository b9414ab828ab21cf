"""The report's HTML page: a header about the study, the figures, and the table of trials.

The page opens from disk with no server and no network: plotly.js is embedded inline once, in the
first figure, and every other figure reuses it.
"""

from __future__ import annotations

import html
import statistics
from pathlib import Path
from typing import Any

from autotune.answer.model import Answer
from autotune.export.config import export_config
from autotune.export.words import answer_lines
from autotune.progress import (
    TrialSummary,
    describe_params,
    describe_time_breakdown,
    format_bytes,
    format_rate,
    format_value,
    short_name,
)
from autotune.records import FinalistRecord, read_study
from autotune.report.data import FIGURES, ReportData, collect, is_duplicate, is_feasible
from autotune.report.figures import plotly_figures
from autotune.report.pngs import write_pngs
from autotune.store.session import StudyStore
from autotune.store.trials import best_trial, measured_count


def build_report(study: StudyStore, answer: Answer | None = None) -> str:
    """The report of `study` as one self-contained HTML document (plotly.js inline, once), with
    its `answer` (default: the one stored with the study)."""
    return _html(study, collect(study), answer)


def write_report(
    study: StudyStore, path: Path, png_dir: Path | None = None, answer: Answer | None = None
) -> list[Path]:
    """Write the HTML report of `study` to `path` (and the PNGs into `png_dir` when given), with
    its `answer` (default: the one stored with the study; ``autotune report`` passes the answer
    it decides for a store that holds none).

    Returns:
        The files written: the HTML first, then the PNGs.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = collect(study)
    path.write_text(_html(study, data, answer), encoding="utf-8")
    written = [path]
    if png_dir is not None:
        written += write_pngs(data, Path(png_dir))
    return written


def _html(study: StudyStore, data: ReportData, answer: Answer | None) -> str:
    figures = plotly_figures(data)
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
            _header(study, data, answer),
            *sections,
            "<section id='trials'><h2>Trials, best first</h2>",
            table,
            "</section>",
            "</body>",
            "</html>",
            "",
        ]
    )


def _notes(data: ReportData) -> dict[str, str]:
    return {
        "history": "No trial has a throughput measurement yet.",
        "throughput_memory": "No trial has both a throughput and a peak memory measurement.",
        "importance": data.importance_note or "No parameter importances.",
        "memory_estimate": "No trial carries a memory estimate next to a measured peak.",
    }


def _header(study: StudyStore, data: ReportData, answer: Answer | None) -> str:
    record = read_study(study)
    answer = answer or (Answer.from_dict(record.answer) if record.answer else None)
    workload = record.workload or {}
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
        ("device", _device_text(record.device or {})),
        (
            "memory cap",
            f"{data.cap_text} ({format_bytes(data.cap_bytes)})" if data.cap_bytes is not None else "none",
        ),
        ("trials measured", f"{measured_count(study)} (of {finished} finished)"),
    ]
    best = best_trial(study)
    winner = record.winner
    if best is None:
        rows.append(("best measured", "no feasible trial"))
    else:
        line = f"trial {best.number}: {describe_params(best.params)}, {format_rate(best.tokens_per_s)} tok/s"
        if winner and winner.number == best.number and winner.median_tokens_per_s:
            line += f" in the search, median {format_rate(winner.median_tokens_per_s)} tok/s re-measured"
        rows.append(("best measured", line))
        if winner and winner.number == best.number and winner.race:
            rows.append(("re-measured", winner.race))
    if answer is not None and answer.choice is not None:
        # the answer's own lines, as the search's end, `autotune show` and every export say them
        lines = answer_lines(export_config(study, answer), time_line=False)
        keyed = [line.split(": ", 1) for line in lines if not line.startswith(" ")]
        rows += [(key, value) for key, value in (pair for pair in keyed if len(pair) == 2)]
        changes = [line.strip() for line in lines if line.startswith("  ")]
        rows.append(
            (
                "changes to the training math",
                "; ".join(changes) or "none (same precision, optimizer family, effective batch)",
            )
        )
    elif answer is not None:
        rows.append(("answer", answer.verdict))
    if record.finalists:
        parts = [_finalist_text(f) for f in record.finalists]
        rows.append(("finalists (median of re-measurements)", ", ".join(parts)))
    spent = describe_time_breakdown(record.time_breakdown)
    if spent:
        rows.append(("search time", spent.removeprefix("search time: ")))
    body = "\n".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in rows)
    return f"<h1>autotune report: {html.escape(data.study_name)}</h1>\n<dl class='header'>\n{body}\n</dl>"


def _finalist_text(f: FinalistRecord) -> str:
    """``#3 31.0k tok/s ±3.0% over 4 rounds``: a finalist's median re-measured throughput and the
    half-range of its rounds (as version 0 stored them, else from its rounds' tokens/s)."""
    median, spread = f.median, f.spread
    if median is None and f.tokens_per_s:
        median = statistics.median(f.tokens_per_s)
        spread = (max(f.tokens_per_s) - min(f.tokens_per_s)) / 2 / median if median > 0 else None
    who = "baseline" if f.number == -1 else "baseline (A/A)" if f.number < 0 else f"#{f.number}"
    spread_text = f" ±{100 * spread:.1f}%" if spread is not None else ""
    # extra rounds race only some of them
    return f"{who} {format_rate(median)} tok/s{spread_text} over {len(f.tokens_per_s)} rounds"


def _table(data: ReportData, winner: int | None) -> str:
    knob_names = list(dict.fromkeys(k for t in data.trials for k in t.params))
    # MFU is known only on devices with a known peak (never guessed): the column appears with it.
    with_mfu = any(t.measurement.mfu is not None for t in data.trials)
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
        elif is_duplicate(t):
            css = "reused"
        elif is_feasible(t):
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
            *([("num", _share(t.measurement.mfu))] if with_mfu else []),
            ("num", format_bytes(t.peak_memory_bytes)),
            ("num", format_bytes(t.memory.estimate_bytes)),
            ("state", _state_text(t)),
        ]
        row = "".join(f"<td class='{c}'>{html.escape(v)}</td>" for c, v in cells)
        lines.append(f"<tr class='{css}' data-trial='{t.number}'>{row}</tr>")
    lines += ["</tbody>", "</table>"]
    return "\n".join(lines)


def _state_text(t: TrialSummary) -> str:
    if is_duplicate(t):
        return f"reused #{t.duplicate_of}"
    if t.state == "COMPLETE":
        return "ok" if t.is_feasible else "infeasible"
    text = f"{t.state.lower()} ({t.reason})" if t.reason else t.state.lower()
    return f"{text}: {t.message}" if t.message else text


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _device_text(device: dict[str, Any]) -> str:
    if not device:
        return "unknown"
    if device.get("device") == "cuda":
        return f"{device.get('name')} x{device.get('count', 1)} ({format_bytes(device.get('memory_bytes'))})"
    return f"CPU ({format_bytes(device.get('memory_bytes'))} RAM)"


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
