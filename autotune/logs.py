"""Keeping the libraries' own logs out of a search's output."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import optuna
from transformers.utils import logging as hf_logging


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Silence optuna's and transformers' per-trial INFO logs; reporters show trials instead."""
    optuna_level = optuna.logging.get_verbosity()
    hf_level = hf_logging.get_verbosity()
    optuna.logging.set_verbosity(logging.WARNING)
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        optuna.logging.set_verbosity(optuna_level)
        hf_logging.set_verbosity(hf_level)
