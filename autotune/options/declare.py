"""How a run option is declared once: a dataclass field made by `option`, with its default, help,
group and flag in its metadata (`GROUPS`: the groups, in the order they are shown)."""

from __future__ import annotations

from dataclasses import field
from typing import Any

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
