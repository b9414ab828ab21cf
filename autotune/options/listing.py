"""The run options, read from their one declaration.

Each option is a field of `RunConfig`, or of `MeasureSettings` (its ``measure``), declared once with
`autotune.options.declare.option`: name, type, default, help, group and flag. Everything else is derived
here: the keywords `search()` and `tune()` take (`KEYWORDS`, `run_config`), the flags an error
names on the command line (`command_line_text`) and the reference, docs/reference/options.md
(`reference`; regenerate it, with the manual's other generated pages, by
``python -m autotune.cli.reference``). The typer flags of
``autotune search`` are built from `OPTIONS` in `autotune.cli._options`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from autotune.errors import AutotuneError, UsageError
from autotune.options.declare import ALIASES, GROUPS, deprecation, resolve_aliases
from autotune.options.run import RunConfig
from autotune.options.settings import MeasureSettings

REFERENCE = Path("docs") / "reference" / "options.md"
# The one command that writes every generated page of the manual (autotune/cli/reference.py).
REGENERATE = "python -m autotune.cli.reference"


@dataclass(frozen=True)
class Option:
    """One run option as declared.

    Attributes:
        name: the field's name: the keyword of `search()` and `tune()`, the name errors use.
        type: the field's type (resolved).
        default: its default.
        help: what it does.
        group: a key of `GROUPS`.
        flag: its ``autotune search`` flag; None where the command line does not offer it.
        short: a one-letter alias, or None.
        negative: a boolean's off switch (``--no-baseline``), or None.
        envvar: the environment variable the command line reads where the flag is not given.
        default_text: how a computed default reads (``the preset's``), or None.
        measure: whether it is a field of `MeasureSettings` (``config.measure.NAME``).
    """

    name: str
    type: Any
    default: Any
    help: str
    group: str
    flag: str | None
    short: str | None
    negative: str | None
    envvar: str | None
    default_text: str | None
    measure: bool

    @property
    def flags(self) -> tuple[str, ...]:
        """Every spelling of it on the command line (none where it is not offered)."""
        if self.flag is None:
            return ()
        return tuple(f for f in (self.flag, self.short, self.negative) if f)

    @property
    def choices(self) -> tuple[str, ...]:
        """The values of a ``Literal`` type; () for any other."""
        return typing.get_args(self.type) if typing.get_origin(self.type) is Literal else ()


def _declared(cls: type, *, measure: bool) -> list[Option]:
    hints = typing.get_type_hints(cls)
    found: list[Option] = []
    for f in dataclasses.fields(cls):
        if f.name == "measure":  # not an option itself: its fields are
            found += _declared(MeasureSettings, measure=True)
            continue
        meta = f.metadata
        flag = meta["flag"]
        found.append(
            Option(
                name=f.name,
                type=hints[f.name],
                default=f.default,
                help=meta["help"],
                group=meta["group"],
                flag=f"--{f.name.replace('_', '-')}" if flag == "" else flag,
                short=meta["short"],
                negative=meta["negative"],
                envvar=meta["envvar"],
                default_text=meta["default_text"],
                measure=measure,
            )
        )
    return found


OPTIONS: tuple[Option, ...] = tuple(_declared(RunConfig, measure=False))
"""Every run option, in declaration order (``measure``'s fields in its place)."""

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}

KEYWORDS: tuple[str, ...] = tuple(
    name
    for f in dataclasses.fields(RunConfig)
    for name in (f.name, *(o.name for o in OPTIONS if o.measure and f.name == "measure"))
)
"""The keywords `search()` takes: every option, and ``measure`` (a whole `MeasureSettings`)."""


def alias_flag(alias: str) -> str | None:
    """The command-line flag of the alias `alias`: a deprecated one's old flag (``--max-steps``),
    where its option has a flag; None for any other (``n_trials`` is Python's only)."""
    entry = ALIASES.get(alias)
    if entry is None or not entry.deprecated or BY_NAME[entry.option].flag is None:
        return None
    return f"--{alias.replace('_', '-')}"


def deprecated_flags() -> dict[str, str]:
    """The deprecated flags the command line still takes: each alias's name by its flag."""
    return {flag: alias for alias in ALIASES if (flag := alias_flag(alias)) is not None}


def flag_deprecation(alias: str) -> str:
    """The command line's warning for the deprecated flag of `alias`, naming the flag to use."""
    return deprecation(alias, lambda name: flagged(name, (name,)))


def run_config(base: RunConfig | None = None, /, **values: Any) -> RunConfig:
    """`base` (default: `RunConfig()`) with the options in `values` replaced. A `MeasureSettings`
    field may be given by itself (``measure_steps=10``); one of the fields no flag sets follows the
    given ones where it is not given itself (``max_settle_steps`` at least ``settle_steps``,
    ``min_measure_steps`` at most ``measure_steps``), as on the command line.

    An option's other names (`ALIASES`) work too: ``n_trials`` and ``study_name`` name ``trials``
    and ``study``, as optuna does; a deprecated one (``max_steps``) with a `FutureWarning` at the
    line that called `search()` or `tune()`.

    Raises:
        UsageError: an unknown keyword, an option given under two of its names, or a value
            `RunConfig` refuses (naming the field).
    """
    resolve_aliases(values, warn=3)  # this function's caller is search() or tune(): their caller
    unknown = [name for name in values if name not in KEYWORDS]
    if unknown:
        raise UsageError(
            f"unknown option {unknown[0]!r}",
            f"the options are RunConfig's and MeasureSettings' fields, listed in {REFERENCE.as_posix()}",
        )
    base = base or RunConfig()
    measure = values.pop("measure", base.measure)
    given = {name: values.pop(name) for name in list(values) if BY_NAME[name].measure}
    if given:
        measure = _measure_with(measure, given)
    for name, value in values.items():
        if isinstance(value, list) and typing.get_origin(BY_NAME[name].type) is tuple:
            values[name] = tuple(value)
    return dataclasses.replace(base, measure=measure, **values)


def with_option_keywords(
    signature: inspect.Signature, names: tuple[str, ...] = KEYWORDS
) -> inspect.Signature:
    """`signature` with its ``**keywords`` spelled out as the run options `names` (keyword-only, with
    their declared types and defaults), as `inspect.signature`, ``help()`` and editors show a
    function that takes options through `run_config`."""
    kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    taken = {p.name for p in kept}
    spelled = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=MeasureSettings() if name == "measure" else BY_NAME[name].default,
            annotation=MeasureSettings if name == "measure" else BY_NAME[name].type,
        )
        for name in names
        if name not in taken
    ]
    return signature.replace(parameters=[*kept, *spelled])


def _measure_with(measure: MeasureSettings, given: dict[str, Any]) -> MeasureSettings:
    values = {f.name: getattr(measure, f.name) for f in dataclasses.fields(MeasureSettings)} | given
    if "max_settle_steps" not in given:
        values["max_settle_steps"] = max(measure.max_settle_steps, values["settle_steps"])
    if "min_measure_steps" not in given:
        values["min_measure_steps"] = min(measure.min_measure_steps, values["measure_steps"])
    return MeasureSettings(**values)


# A value as an error spells it after ``name=``: a tuple, quoted text, or a run of characters.
_QUOTES = "'\""
_VALUE = r"""\([^)]*\)|'[^']*'|"[^"]*"|[^\s,;:()]+"""


def flagged(text: str, fields: tuple[str, ...]) -> str:
    """`text` as the command line says it: each of the run options `fields` spelled by its flag
    (``train_steps`` -> ``--train-steps``, ``isolation='none'`` -> ``--isolation none``,
    ``measure_baseline=False`` -> ``--no-baseline``). Options the command line does not offer keep
    their names."""
    for name in fields:
        option = BY_NAME.get(name)
        old_flag = alias_flag(name)
        if old_flag is not None:  # a deprecated name: its old flag
            option = dataclasses.replace(BY_NAME[ALIASES[name].option], flag=old_flag, negative=None)
        if option is None or option.flag is None:
            continue
        # Not a part of a longer name, a path or a flag.
        pattern = re.compile(rf"(?<![\w./\\-]){re.escape(name)}(?:=({_VALUE}))?(?![\w/\\-])")
        text = pattern.sub(functools.partial(_as_flag, option), text)
    return text


def _as_flag(option: Option, match: re.Match[str]) -> str:
    flag, value = option.flag or option.name, match.group(1)
    if value is None or value == "True":
        return flag
    if value == "False":
        return option.negative or f"without {flag}"
    if value.startswith("("):  # a repeatable flag's values
        return " ".join(f"{flag} {item}" for item in re.findall(r"'([^']*)'", value))
    return f"{flag} {value.strip(_QUOTES)}"


# Another option mentioned in a help text: ``{seq_len}``, ``{backend='ray'}``.
_MENTION = re.compile(r"\{(\w+)(?:=([^}]*))?\}")


def help_text(option: Option, *, command_line: bool) -> str:
    """`option`'s help with the options it mentions spelled as flags (`command_line`, where they
    have one) or as names in code quotes (the reference)."""

    def mention(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        spelled = f"{name}={value}" if value is not None else name
        if command_line:
            return flagged(spelled, (name,))
        return f"`{spelled}`"

    return _MENTION.sub(mention, option.help)


def command_line_text(exc: AutotuneError) -> str:
    """An error's line on the command line: the run options it names spelled by their flags."""
    if not exc.fields:
        return str(exc)
    message = flagged(exc.message, exc.fields)
    return f"{message} ({flagged(exc.hint, exc.fields)})" if exc.hint else message


# --- the reference ---------------------------------------------------------------------------------


def _type_name(option: Option) -> str:
    if option.choices:
        return " \\| ".join(f'`"{c}"`' for c in option.choices)
    text = str(option.type) if not isinstance(option.type, type) else option.type.__name__
    return f"`{text.replace('typing.', '').replace('|', chr(92) + '|')}`"


def table_cell(text: str) -> str:
    """`text` as one cell of a markdown table: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def reference() -> str:
    """docs/reference/options.md: every run option, by group, as declared."""
    lines = [
        "# Run options",
        "",
        f"<!-- Generated from autotune/options/ by `{REGENERATE}`: edit the declarations there. -->",
        "",
        "Every option of a search is declared once, as a field of `RunConfig` in `autotune/options/run.py`",
        "(those of how a trial is measured: of `MeasureSettings`, its `measure`). The option's name is",
        "a keyword of `autotune.search(...)`, and of `autotune.tune(trainer, ...)` but for what `tune`",
        "takes from the Trainer or its own parameters (`autotune.driver.tune.OPTIONS`); a",
        "`MeasureSettings` field by its name too (`measure_steps=10`), or all of them as",
        "`measure=MeasureSettings(...)`. `autotune search` takes the flag. Errors name the option;",
        "the command line prints its flag instead. An option without a flag is for Python callers.",
    ]
    for group, title in GROUPS.items():
        lines += [
            "",
            f"## {title}",
            "",
            "| option | flag | type | default | meaning |",
            "|---|---|---|---|---|",
        ]
        for option in OPTIONS:
            if option.group != group:
                continue
            name = f"`{option.name}`"
            flags = ", ".join(f"`{f}`" for f in option.flags) or "-"
            if option.envvar:
                flags += f" (or `{option.envvar}`)"
            default = table_cell(option.default_text or f"`{option.default!r}`".replace("'", ""))
            meaning = table_cell(help_text(option, command_line=False))
            lines.append(f"| {name} | {flags} | {_type_name(option)} | {default} | {meaning} |")
    lines += [
        "",
        "## Other names",
        "",
        "Another keyword names the same option; a deprecated one (and its flag) still works for one",
        "release, with a warning naming the option's name. An option given under two names is refused.",
        "",
        "| keyword | flag | names | deprecated |",
        "|---|---|---|---|",
    ]
    for alias, entry in ALIASES.items():
        flag = alias_flag(alias)
        flag_text = f"`{flag}`" if flag else "-"
        deprecated = "yes" if entry.deprecated else "no"
        lines.append(f"| `{alias}` | {flag_text} | `{entry.option}` | {deprecated} |")
    return "\n".join(lines) + "\n"
