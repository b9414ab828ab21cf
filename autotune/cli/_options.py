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
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-w",
        help="Worker processes at once. Default: one per visible GPU, or one on CPU.",
        show_default=False,
    ),
]
IsolationOpt = Annotated[
    str,
    typer.Option(
        "--isolation", help="process: each trial in a fresh worker process; none: all in this process."
    ),
]
