"""A model's config and a tokenizer, from a local folder, the local hub cache, or (bounded) the hub."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.errors import WorkloadError, first_line
from autotune.workloads.hub import is_local, quiet_loading, require_hub
from autotune.workloads.presets import PRESETS


def load_config(model: str, trust_remote_code: bool = False) -> Any:
    """A model's config from a local folder, the local hub cache, or (bounded) the hub.

    Raises:
        WorkloadError: no config there, or a hub id that cannot be reached (in seconds).
    """
    from transformers import AutoConfig

    return _from_folder_or_hub(
        lambda **kw: AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code, **kw),
        model,
        "model",
        "model",
        f"use a preset ({', '.join(PRESETS)}), a directory with config.json, or a hub id",
    )


def load_tokenizer(name: str, trust_remote_code: bool = False) -> Any:
    """A tokenizer from a local folder, the local hub cache, or (bounded) the hub."""
    from transformers import AutoTokenizer

    return _from_folder_or_hub(
        lambda **kw: AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code, **kw),
        name,
        "tokenizer",
        "tokenizer",
        "give a tokenizer folder holding tokenizer.json (or the model's tokenizer files)",
    )


def _from_folder_or_hub(load: Callable[..., Any], name: str, what: str, field: str, hint: str) -> Any:
    with quiet_loading():
        if not is_local(name):
            try:
                return load(local_files_only=True)  # the cache first: no network, no retries
            except (OSError, ValueError):
                require_hub(what, name, field)
        try:
            return load()
        except (OSError, ValueError) as exc:
            where = "a local directory" if is_local(name) else "a hub id"
            raise WorkloadError(f"cannot load {what} {name!r} as {where}: {first_line(exc)}", hint) from None
