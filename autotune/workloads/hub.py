"""Reaching the Hugging Face Hub: bounded, quiet, and fast to fail.

huggingface_hub retries a metadata request five times with back-off when no cached copy exists
(`file_download._get_metadata_or_catch_error(..., retry_on_errors=True)`), logging each retry:
about 25 s and eleven lines for a hub id typed without network. So a hub name is first resolved
from the local cache only; on a miss one bounded request checks that the hub answers at all, and
only then is the library's own (retrying) download path used.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from autotune.errors import WorkloadError, first_line

PROBE_TIMEOUT_S = 3.0
_LOGGERS = ("huggingface_hub", "transformers", "datasets", "filelock", "fsspec")


def is_local(name: str) -> bool:
    """A name that refers to something on this machine (a file or a folder), not a hub id."""
    return Path(name).expanduser().exists()


def hub_unreachable(timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the hub cannot be reached (one line), or None when it answers. One request, no retry."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout_s, follow_redirects=False)
    except Exception as exc:  # any transport error means: not reachable from here
        return f"{constants.ENDPOINT} is unreachable ({first_line(exc)})"
    return None


def require_hub(what: str, name: str, field: str) -> None:
    """Fail in seconds, with one line, when `name` must come from a hub that does not answer.

    Raises:
        WorkloadError: the hub cannot be reached (the message names the id and the way out).
    """
    why = hub_unreachable()
    if why is not None:
        raise WorkloadError(
            f"cannot resolve {what} {name!r}: it is not a local path and not in the local cache, and {why}",
            f"pass a local folder or file as {field}, or run where the hub is reachable",
            field=field,
        )


def require_reachable_model(name: str) -> None:
    """Before anything heavy is imported: an ``org/name`` model id that is neither on this machine
    nor in the local cache needs the hub, so fail in one line when it does not answer (the same
    check `resolve_workload` makes later, made while it still costs a fraction of a second).

    Raises:
        WorkloadError: the hub cannot be reached for this id.
    """
    if "/" not in name or is_local(name):
        return  # a preset, a bare hub id (resolved later) or a local folder
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return  # cached: no network needed
    require_hub("model", name, "model")


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """No progress bars ("Loading weights", dataset map) or library warnings while loading.

    Restores the previous state, so a Python caller's own settings are left as they were.
    """
    import datasets
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    datasets_bars_were_on = datasets.is_progress_bar_enabled()
    levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    hf_level = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    hf_logging.set_verbosity_error()
    for name in _LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        yield
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
        if datasets_bars_were_on:
            datasets.enable_progress_bars()
        hf_logging.set_verbosity(hf_level)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
