"""Unit-test fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import optuna
import pytest


@pytest.fixture(autouse=True)
def _quiet_optuna() -> Iterator[None]:
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    optuna.logging.set_verbosity(level)
