"""`autotune export`: a study's best trial as a config to paste into a real run."""

from __future__ import annotations

from typing import Annotated

import typer

from autotune.cli._options import StorageOpt, StoredStudyOpt, StudyArg, run_option, study_named


def export_command(
    study_argument: StudyArg = None,
    study: StoredStudyOpt = None,
    storage: StorageOpt = None,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="json, yaml, flags, training-args (the TrainingArguments kwargs as one flat JSON "
            "object, as HfArgumentParser.parse_json_file takes it), accelerate, python, deepspeed "
            "(the ds_config of a ZeRO trial), or trl-sft (a YAML file for `trl sft --config FILE`).",
        ),
    ] = "json",
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="Write to this file instead of stdout.", show_default=False),
    ] = None,
    memory_cap: Annotated[
        str | None,
        run_option(
            "memory_cap",
            "Export the answer under this cap (20GiB, 90%): decided again from the stored "
            "measurements by the same rules, nothing runs.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Export a study's answer (or its answer under --memory-cap) as a ready-to-use config: the
    defaults when nothing beat them measurably, with the best measured named beside them."""
    study = study_named("export", study, study_argument)
    from autotune.answer.decide import study_answer
    from autotune.errors import UsageError
    from autotune.export.config import export_config, resolve_cap
    from autotune.export.formats import notes
    from autotune.export.render import FORMATS, render
    from autotune.options import RunConfig
    from autotune.store.session import StudyStore
    from autotune.view import console

    if format not in FORMATS:
        raise typer.BadParameter(f"{format!r} is not one of {', '.join(FORMATS)}", param_hint="'--format'")
    loaded = StudyStore.open(RunConfig(storage=storage).storage_url, study)
    cap_bytes = resolve_cap(loaded, memory_cap) if memory_cap is not None else None
    answer = study_answer(loaded, cap_bytes)
    config = export_config(loaded, answer, cap_text=memory_cap)
    text = render(config, format)
    if output is None:
        typer.echo(text, nl=False)
    else:
        try:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror or exc}", "check the path") from None
        which = "the defaults" if answer.keeps_defaults else f"trial {config['expected']['trial']}"
        console.print(f"wrote {which} of {study} as {format} to {output}", highlight=False)
    # What the format cannot hold (the flags file is flags alone) goes beside it, on stderr.
    for line in notes(config, format):
        typer.echo(line, err=True)
