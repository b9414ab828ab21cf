"""`autotune knobs`: the knob catalogue, and which values can run on this machine."""

from __future__ import annotations

from typing import Annotated

from rich.markup import escape
from rich.table import Table

from autotune.cli._options import run_option
from autotune.space.knobs import Knob


def knobs_command(
    model: Annotated[
        str | None,
        run_option(
            "model", "Also check what this model supports (attention, checkpointing).", show_default=False
        ),
    ] = None,
) -> None:
    """List every knob, where it lands, whether it changes the training math, and what runs here."""
    from autotune.space.availability import (
        RUNS_ON,
        ModelSupport,
        detect_hardware,
        model_support,
        value_unavailable,
    )
    from autotune.space.knobs import CATALOGUE
    from autotune.view import console

    hardware = detect_hardware()
    support = ModelSupport()
    if model is not None:
        from autotune.workloads.workload import resolve_workload

        support = model_support(resolve_workload(model).model_class())
    _, why = hardware.batch_multiple()
    device = hardware.name if hardware.cuda else "CPU"
    console.print(f"device: {device}; batch sizes with multiple_of auto: {why}", highlight=False)
    if model is None:
        console.print("model support not checked (pass --model to check attention and checkpointing)")

    table = Table(title="Knobs", title_justify="left", show_lines=True)
    for column in ("knob", "lands in", "changes math", "values: available here / not, and why"):
        table.add_column(column)
    for knob in CATALOGUE.values():
        table.add_row(
            f"{knob.name}\n[dim]{escape(knob.help)}[/]",
            _TARGETS[knob.target],
            "yes" if knob.changes_semantics else "no",
            "\n".join(
                _value_line(shown, value_unavailable(knob.name, probe, hardware, support))
                + _runs_on(RUNS_ON.get((knob.name, probe)))
                for shown, probe in _values(knob)
            ),
        )
    console.print(table)


_TARGETS = {"args": "TrainingArguments", "model": "model kwarg", "data": "data collator"}


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
