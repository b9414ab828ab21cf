"""Options shared by several commands, declared once."""

from __future__ import annotations

from typing import Annotated

import typer

StorageOpt = Annotated[
    str | None,
    typer.Option(
        "--storage",
        envvar="AUTOTUNE_STORAGE",
        help="Study store URL (optuna RDB). Default: sqlite:///autotune.db.",
        show_default=False,
    ),
]
StudyOpt = Annotated[
    str | None,
    typer.Option("--study", help="Study name. Default: derived from model, space and sequence length."),
]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")]
