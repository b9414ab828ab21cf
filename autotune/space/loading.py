"""Loading a search space: a shipped name or a YAML file read, validated and parsed into a
`SearchSpace` (`load_space`, `parse_space`). Every error names the file, the key and what is
allowed."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import SpaceError
from autotune.space.knobs import CATALOGUE, Value
from autotune.space.mapping import precision_of as precision_of
from autotune.space.mapping import trial_kwargs
from autotune.space.searchspace import BATCH, LADDER, SearchSpace, SizeRule, possible_values, sampling_order

_TOP_LEVEL_KEYS = ("description", "knobs")


def builtin_spaces() -> dict[str, Path]:
    """Names and paths of the spaces shipped with autotune."""
    folder = resources.files("autotune.search_spaces")
    return {
        Path(entry.name).stem: Path(str(entry))
        for entry in folder.iterdir()
        if entry.name.endswith((".yaml", ".yml"))
    }


def load_space(name_or_path: str | Path) -> SearchSpace:
    """Load and validate a space: a shipped name (``quick``) or a path to a YAML file.

    Raises:
        SpaceError: the file is missing, is not YAML, or holds an invalid knob or value.
    """
    shipped = builtin_spaces()
    text_name = str(name_or_path)
    if text_name in shipped:
        path = shipped[text_name]
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise SpaceError(
                f"search space {text_name!r} is neither a shipped space nor a file",
                f"use one of: {', '.join(sorted(shipped))}, or a path to a YAML file",
            )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise SpaceError(f"{path}: not a UTF-8 text file", "a space is a YAML text file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpaceError(f"{path}: not valid YAML{where}", "fix the syntax of the file") from None
    return parse_space(data, name=path.stem, source=str(path))


def parse_space(data: object, *, name: str, source: str) -> SearchSpace:
    """Validate a parsed space document (see the module docstring for the format)."""
    if not isinstance(data, dict):
        raise SpaceError(f"{source}: expected a mapping with a 'knobs' key", "see search_spaces/quick.yaml")
    unknown_top = sorted(set(data) - set(_TOP_LEVEL_KEYS))
    if unknown_top:
        raise SpaceError(
            f"{source}: unknown top-level key {unknown_top[0]!r}",
            f"allowed keys: {', '.join(_TOP_LEVEL_KEYS)}",
        )
    knobs = data.get("knobs")
    if not isinstance(knobs, dict) or not knobs:
        raise SpaceError(f"{source}: 'knobs' must be a non-empty mapping of knob name to a list of values")
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise SpaceError(f"{source}: 'description' must be a string")

    parsed: dict[str, tuple[Value, ...]] = {}
    rules: dict[str, SizeRule] = {}
    ladder = False
    for key, values in knobs.items():
        if key == BATCH and isinstance(values, list) and values and values[-1] == LADDER:
            if len(values) < 2:
                raise SpaceError(
                    f"{source}: knobs.{key}: '{LADDER}' needs a batch size before it",
                    f"write e.g. [8, 16, {LADDER}]",
                )
            ladder, values = True, values[:-1]
        if isinstance(values, dict) and str(key) in _RULE_KNOBS:
            rules[str(key)] = _parse_rule(source, str(key), values)
            parsed[str(key)] = ()
        else:
            parsed[str(key)] = _parse_knob(source, str(key), values)
    _check_requirements(source, parsed)
    return SearchSpace(
        name=name,
        source=source,
        knobs=sampling_order(parsed),
        description=description,
        rules=rules,
        ladder=ladder,
    )


# Knobs that may be written as a rule ``{min: 8, max: 256, multiple_of: auto}`` instead of a list.
_RULE_KNOBS = ("per_device_train_batch_size",)
_RULE_KEYS = ("min", "max", "multiple_of")


def _parse_rule(source: str, key: str, rule: dict[Any, Any]) -> SizeRule:
    hint = "write e.g. {min: 8, max: 256, multiple_of: auto} (or an integer multiple)"
    unknown = sorted(str(k) for k in set(rule) - set(_RULE_KEYS))
    if unknown:
        raise SpaceError(f"{source}: knobs.{key}: unknown rule key {unknown[0]!r}", hint)
    low, high, multiple = rule.get("min", 1), rule.get("max", 0), rule.get("multiple_of", "auto")
    for label, number in (("min", low), ("max", high)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise SpaceError(
                f"{source}: knobs.{key}.{label} must be a positive integer, got {number!r}", hint
            )
    if high < low:
        raise SpaceError(f"{source}: knobs.{key}: max {high} is below min {low}", hint)
    if multiple != "auto" and (isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1):
        raise SpaceError(f"{source}: knobs.{key}.multiple_of must be auto or a positive integer", hint)
    return SizeRule(low, high, None if multiple == "auto" else multiple)


def _check_requirements(source: str, knobs: Mapping[str, tuple[Value, ...]]) -> None:
    for key in knobs:
        requires = CATALOGUE[key].requires
        if requires is None:
            continue
        other, needed = requires
        if not set(possible_values(other, knobs)) & set(needed):
            raise SpaceError(
                f"{source}: knobs.{key} only applies when {other} is one of {', '.join(map(str, needed))}",
                f"add {needed[0]} to knobs.{other}, or drop knobs.{key}",
            )


def _parse_knob(source: str, key: str, values: object) -> tuple[Value, ...]:
    knob = CATALOGUE.get(key)
    if knob is None:
        raise SpaceError(f"{source}: unknown knob {key!r}", f"known knobs: {', '.join(CATALOGUE)}")
    if not isinstance(values, list):
        raise SpaceError(f"{source}: knobs.{key} must be a list of values, got {values!r}", _allowed(key))
    if not values:
        raise SpaceError(f"{source}: knobs.{key} is an empty list", _allowed(key))
    for value in values:
        problem = knob.check(value)
        if problem is not None:
            hint = _allowed(key)
            if isinstance(value, bool) and knob.kind == "choice":
                hint += ' (YAML reads a bare off/on/no/yes as a boolean: write "off" in quotes)'
            raise SpaceError(f"{source}: knobs.{key}: {problem}", hint)
    if len(set(values)) != len(values):
        raise SpaceError(f"{source}: knobs.{key} lists a value twice: {values!r}", "list each value once")
    # The mapping must accept every value; this catches catalogue bugs at load time, not mid-search.
    trial_kwargs({key: values[0]})
    return tuple(values)


def _allowed(key: str) -> str:
    knob = CATALOGUE[key]
    if knob.kind == "int":
        rule = " or a rule {min: 8, max: 256, multiple_of: auto}" if key in _RULE_KNOBS else ""
        return f"allowed: positive integers, e.g. [8, 16, 32]{rule}"
    if knob.kind == "count":
        return "allowed: integers >= 0, e.g. [0, 2, 4]"
    if knob.kind == "bool":
        return "allowed: [false, true]"
    return f"allowed: {', '.join(knob.choices)}"
