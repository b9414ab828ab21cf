"""`autotune export`: a study's best trial as a config to paste into a real run."""

from __future__ import annotations

from typing import Annotated

import typer

from autotune.cli._options import StorageOpt


def export_command(
    study: Annotated[str, typer.Argument(help="Study name (see `optuna studies --storage URL`).")],
    storage: StorageOpt = None,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="json, yaml, flags, accelerate, python, or deepspeed (the ds_config of a ZeRO trial).",
        ),
    ] = "json",
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="Write to this file instead of stdout.", show_default=False),
    ] = None,
    memory_cap: Annotated[
        str | None,
        typer.Option(
            "--memory-cap",
            help="Export the best trial whose measured peak fits this cap (20GiB, 90%): "
            "re-selected from the stored trials, nothing runs.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Export the best trial of a study (or the best under --memory-cap) as a ready-to-use config."""
    from autotune.cli._render import console
    from autotune.config import RunConfig
    from autotune.errors import UsageError
    from autotune.study.export import FORMATS, export_config, notes, render, resolve_cap, select_trial
    from autotune.study.store import load_existing_study

    if format not in FORMATS:
        raise typer.BadParameter(f"{format!r} is not one of {', '.join(FORMATS)}", param_hint="'--format'")
    loaded = load_existing_study(RunConfig(storage=storage).storage_url, study)
    cap_bytes = resolve_cap(loaded, memory_cap) if memory_cap is not None else None
    trial = select_trial(loaded, cap_bytes, cap_text=memory_cap)
    config = export_config(loaded, trial)
    text = render(config, format)
    if output is None:
        typer.echo(text, nl=False)
    else:
        try:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror or exc}", "check the path") from None
        console.print(f"wrote trial {trial.number} of {study} as {format} to {output}", highlight=False)
    # What the format cannot hold (the flags file is flags alone) goes beside it, on stderr.
    for line in notes(config, format):
        typer.echo(line, err=True)
