"""Options shared by several commands, declared once.

A run option's flag, short alias, environment variable, help and group come from its one
declaration (a `RunConfig` or `MeasureSettings` field, read by `autotune.options`): `run_option`
turns it into a typer option; the options here that no run declares (``--debug``,
``--store-retry-s``) are the command line's own.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer

from autotune.options import BY_NAME, GROUPS, help_text


def run_option(name: str, help: str | None = None, *, panel: bool = False, **settings: Any) -> Any:
    """The typer option of the run option `name`: its flag (with its short alias, a boolean's off
    switch and its environment variable) and help, as declared.

    Args:
        help: the flag's help where a command gives it a meaning of its own (``export
            --memory-cap`` re-selects from stored trials); default the declared help.
        panel: list it under its group's title in ``--help`` (``autotune search``).
        settings: more `typer.Option` settings.
    """
    from rich.markup import escape  # help is rich markup: its brackets are text

    option = BY_NAME[name]
    if option.flag is None:
        raise ValueError(f"run option {name!r} has no flag")
    declared = f"{option.flag}/{option.negative}" if option.negative else option.flag
    computed = option.default is None or option.default == ()
    settings.setdefault("show_default", (option.default_text or False) if computed else True)
    return typer.Option(
        declared,
        *([option.short] if option.short else []),
        help=escape(help or help_text(option, command_line=True)),
        envvar=option.envvar,
        rich_help_panel=GROUPS[option.group] if panel else None,
        **settings,
    )


ModelOpt = Annotated[str, run_option("model")]
SpaceOpt = Annotated[str, run_option("space")]
SeqLenOpt = Annotated[int | None, run_option("seq_len")]
MemoryCapOpt = Annotated[str | None, run_option("memory_cap")]
BaseArgsOpt = Annotated[str | None, run_option("base_args")]
PeftOpt = Annotated[str | None, run_option("peft")]
StorageOpt = Annotated[str | None, run_option("storage")]
StudyOpt = Annotated[str | None, run_option("study")]
# The study a command reads or continues: named by --study, as `autotune search` names it.
StoredStudyOpt = Annotated[
    str | None,
    run_option("study", "The study's name (required; see `autotune studies`).", show_default=False),
]
# The same as an argument: deprecated, it still works for one release with a warning.
StudyArg = Annotated[str | None, typer.Argument(hidden=True, show_default=False, metavar="STUDY")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")]
OUTPUT_FORMATS = ("table", "json", "yaml")
FormatOpt = Annotated[
    Literal["table", "json", "yaml"],
    typer.Option(
        "--format",
        "-f",
        help="table: for people; json or yaml: the same facts for scripts (numbers unformatted, "
        "memory in bytes).",
    ),
]
WorkersOpt = Annotated[int | None, run_option("workers")]
StoreRetryOpt = Annotated[
    float | None,
    typer.Option(
        "--store-retry-s",
        help="Seconds a store call retries through an outage (connection lost, server restarting) "
        "before the command stops; a full disk is never retried, and Ctrl-C or SIGTERM ends the "
        "command within this or 30 s, whichever is shorter. Default: 300 (AUTOTUNE_STORE_RETRY_S).",
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
    from autotune.store.retry import STORE_RETRY_ENV

    if seconds is None:
        return
    if seconds < 0:
        raise UsageError(f"--store-retry-s {seconds:g} is negative", "pass 0 (no retries) or more seconds")
    os.environ[STORE_RETRY_ENV] = repr(float(seconds))


def study_named(command: str, option: str | None, argument: str | None) -> str:
    """The study `command` names, by ``--study NAME`` (`option`) or, deprecated, as its argument
    (`argument`: a one-line warning on stderr names ``--study``).

    Raises:
        UsageError: no study, or one named both ways.
    """
    from autotune.cli._render import print_error
    from autotune.errors import UsageError

    if option is not None and argument is not None:
        raise UsageError(
            f"the study is named twice, by --study {option} and as the argument {argument}",
            "give --study alone",
        )
    if argument is not None:
        print_error(
            f"warning: the study as an argument (autotune {command} {argument}) is deprecated and goes "
            f"in the next release: use autotune {command} --study {argument}"
        )
        return argument
    if option is None:
        raise UsageError(
            f"autotune {command} needs a study", "name it with --study NAME; autotune studies lists them"
        )
    return option
