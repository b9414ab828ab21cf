"""The CLI's own output: a library error as one line on stderr. Everything else it shows renders
through `autotune.view` (the live search view, trial lines, tables, the answer)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

err_console = Console(stderr=True, soft_wrap=True)


def print_error(text: str) -> None:
    """One line on stderr, verbatim: no wrapping, no markup (paths may hold brackets)."""
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)


def emit(data: Any, output_format: str) -> None:
    """`data` (plain values) on stdout as JSON or YAML, for scripts: nothing else is printed."""
    import json
    import sys

    if output_format == "json":
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False))
