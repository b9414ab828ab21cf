"""How a run option is declared once: a dataclass field made by `option`, with its default, help,
group and flag in its metadata (`GROUPS`: the groups, in the order they are shown); its other
keywords, deprecated or not, in `ALIASES` (`resolve_aliases` reads them)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import UsageError

# The groups of run options, in the order they are shown: the panels of `autotune search --help`
# and the sections of docs/reference/options.md.
GROUPS = {
    "workload": "The workload: what is trained",
    "execution": "Where trials run",
    "measurement": "How a trial is measured",
    "choice": "How the answer is chosen",
    "store": "The store",
    "tracking": "Where the search is logged",
}


def option(
    default: Any = None,
    *,
    help: str,
    group: str,
    flag: str | None = "",
    short: str | None = None,
    negative: str | None = None,
    envvar: str | None = None,
    default_text: str | None = None,
) -> Any:
    """Declare a run option once, as a field of `RunConfig` or `MeasureSettings`: its default, its
    help and group, and its command-line flag in the field's metadata (as transformers'
    `HfArgumentParser` reads them). `autotune.options` derives the ``autotune search`` flags, the
    keywords of `search()` and `tune()` and docs/reference/options.md from these fields.

    Args:
        default: the value when the option is not given (immutable: a tuple, not a list).
        help: what the option does, for ``--help`` and the reference; ``{name}`` mentions another
            option (shown as its flag on the command line).
        group: a key of `GROUPS`.
        flag: its long flag; ``""``: ``--`` and the field's name with dashes; None: the command
            line does not offer it (Python callers only).
        short: a one-letter alias (``-n``).
        negative: a boolean's off switch (``--no-baseline``), where its default is on.
        envvar: an environment variable the command line reads where the flag is not given.
        default_text: how a default that is computed later reads (``the preset's``).
    """
    if group not in GROUPS:
        raise ValueError(f"unknown option group {group!r}")
    metadata = {
        "help": help,
        "group": group,
        "flag": flag,
        "short": short,
        "negative": negative,
        "envvar": envvar,
        "default_text": default_text,
    }
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Alias:
    """Another keyword for a run option.

    Attributes:
        option: the name of the option it names (a field of `RunConfig` or `MeasureSettings`).
        deprecated: an old name, kept for one release: it works and warns, naming `option`. On the
            command line, where the option has a flag, ``--`` and the old name with dashes is the
            old flag, and works and warns the same way.
    """

    option: str
    deprecated: bool = False


ALIASES: dict[str, Alias] = {
    # The keywords optuna and `Trainer.hyperparameter_search` name two options by.
    "n_trials": Alias("trials"),
    "study_name": Alias("study"),
    # The measurement options' old names, which read as `TrainingArguments.max_steps` and
    # `warmup_steps` (the training run's length and its learning-rate warm-up) to a Hugging Face user.
    "warmup_steps": Alias("settle_steps", deprecated=True),
    "max_warmup_steps": Alias("max_settle_steps", deprecated=True),
    "eager_warmup_steps": Alias("eager_settle_steps", deprecated=True),
    "min_steps": Alias("min_measure_steps", deprecated=True),
    "max_steps": Alias("measure_steps", deprecated=True),
}
"""Every other keyword of a run option, by that keyword."""


def deprecation(alias: str, spell: Callable[[str], str] = str) -> str:
    """The warning the deprecated `alias` gives: the name to use instead, and why (`spell`: how a
    name is written, ``--max-steps`` on the command line)."""
    name = ALIASES[alias].option
    return (
        f"{spell(alias)} is deprecated and goes in the next release: use {spell(name)} "
        f"({spell(alias)} reads as the Trainer's own TrainingArguments.{alias})"
        if alias in ("max_steps", "warmup_steps")
        else f"{spell(alias)} is deprecated and goes in the next release: use {spell(name)}"
    )


def resolve_aliases(
    values: dict[str, Any], names: Collection[str] | None = None, *, warn: int | None = 1
) -> list[str]:
    """Rename in `values`, in place, each alias (`ALIASES`) to the name of the option it names;
    the deprecated aliases that were given, in the order given.

    Args:
        names: only aliases of these options (`MeasureSettings`' own fields, for its constructor).
        warn: the `warnings.warn` stack level of a `FutureWarning` for each deprecated alias,
            counted from the caller of this function (1: the caller's line); None: no warning (a
            stored configuration, or the command line, which says it in its own words).

    Raises:
        UsageError: an option given under two of its names (naming both).
    """
    used: list[str] = []
    for alias in [key for key in values if key in ALIASES]:
        name = ALIASES[alias].option
        if names is not None and name not in names:
            continue
        if name in values:
            raise UsageError(
                f"{alias} and {name} name the same option", "give one of them", field=(name, alias)
            )
        values[name] = values.pop(alias)
        if ALIASES[alias].deprecated:
            used.append(alias)
            if warn is not None:
                warnings.warn(deprecation(alias), FutureWarning, stacklevel=warn + 1)
    return used
