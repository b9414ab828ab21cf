"""`autotune report`: one self-contained HTML page (and optional PNGs) about a finished study.

The page opens from disk with no server and no network: plotly.js is embedded inline once, in the
first figure, and every other figure reuses it. Each figure is drawn once, by plotly: the PNGs are
screenshots of the same figures, taken by a headless Chrome or Chromium. Everything is read from
the optuna study: the trials' user attrs and the study's user attrs as the search stored them.

Modules: `data` (what the report shows, read from the study), `figures` (the plotly figures),
`page` (the HTML page, and writing it out), `render` (its jinja2 templates, under ``templates/``)
and `pngs` (the figures' PNGs).
"""

from __future__ import annotations

from autotune.report.data import FIGURES, ReportData, collect, memory_cap_bytes, pareto_front
from autotune.report.page import build_report, write_report

__all__ = [
    "FIGURES",
    "ReportData",
    "build_report",
    "collect",
    "memory_cap_bytes",
    "pareto_front",
    "write_report",
]
