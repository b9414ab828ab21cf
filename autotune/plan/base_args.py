"""The base `TrainingArguments` every trial starts from, read from a JSON or YAML file and checked
against the fields the search controls itself (`load_base_args`)."""

from __future__ import annotations

from typing import Any

from autotune.errors import UsageError
from autotune.files import read_mapping

# TrainingArguments fields a search controls itself: a base config may not set them.
RESERVED_ARGS = (
    "output_dir",
    "max_steps",
    "num_train_epochs",
    "report_to",
    "save_strategy",
    "eval_strategy",
    "logging_strategy",
    "do_eval",
    "push_to_hub",
    "load_best_model_at_end",
)

# Deprecated `TrainingArguments` aliases (transformers 5) and the fields they stand for.
ALIASES = {
    "gradient_checkpointing": "activation_checkpointing",
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",
}


def current_names(args: dict[str, Any]) -> dict[str, Any]:
    """`args` with each deprecated alias under the field it stands for, in its place (where both
    are given, the field's value, as `TrainingArguments` reads them). The search's knobs write the
    fields: a trial that turns checkpointing off over a base config's ``gradient_checkpointing:
    true`` runs without it (`TrainingArguments` reads an alias only where its field is unset), but
    the two merged into one config and pruned of default values would keep the alias alone, and
    the run it configures would checkpoint again."""
    out: dict[str, Any] = {}
    for key, value in args.items():
        field = ALIASES.get(key)
        if field is None:
            out[key] = value
        elif field not in args:
            out[field] = value
    return out


def load_base_args(path: str) -> dict[str, Any]:
    """Read a base config: a JSON or YAML mapping of `TrainingArguments` kwargs, each deprecated
    alias under the field it stands for (`current_names`).

    Raises:
        UsageError: unreadable file, not a mapping, an unknown field, or a field the search controls.
    """
    import dataclasses

    from transformers import TrainingArguments

    data = read_mapping(path, "base_args", "TrainingArguments fields", "pass a JSON or YAML file")
    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    for key in data:
        if key not in fields:
            raise UsageError(
                f"base_args {path}: {key!r} is not a TrainingArguments field",
                "see `python -c 'import transformers; help(transformers.TrainingArguments)'`",
                field="base_args",
            )
        if key in RESERVED_ARGS:
            raise UsageError(
                f"base_args {path}: {key!r} is set by the search itself", f"remove {key}", field="base_args"
            )
    return current_names(dict(data))
