"""Options shared by several commands, declared once."""

from __future__ import annotations

from typing import Annotated

import typer

ModelOpt = Annotated[
    str,
    typer.Option("--model", "-m", help="Preset (tiny-gpt2, tiny-llama, ...), local directory or hub id."),
]
SpaceOpt = Annotated[str, typer.Option("--space", "-s", help="Shipped space name or YAML path.")]
SeqLenOpt = Annotated[
    int | None,
    typer.Option("--seq-len", help="Tokens per sample. Default: the preset's.", show_default=False),
]
MemoryCapOpt = Annotated[
    str | None,
    typer.Option("--memory-cap", help="Peak memory cap: 20GiB, 20000MiB, 90% or 0.9 of the device."),
]
BaseArgsOpt = Annotated[
    str | None,
    typer.Option("--base-args", help="JSON/YAML file of TrainingArguments kwargs every trial starts from."),
]
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
StoreRetryOpt = Annotated[
    float | None,
    typer.Option(
        "--store-retry-s",
        help="Seconds a store call retries through an outage (connection lost, server restarting) "
        "before the command stops. Default: 300 (AUTOTUNE_STORE_RETRY_S).",
        show_default=False,
    ),
]


def apply_store_retry(seconds: float | None) -> None:
    """Make `--store-retry-s` this process's and its workers' bound (they inherit the environment).

    Raises:
        UsageError: a negative bound.
    """
    import os

    from autotune.errors import UsageError
    from autotune.study.retry import STORE_RETRY_ENV

    if seconds is None:
        return
    if seconds < 0:
        raise UsageError(f"--store-retry-s {seconds:g} is negative", "pass 0 (no retries) or more seconds")
    os.environ[STORE_RETRY_ENV] = repr(float(seconds))
