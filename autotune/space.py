"""Search spaces: YAML files of knobs and their candidate values, validated on load.

A space file looks like::

    description: what this space is for
    knobs:
      per_device_train_batch_size: [8, 16, 32]
      precision: [fp32, bf16]
      torch_compile: ["off", inductor]

Every error names the file, the key and what is allowed. One `SearchSpace` serves every backend:
`suggest` samples a trial's values through optuna (a `FixedTrial` on non-zero ranks replays them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import SpaceError
from autotune.knobs import CATALOGUE, Value, trial_kwargs

_TOP_LEVEL_KEYS = ("description", "knobs")


@dataclass(frozen=True)
class SearchSpace:
    """A validated search space.

    Attributes:
        name: the space's name (file stem).
        source: where it was loaded from, for messages.
        knobs: knob name -> candidate values, in the order given in the file.
        description: free text from the file.
    """

    name: str
    source: str
    knobs: Mapping[str, tuple[Value, ...]]
    description: str = ""

    def suggest(self, trial: Any) -> dict[str, Value]:
        """Sample one value per knob from an optuna `Trial` (or replay them from a `FixedTrial`)."""
        return {name: trial.suggest_categorical(name, list(values)) for name, values in self.knobs.items()}

    def hp_space(self, trial: Any) -> dict[str, Any]:
        """The `hp_space` callable for `Trainer.hyperparameter_search`.

        It samples every knob (rank 0 broadcasts `trial.params` to the other ranks, so all of them
        must be suggested here) but hands nothing to the Trainer's own `setattr` path: the trial's
        `TrainingArguments` are rebuilt whole by `AutotuneTrainer.call_model_init`, where
        `__post_init__` can derive autocast, compile and tf32 from them.
        """
        self.suggest(trial)
        return {}

    def grid_size(self) -> int:
        size = 1
        for values in self.knobs.values():
            size *= len(values)
        return size

    def fingerprint(self) -> str:
        """A short hash of the knobs and candidates: equal spaces give equal fingerprints."""
        canonical = json.dumps({k: list(v) for k, v in self.knobs.items()}, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"description": self.description, "knobs": {k: list(v) for k, v in self.knobs.items()}}


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
    for key, values in knobs.items():
        parsed[str(key)] = _parse_knob(source, str(key), values)
    return SearchSpace(name=name, source=source, knobs=parsed, description=description)


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
        return "allowed: positive integers, e.g. [8, 16, 32]"
    if knob.kind == "bool":
        return "allowed: [false, true]"
    return f"allowed: {', '.join(knob.choices)}"
