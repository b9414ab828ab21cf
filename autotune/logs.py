"""Keeping the libraries' own logs out of a search's output."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from transformers.utils import logging as hf_logging

from autotune.store.session import quiet_store


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Silence optuna's and transformers' per-trial INFO logs; reporters show trials instead."""
    hf_level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with quiet_store():
            yield
    finally:
        hf_logging.set_verbosity(hf_level)
