"""Which renderer writes which export format (`render`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.errors import UsageError
from autotune.export.formats import to_flags, to_json, to_python, to_training_args, to_yaml
from autotune.export.launchers import to_accelerate, to_deepspeed
from autotune.export.trl_sft import to_trl_sft

FORMATS = ("json", "yaml", "flags", "training-args", "accelerate", "python", "deepspeed", "trl-sft")

RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "json": to_json,
    "yaml": to_yaml,
    "flags": to_flags,
    "training-args": to_training_args,
    "accelerate": to_accelerate,
    "python": to_python,
    "deepspeed": to_deepspeed,
    "trl-sft": to_trl_sft,
}


def render(config: dict[str, Any], fmt: str) -> str:
    """`config` in format `fmt` (one of `FORMATS`).

    Raises:
        UsageError: an unknown format, or one the trial has nothing for (`to_deepspeed`,
            `to_trl_sft`).
    """
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise UsageError(f"unknown export format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    return renderer(config)
