"""What every benchmark's section is written with: its stored JSON (read; `benchmarks.assemble.store`
writes it), its template, tables (tabulate),
the one summary of a list of figures, and the few number formats the sections share."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from tabulate import tabulate

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TEMPLATES = HERE / "templates"
_BLOCK = re.compile(r"^<!-- (\w+) -->\n", re.MULTILINE)


def load(name: str) -> dict[str, Any] | None:
    """``results/NAME.json``, or None where that benchmark has not run."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


@cache
def _blocks(name: str) -> dict[str, str]:
    parts = _BLOCK.split((TEMPLATES / f"{name}.md").read_text())
    return {key: text.removesuffix("\n") for key, text in zip(parts[1::2], parts[2::2], strict=True)}


def fill(name: str, block: str, /, **fields: Any) -> str:
    """Block `block` of ``templates/NAME.md`` (blocks start at ``<!-- block -->`` lines), with
    `fields` put into its ``{name}`` places (str.format)."""
    return _blocks(name)[block].format(**fields)


def section(name: str, /, **fields: Any) -> str:
    """The ``section`` block of ``templates/NAME.md`` filled (`fill`), its last line ended."""
    return fill(name, "section", **fields) + "\n"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    """A markdown table; cells are shown as given (no number parsing)."""
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    fmt = "pipe" if align else "github"
    return tabulate(cells, headers=list(headers), tablefmt=fmt, disable_numparse=True, colalign=align)


def summary(values: Iterable[float | None]) -> dict[str, Any]:
    """n, median, min and max of the figures given (None left out; the three are None without any)."""
    known = [float(v) for v in values if v is not None]
    if not known:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(known), "median": statistics.median(known), "min": min(known), "max": max(known)}


def spread(stats: dict[str, Any] | None, fmt: Callable[[float], str]) -> str:
    """``median (min-max)`` of a `summary`, each figure through `fmt`."""
    if not stats or stats.get("median") is None:
        return "-"
    return f"{fmt(stats['median'])} ({fmt(stats['min'])}-{fmt(stats['max'])})"


def k(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:.1f}k"


def mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:.0f} MiB"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.0f} ms"


def interval(s: dict[str, Any] | None) -> str:
    """A stored `Speedup` as ``ratio (low-high)``."""
    return "-" if s is None else f"{s['ratio']:.2f}x ({s['low']:.2f}-{s['high']:.2f}x)"


def separation(s: dict[str, Any]) -> str:
    if s["low"] > 1:
        return "faster"
    return "slower" if s["high"] < 1 else "not separated (the interval spans 1)"


def measured_on(data: dict[str, Any]) -> str:
    """The italic line that names the machine, versions and commit of a result."""
    m = data["machine"]
    device = m.get("gpu") or f"{m['cpu']}, {m['cores']} threads"
    return (
        f"*Measured {m['date']} on {device}; Python {m['python']}, torch {m['torch']}, "
        f"transformers {m['transformers']}, optuna {m['optuna']}; autotune commit {m['commit']}.*\n"
    )


def ratio_table(summary_rows: dict[str, Any], reference: str, extra: tuple[str, ...] = ()) -> str:
    """Each configuration's median tokens/s, its rounds, the `extra` columns and the ratio of its
    median to `reference`'s."""
    base = summary_rows[reference]["median_tokens_per_s"]
    rows = []
    for name, row in summary_rows.items():
        median = row["median_tokens_per_s"]
        if median is None:
            rows.append(
                [name, f"failed: {', '.join(row['reasons']) or 'no measurement'}", "", *[""] * len(extra), ""]
            )
            continue
        rates = ", ".join(f"{r / 1000:.2f}k" for r in row["tokens_per_s"])
        ratio = f"{median / base:.2f}x" if base else "-"
        rows.append([name, f"{median / 1000:.2f}k", rates, *(row[e] for e in extra), ratio])
    return table(["configuration", "tokens/s (median)", "rounds", *extra, f"vs {reference}"], rows)
