"""The renderers of an exported config (`autotune.export.config.export_config`), one per format:
`to_json`, `to_yaml`, `to_flags`, `to_python`, with `render` choosing by name. The flags are flags
alone (the shell passes every word of ``$(cat flags.txt)`` to the script); what they cannot hold,
the expected numbers and the changes to the training math, is in `notes`, which the CLI prints on
stderr.
"""

from __future__ import annotations

import json
from typing import Any

from autotune.errors import UsageError
from autotune.export.config import collator_line
from autotune.export.words import expected_lines
from autotune.space.defaults import training_args_defaults


def comment(config: dict[str, Any]) -> str:
    return "".join(f"# {line}\n" for line in expected_lines(config))


def _plain(config: dict[str, Any]) -> dict[str, Any]:
    plain = {
        "training_args": dict(config["training_args"]),
        "model_kwargs": dict(config["model_kwargs"]),
        "expected": dict(config["expected"]),
    }
    for key in ("data_collator", "mixed_precision", "pad_to_multiple_of"):
        if config.get(key):
            plain[key] = config[key]
    if config.get("peft"):
        plain["peft"] = dict(config["peft"])
    return plain


def to_json(config: dict[str, Any]) -> str:
    """The config as JSON (the throughput, peak and speedup are under ``expected``)."""
    return json.dumps(_plain(config), indent=2) + "\n"


def to_training_args(config: dict[str, Any]) -> str:
    """The `TrainingArguments` kwargs alone, as one flat JSON object: the file
    ``HfArgumentParser(TrainingArguments).parse_json_file`` takes as it is (and, merged with the
    script's own fields, the example scripts' single-JSON-file form). What it cannot hold is in
    `notes`. A study measured on a CPU says so (``use_cpu``): `TrainingArguments` refuses bf16 or
    fp16 without a GPU unless it is told."""
    args = dict(config["training_args"])
    if config["expected"].get("device") == "cpu":
        args.setdefault("use_cpu", True)
    return json.dumps(args, indent=2) + "\n"


def to_yaml(config: dict[str, Any]) -> str:
    """The config as YAML, with the expected numbers also as a comment on top."""
    import yaml

    return comment(config) + yaml.safe_dump(_plain(config), sort_keys=False)


def flag_args(training_args: dict[str, Any]) -> list[str]:
    """`TrainingArguments` kwargs as `HfArgumentParser` command-line arguments that parse back to
    the same values: a true boolean is a bare flag, anything else ``--name value`` (a dict as JSON
    without spaces)."""
    args: list[str] = []
    for key, value in training_args.items():
        if value is None:
            continue  # the exported args hold no None that differs from a default
        if value is True:
            args.append(f"--{key}")
        elif isinstance(value, (list, tuple)):
            args += [f"--{key}", *(str(v) for v in value)]
        elif isinstance(value, dict):
            args += [f"--{key}", json.dumps(value, separators=(",", ":"))]
        else:
            args += [f"--{key}", str(value)]
    return args


# What the shell does to an unquoted `$(cat FILE)`: it splits on whitespace and expands globs.
_GLOB_CHARACTERS = frozenset("*?[")


def to_flags(config: dict[str, Any]) -> str:
    """`TrainingArguments` flags alone, for ``python run_clm.py $(cat flags.txt)`` with the Hugging
    Face example scripts: the shell passes every word of the file as an argument, so it holds no
    comment and no quoting. What the search expects and the model-load kwargs are `notes` (the CLI
    prints them on stderr).

    Raises:
        UsageError: a value that would not reach the script as one unchanged word (whitespace, a
            glob character, an empty string).
    """
    args = flag_args(config["training_args"])
    for index, word in enumerate(args):
        if not word or any(c.isspace() or c in _GLOB_CHARACTERS for c in word):
            flag = (
                word
                if word.startswith("--")
                else next(a for a in reversed(args[:index]) if a.startswith("--"))
            )
            raise UsageError(
                f"{flag}={word!r} cannot be a flag read by `$(cat FILE)`: the shell would split or expand it",
                "export with --format json or yaml, or change the value in base_args",
                field="base_args",
            )
    return " ".join(args) + "\n"


def notes(config: dict[str, Any], fmt: str) -> list[str]:
    """What format `fmt` cannot hold itself, for the CLI to print on stderr: for flags (and the
    flat TrainingArguments JSON, the DeepSpeed config), the expected
    numbers, the changes to the training math and the model-load kwargs. The other formats carry
    them (as data or as comments): nothing."""
    if fmt not in ("flags", "deepspeed", "training-args"):  # files of nothing but their settings
        return []
    lines = expected_lines(config)
    model_kwargs = config["model_kwargs"]
    if model_kwargs:
        kwargs = ", ".join(f"{k}={v!r}" for k, v in model_kwargs.items())
        lines.append(
            f"model-load kwargs, not TrainingArguments flags (the example scripts have no flag for them): "
            f"pass {kwargs} to from_pretrained"
        )
    collator = collator_line(config)
    if collator:
        lines.append(collator)
    if config.get("peft"):
        lines.append(
            "peft adapter, not a TrainingArguments flag: model = get_peft_model(model, "
            f"PeftConfig.from_peft_type(**{json.dumps(config['peft'], separators=(',', ':'))}))"
        )
    return lines


def to_python(config: dict[str, Any]) -> str:
    """A Python snippet that builds the `TrainingArguments` and loads the model."""
    exp = config["expected"]
    auto = (
        "AutoModelForSequenceClassification"
        if exp.get("task") == "sequence-classification"
        else "AutoModelForCausalLM"
    )
    lines = [line.rstrip() for line in comment(config).splitlines()]
    # fields TrainingArguments lacks: a study of tune() on a TRL SFTTrainer, whose SFTConfig has them
    sft = bool(set(config["training_args"]) - set(training_args_defaults()))
    lines += [
        f"from transformers import {auto}, TrainingArguments",
        *(["from trl import SFTConfig"] if sft else []),
        "",
        f"MODEL = {_py(str(exp.get('model') or 'your-model'))}  # a hub id or a local checkpoint directory",
        "",
        f"training_args = {'SFTConfig' if sft else 'TrainingArguments'}(",
        '    output_dir="output",',
        *(f"    {key}={_py(value)}," for key, value in config["training_args"].items()),
        ")",
    ]
    kwargs = "".join(f", {key}={_py(value)}" for key, value in config["model_kwargs"].items())
    lines.append(f"model = {auto}.from_pretrained(MODEL{kwargs})")
    if config.get("peft"):
        lines += [
            "",
            "from peft import get_peft_model, PeftConfig",
            "",
            f"peft_config = PeftConfig.from_peft_type(**{_py(config['peft'])})",
            "model = get_peft_model(model, peft_config)",
        ]
    if config.get("data_collator"):
        lines[lines.index(f"from transformers import {auto}, TrainingArguments")] = (
            f"from transformers import {auto}, DataCollatorWithFlattening, TrainingArguments"
        )
        lines.append(
            f"data_collator = {config['data_collator']}  # Trainer(..., data_collator=data_collator)"
        )
    return "\n".join(lines) + "\n"


def _py(value: Any) -> str:
    """A Python literal for `value` (strings in double quotes, as the rest of the snippet)."""
    return json.dumps(value) if isinstance(value, str) else repr(value)
