"""`--store-retry-s` on `autotune search`, `resume` and `worker`: the bound reaches this process's
store and, through the environment, its workers; a negative bound is a one-line usage error."""

from __future__ import annotations

import os
from typing import Any

import pytest

import autotune.driver.pool
import autotune.driver.search
import autotune.executors.warm
from autotune.cli import main
from autotune.store.retry import STORE_RETRY_ENV, store_retry_s


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The retry bound in the environment when the library is called (the command's fake)."""
    monkeypatch.delenv(STORE_RETRY_ENV, raising=False)
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    bounds: list[str | None] = []

    def record(*args: Any, **kwargs: Any) -> None:
        bounds.append(os.environ.get(STORE_RETRY_ENV))

    monkeypatch.setattr(autotune.driver.search, "search", record)
    monkeypatch.setattr(autotune.driver.pool, "join_study", record)
    monkeypatch.setattr(autotune.executors.warm, "start_forkserver_for", lambda model, isolation: None)
    yield bounds
    os.environ.pop(STORE_RETRY_ENV, None)  # the command set it for this process


def _run(*argv: str) -> int | str | None:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    return info.value.code


def test_search_passes_the_bound_to_its_store_and_workers(seen: list[str | None]) -> None:
    assert _run("search", "--store-retry-s", "12.5") in (0, None)
    assert seen == ["12.5"] and store_retry_s() == 12.5


def _stored_study(url: str, name: str) -> None:
    import optuna

    from autotune.options import RunConfig

    study = optuna.create_study(storage=url, study_name=name)
    study.set_user_attr("run_config", RunConfig(storage=url, study=name).to_dict())


def test_worker_passes_the_bound(seen: list[str | None], tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    _stored_study(url, "s")  # read before the pool member starts
    assert _run("worker", "--study", "s", "--storage", url, "--store-retry-s", "0") in (0, None)
    assert seen == ["0.0"] and store_retry_s() == 0.0


def test_without_the_flag_the_default_stands(seen: list[str | None]) -> None:
    assert _run("search") in (0, None)
    assert seen == [None] and store_retry_s() == 300.0


def test_resume_takes_the_flag(
    seen: list[str | None], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    _stored_study(url, "r")
    assert _run("resume", "--study", "r", "--storage", url, "--store-retry-s", "3") in (0, None)
    assert seen == ["3.0"]


def test_a_negative_bound_is_one_line_exit_2(
    seen: list[str | None], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run("search", "--store-retry-s", "-1") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--store-retry-s" in lines[0]
    assert seen == []
