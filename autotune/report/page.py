"""The report's HTML page: a header about the study, the figures, and the table of trials.

The page is the jinja2 template ``templates/report.html``, autoescaped: this module computes what
it shows (the header's rows, the figures' divs or notes, the table's cells) and the template lays
it out. The page opens from disk with no server and no network: plotly.js is embedded inline once,
in the first figure, and every other figure reuses it. Each figure is drawn once, by plotly; its
PNG (`pngs`) is a screenshot of that same figure object.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from autotune.answer.model import Answer
from autotune.answer.race import best_trial, race_of
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
from autotune.report.pngs import find_browser, write_pngs
from autotune.report.render import markup, render
from autotune.store.session import StudyStore
from autotune.store.trials import measured_count


def build_report(study: StudyStore, answer: Answer | None = None) -> str:
    """The report of `study` as one self-contained HTML document (plotly.js inline, once), with
    its `answer` (default: the one stored with the study)."""
    data = collect(study)
    return _html(study, data, answer, plotly_figures(data))


def write_report(
    study: StudyStore, path: Path, png_dir: Path | None = None, answer: Answer | None = None
) -> list[Path]:
    """Write the HTML report of `study` to `path` (and the PNGs into `png_dir` when given), with
    its `answer` (default: the one stored with the study; ``autotune report`` passes the answer
    it decides for a store that holds none).

    Returns:
        The files written: the HTML first, then the PNGs.

    Raises:
        UsageError: `png_dir` is given and no Chrome or Chromium is on PATH (nothing is written).
    """
    path = Path(path)
    # A missing browser is reported before anything is written.
    browser = find_browser() if png_dir is not None else None
    data = collect(study)
    figures = plotly_figures(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_html(study, data, answer, figures), encoding="utf-8")
    written = [path]
    if png_dir is not None and browser is not None:
        written += write_pngs(figures, Path(png_dir), browser)
    return written


def _html(study: StudyStore, data: ReportData, answer: Answer | None, figures: dict[str, Any]) -> str:
    notes = _notes(data)
    shown = []
    first = True
    for name, title in FIGURES.items():
        div = None
        if name in figures:
            div = markup(
                figures[name].to_html(
                    full_html=False,
                    include_plotlyjs=first,
                    div_id=f"fig-{name}",
                    default_height="480px",
                    config={"displaylogo": False, "responsive": True},
                )
            )
            first = False
        shown.append({"name": name, "title": title, "div": div, "note": notes[name]})
    best = best_trial(study)
    return render(
        "report.html",
        study_name=data.study_name,
        header=_header(study, data, answer),
        figures=shown,
        table=_table(data, best.number if best is not None else None),
    )


def _notes(data: ReportData) -> dict[str, str]:
    return {
        "history": "No trial has a throughput measurement yet.",
        "throughput_memory": "No trial has both a throughput and a peak memory measurement.",
        "importance": data.importance_note or "No parameter importances.",
        "memory_estimate": "No trial carries a memory estimate next to a measured peak.",
    }


def _header(study: StudyStore, data: ReportData, answer: Answer | None) -> list[tuple[str, str]]:
    """The header's (term, description) rows: the study, its workload and device, and the answer."""
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
    race = race_of(record)
    if best is None:
        rows.append(("best measured", "no feasible trial"))
    else:
        line = f"trial {best.number}: {describe_params(best.params)}, {format_rate(best.tokens_per_s)} tok/s"
        leads = race is not None and race.leader == best.number
        if race is not None and leads and race.median_tokens_per_s:
            line += f" in the search, median {format_rate(race.median_tokens_per_s)} tok/s re-measured"
        rows.append(("best measured", line))
        if race is not None and leads:
            rows.append(("re-measured", race.describe(best.params)))
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
    return rows


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


def _table(data: ReportData, winner: int | None) -> dict[str, Any]:
    """The trial table: its head as (label, title) cells, and a row per trial, best first."""
    knob_names = list(dict.fromkeys(k for t in data.trials for k in t.params))
    # MFU is known only on devices with a known peak (never guessed): the column appears with it.
    with_mfu = any(t.measurement.mfu is not None for t in data.trials)
    head = ["#", *(short_name(k) for k in knob_names), "tok/s", "±", *(["MFU"] if with_mfu else [])]
    head += ["peak memory", "estimate", "state"]
    titles = ["trial number", *knob_names, "", "95% confidence half-width"]
    titles += [*(["model FLOPs utilisation"] if with_mfu else []), "", "", ""]
    rows = []
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
        rows.append({"css": css, "number": t.number, "cells": cells})
    return {"head": list(zip(head, titles, strict=True)), "rows": rows}


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
