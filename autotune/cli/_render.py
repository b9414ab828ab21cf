"""The CLI's own output: a library error as one line on stderr. Everything else it shows renders
through `autotune.view` (the live search view, trial lines, tables, the answer)."""

from __future__ import annotations

from rich.console import Console

err_console = Console(stderr=True, soft_wrap=True)


def print_error(text: str) -> None:
    """One line on stderr, verbatim: no wrapping, no markup (paths may hold brackets)."""
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)
