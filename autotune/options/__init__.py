"""The run options: each declared once, as a field of `RunConfig` (`run`) or of `MeasureSettings`
(`settings`, its ``measure``) made by `declare.option`; the checks across them (`checks`); sizes as
users write them (`sizes`: the memory cap, one `cap_bytes`); and what is derived from the
declarations (`listing`: the keywords of `search()` and `tune()`, the flags an error names, the
reference page). An option's other keywords, the deprecated old names included, are `ALIASES`."""

from __future__ import annotations

from autotune.options.declare import ALIASES, GROUPS, Alias, option
from autotune.options.listing import (
    BY_NAME,
    KEYWORDS,
    OPTIONS,
    REFERENCE,
    REGENERATE,
    Option,
    command_line_text,
    deprecated_flags,
    flag_deprecation,
    flagged,
    help_text,
    reference,
    run_config,
    table_cell,
    with_option_keywords,
)
from autotune.options.run import DEFAULT_STORAGE, SCHEMA_KEY, STORAGE_ENV, VERSION_KEY, RunConfig
from autotune.options.settings import MeasureSettings
from autotune.options.sizes import MemoryCap, cap_bytes, parse_memory_cap

__all__ = [
    "ALIASES",
    "BY_NAME",
    "DEFAULT_STORAGE",
    "GROUPS",
    "KEYWORDS",
    "OPTIONS",
    "REFERENCE",
    "REGENERATE",
    "SCHEMA_KEY",
    "STORAGE_ENV",
    "VERSION_KEY",
    "Alias",
    "MeasureSettings",
    "MemoryCap",
    "Option",
    "RunConfig",
    "cap_bytes",
    "command_line_text",
    "deprecated_flags",
    "flag_deprecation",
    "flagged",
    "help_text",
    "option",
    "parse_memory_cap",
    "reference",
    "run_config",
    "table_cell",
    "with_option_keywords",
]
