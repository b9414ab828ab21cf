"""`autotune knobs`: the knob catalogue, and which values can run on this machine.

``--format markdown`` prints the catalogue alone, as docs/reference/knobs.md holds it: what each
knob is, where it lands, its values and where a value runs only on some machines; not what this
machine supports (that is the table's).
"""

from __future__ import annotations

from typing import Annotated, Literal

import typer
from rich.markup import escape
from rich.table import Table

from autotune.cli._options import run_option
from autotune.space.knobs import SFT_KNOBS, Knob


def knobs_command(
    model: Annotated[
        str | None,
        run_option(
            "model", "Also check what this model supports (attention, checkpointing).", show_default=False
        ),
    ] = None,
    output_format: Annotated[
        Literal["table", "json", "yaml", "markdown"],
        typer.Option(
            "--format",
            "-f",
            help="table: the catalogue with what runs on this machine; json or yaml: the same facts "
            "for scripts; markdown: the catalogue alone, as the manual's knob reference "
            "(docs/reference/knobs.md), the same on every machine.",
        ),
    ] = "table",
) -> None:
    """List every knob, where it lands, whether it changes the training math, and what runs here."""
    if output_format == "markdown":
        if model is not None:
            from autotune.errors import UsageError

            raise UsageError(
                "--format markdown is the catalogue alone, the same on every machine: it checks no --model",
                "drop --model, or use --format table",
            )
        typer.echo(knobs_markdown(), nl=False)
        return
    from autotune.space.availability import ModelSupport, detect_hardware, model_support
    from autotune.space.knobs import CATALOGUE, RUNS_ON, value_unavailable
    from autotune.view import console

    hardware = detect_hardware()
    support = ModelSupport()
    if model is not None:
        from autotune.workloads.workload import resolve_workload

        support = model_support(resolve_workload(model).model_class())
    _, why = hardware.batch_multiple()
    device = hardware.name if hardware.cuda else "CPU"

    if output_format != "table":
        from autotune.cli._render import emit

        facts = [
            {
                "name": knob.name,
                "lands_in": _target(knob),
                "changes_math": knob.changes_semantics,
                "help": knob.help,
                "values": [
                    {
                        "value": shown,
                        "unavailable_here": value_unavailable(knob.name, probe, hardware, support),
                        "runs_on": RUNS_ON.get((knob.name, probe)),
                    }
                    for shown, probe in _values(knob)
                ],
            }
            for knob in CATALOGUE.values()
        ]
        emit({"device": device, "batch_multiple": why, "model_checked": model, "knobs": facts}, output_format)
        return
    console.print(f"device: {device}; batch sizes with multiple_of auto: {why}", highlight=False)
    if model is None:
        console.print("model support not checked (pass --model to check attention and checkpointing)")
    table = Table(title="Knobs", title_justify="left", show_lines=True)
    for column in ("knob", "lands in", "changes math", "values: available here / not, and why"):
        table.add_column(column)
    for knob in CATALOGUE.values():
        table.add_row(
            f"{knob.name}\n[dim]{escape(knob.help)}[/]",
            _target(knob),
            "yes" if knob.changes_semantics else "no",
            "\n".join(
                _value_line(shown, value_unavailable(knob.name, probe, hardware, support))
                + _runs_on(RUNS_ON.get((knob.name, probe)))
                for shown, probe in _values(knob)
            ),
        )
    console.print(table)


_TARGETS = {"args": "TrainingArguments", "model": "model kwarg", "data": "data collator"}


def _target(knob: Knob) -> str:
    return "SFTConfig (TRL)" if knob.name in SFT_KNOBS else _TARGETS[knob.target]


def _runs_on(where: str | None) -> str:
    """Where a value that does not run everywhere runs, after its line."""
    return f" [dim](runs on: {escape(where)})[/]" if where else ""


def _values(knob: Knob) -> list[tuple[str, object]]:
    """(what to show, a value to check the rules with) for each value or range of values."""
    if knob.kind == "bool":
        return [("false", False), ("true", True)]
    if knob.kind == "int":
        # pad_to_multiple_of: 1 (the longest sample) runs on any data, a larger multiple on padded data
        return [("1", 1), ("N > 1", 2)] if knob.target == "data" else [("positive integers", 1)]
    if knob.kind == "count":
        return [("0", 0), ("N > 0", 1)]
    return [(choice, choice) for choice in knob.choices]


def _value_line(shown: str, reason: str | None) -> str:
    if reason is None:
        return f"[green]yes[/] {escape(shown)}"
    return f"[red]no[/]  {escape(shown)}: {escape(reason)}"


# --- the catalogue as markdown (docs/reference/knobs.md) ------------------------------------------

_LANDS = {"args": "`TrainingArguments`", "model": "model-load kwargs", "data": "the data collator"}


def _landing(knob: Knob) -> str:
    """Where a knob's values land, read from the mapping trials use: the fields its values set."""
    from autotune.space.mapping import trial_kwargs

    if knob.target == "data":
        return _LANDS["data"]
    fields: list[str] = []
    for _, value in _values(knob):
        args, model_kwargs = trial_kwargs({knob.name: value})  # type: ignore[dict-item]
        for field in (*args, *model_kwargs):
            if field not in fields:
                fields.append(field)
    lands = "TRL's `SFTConfig`" if knob.name in SFT_KNOBS else _LANDS[knob.target]
    return f"{lands}: " + ", ".join(f"`{field}`" for field in fields)


def _exists(knob: Knob) -> str:
    """In which trials a knob exists (all, where nothing is said)."""
    said = []
    if knob.ranks_only:
        said.append("trials of more than one rank")
    if knob.name in SFT_KNOBS:
        said.append("trials of a TRL SFTTrainer")
    if knob.requires is not None:
        other, values = knob.requires
        shown = ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values)
        said.append(f"trials with `{other}` {shown}")
    return "; ".join(said) or "every trial"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def knobs_markdown() -> str:
    """The knob catalogue as markdown: one row per knob, then where each value that does not run
    everywhere runs. The same on every machine (availability here is the table format's)."""
    from autotune.space.knobs import CATALOGUE, RUNS_ON

    lines = [
        "# Knob reference",
        "",
        "<!-- Generated from autotune/space/knobs.py by `python -m autotune.cli.reference` "
        "(or `autotune knobs --format markdown`): edit the catalogue there. -->",
        "",
        "Every knob a search space may list, from the catalogue in `autotune/space/knobs.py`.",
        "`autotune knobs` shows which values run on the machine at hand, and why the others do not.",
        "",
        "| knob | what it does | lands in | values | changes the training math | exists in |",
        "|---|---|---|---|---|---|",
    ]
    for knob in CATALOGUE.values():
        # A literal value in code quotes; a description of values ("positive integers") as text.
        values = ", ".join(shown if " " in shown else f"`{shown}`" for shown, _ in _values(knob))
        lines.append(
            f"| `{knob.name}` | {_md(knob.help)} | {_landing(knob)} | {values} "
            f"| {'yes' if knob.changes_semantics else 'no'} | {_exists(knob)} |"
        )
    lines += ["", "## Values that run only on some machines", ""]
    lines += ["| knob | value | runs on |", "|---|---|---|"]
    for (name, value), where in RUNS_ON.items():
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        lines.append(f"| `{name}` | `{shown}` | {_md(where)} |")
    return "\n".join(lines) + "\n"
