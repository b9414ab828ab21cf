"""Unit-test fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import optuna
import pytest

import autotune.driver.search
import autotune.preflight


@pytest.fixture(autouse=True)
def _quiet_optuna() -> Iterator[None]:
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    optuna.logging.set_verbosity(level)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[SimpleNamespace]:
    """Replace the real search with a fake that records what the CLI hands it (the store's
    environment variable unset, so the defaults are what a test sees), and the machine checks the
    command line makes first (`autotune.preflight`: a Ray head, a compile-cache folder) with none."""
    seen: list[SimpleNamespace] = []

    def fake_search(config, *, reporter=None, debug=False):  # type: ignore[no-untyped-def]
        seen.append(SimpleNamespace(config=config, reporter=reporter, debug=debug))

    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    monkeypatch.setattr(autotune.driver.search, "search", fake_search)
    monkeypatch.setattr(autotune.preflight, "check_before_creating", lambda config: None)
    return seen
