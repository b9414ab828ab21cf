"""A run configuration as its study stores it: local paths made absolute, so that a pool member
started in any folder finds them (`stored_run_config`)."""

from __future__ import annotations

import os
from typing import Any

from autotune.options import RunConfig


def _absolute(path: str | None) -> str | None:
    """`path` made absolute where it names something on this machine; else as given (a hub id)."""
    if path is None:
        return None
    local = os.path.expanduser(path)
    return os.path.abspath(local) if os.path.exists(local) else path


def _absolute_folder(path: str | None) -> str | None:
    return os.path.abspath(os.path.expanduser(path)) if path else None


def stored_paths(config: RunConfig) -> dict[str, str | None]:
    """The configuration's local paths as stored: absolute, so that a pool member started in any
    folder finds them. Hub ids, shipped space names and model presets are kept as given (a preset
    or shipped space wins over a local file of that name, as when they are loaded)."""
    paths = {
        "dataset": _absolute(config.dataset),
        "tokenizer": _absolute(config.tokenizer),
        "base_args": _absolute(config.base_args),
        # ``lora`` is a name, not a file (even where a file of that name lies in this folder)
        "peft": config.peft
        if config.peft is None or config.peft.strip().lower() == "lora"
        else _absolute(config.peft),
        # A folder that may not exist yet: absolute all the same (a pool member's is the same one).
        "compile_cache": _absolute_folder(config.compile_cache),
        "tracker_dir": _absolute_folder(config.tracker_dir),
        "model": config.model,
        "space": config.space,
    }
    if _absolute(config.model) != config.model:
        from autotune.workloads.workload import PRESETS  # imports torch: only for a local path

        if config.model not in PRESETS:
            paths["model"] = _absolute(config.model)
    if _absolute(config.space) != config.space:
        from autotune.space.loading import builtin_spaces

        if config.space not in builtin_spaces():
            paths["space"] = _absolute(config.space)
    return paths


def stored_run_config(config: RunConfig) -> dict[str, Any]:
    """`config` as its study stores it (`RunConfig.to_dict`), its local paths absolute
    (`stored_paths`)."""
    return {**config.to_dict(), **stored_paths(config)}
