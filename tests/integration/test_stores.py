"""The stores as users name them, on the real servers: PostgreSQL, MariaDB and SQLite files shared by
several processes. No search runs here except one, which checks that a password is never shown."""

from __future__ import annotations

import importlib.util
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.cli import main
from autotune.store.session import StudyStore
from autotune.store.storage import open_storage

# Plain ask/tell on a store with heartbeats on: optuna reminds that heartbeats serve `optimize`.
pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage")

FLOAT = optuna.distributions.FloatDistribution(0.0, 1.0)


def _with_scheme(url: str, scheme: str) -> str:
    return scheme + url[url.index("://") :]


def _round_trip(url: str, study_name: str) -> None:
    """Create a study, write a trial with a user attr, read it back through a second store."""
    writer = open_storage(url)
    try:
        study = optuna.create_study(study_name=study_name, storage=writer, direction="maximize")
        trial = study.ask({"x": FLOAT})
        trial.set_user_attr("tokens_per_s", 1234.5)
        study.tell(trial, 0.25)
    finally:
        writer.engine.dispose()
    reader = open_storage(url)
    try:
        (stored,) = optuna.load_study(study_name=study_name, storage=reader).get_trials()
        assert stored.state == optuna.trial.TrialState.COMPLETE
        assert stored.value == 0.25
        assert stored.user_attrs == {"tokens_per_s": 1234.5}
        assert study_name in optuna.get_all_study_names(reader)
    finally:
        reader.engine.dispose()


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg"])
def test_postgresql_urls_as_users_write_them(postgres_url: str, scheme: str) -> None:
    assert postgres_url.startswith("postgresql://postgres@127.0.0.1")  # the plain form, no driver
    _round_trip(_with_scheme(postgres_url, scheme), f"pg-{scheme}")


@pytest.mark.parametrize("scheme", ["mysql", "mariadb", "mysql+pymysql"])
def test_mysql_urls_as_users_write_them(mysql_url: str, scheme: str) -> None:
    assert mysql_url.startswith("mysql://root@127.0.0.1")
    _round_trip(_with_scheme(mysql_url, scheme), f"my-{scheme.replace('+', '-')}")


@pytest.mark.skipif(importlib.util.find_spec("MySQLdb") is not None, reason="mysqlclient is installed")
def test_plain_mysql_url_reaches_pymysql(mysql_url: str) -> None:
    storage = open_storage(mysql_url)
    try:
        assert storage.engine.dialect.driver == "pymysql"
        assert storage.engine.url.database == mysql_url.rsplit("/", 1)[1]
    finally:
        storage.engine.dispose()


@pytest.mark.parametrize(
    "url", ["postgresql://user:SECRET@127.0.0.1:1/db", "mysql://user:SECRET@127.0.0.1:1/db"]
)
@pytest.mark.parametrize(
    "command",
    [
        ["studies"],
        ["show", "--study", "s"],
        ["resume", "--study", "s"],
        ["export", "--study", "s"],
        ["report", "--study", "s"],
    ],
)
def test_unreachable_url_fails_with_one_line_without_the_password(
    url: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, "--storage", url])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert info.value.code in (1, 2)
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: cannot open storage ")
    assert "user:***@127.0.0.1:1" in lines[0]
    assert "SECRET" not in captured.err + captured.out


def test_search_never_shows_nor_stores_the_password(
    postgres_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # The server trusts local connections, so a password in the URL is accepted and ignored.
    url = postgres_url.replace("postgres@", "postgres:SECRET@")
    fast = ["--settle-steps", "1", "--measure-steps", "3", "--max-seconds", "10", "--finalists", "0"]
    args = ["--model", "tiny-gpt2", "--space", "quick", "--trials", "1", "--no-baseline", *fast]
    with pytest.raises(SystemExit) as info:
        main(["search", *args, "--study", "secret", "--storage", url])
    assert info.value.code == 0
    for command in (["studies"], ["show", "--study", "secret"]):
        with pytest.raises(SystemExit):
            main([*command, "--storage", url])
    captured = capsys.readouterr()
    assert "postgres:***@127.0.0.1" in captured.out + captured.err  # the header names the store
    assert "SECRET" not in captured.out + captured.err
    study = StudyStore.open(url, "secret")
    try:
        assert study.user_attrs["run_config"]["storage"] == url.replace("SECRET", "***")
        assert "SECRET" not in repr(study.user_attrs)
    finally:
        study.storage._backend.engine.dispose()  # type: ignore[attr-defined]


def _share_one_store(url: str, barrier: Any, results: Any) -> None:
    """A process that opens a (fresh) SQLite store at the same moment as the others and writes."""
    try:
        barrier.wait(timeout=60)
        storage = open_storage(url)
        study = optuna.create_study(study_name="shared", storage=storage, load_if_exists=True)
        for _ in range(3):
            trial = study.ask({"x": FLOAT})
            study.tell(trial, trial.params["x"])
        results.put("ok")
    except Exception as exc:
        results.put(f"{type(exc).__name__}: {exc}")


def test_sqlite_serves_several_local_processes(tmp_path: Path) -> None:
    """Processes opening one fresh SQLite file at once: the schema's creation race is retried and
    the file is in WAL with a busy timeout, so every process writes its trials."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    context = multiprocessing.get_context("spawn")
    count = 6
    barrier, results = context.Barrier(count), context.Queue()
    processes = [context.Process(target=_share_one_store, args=(url, barrier, results)) for _ in range(count)]
    for process in processes:
        process.start()
    try:
        outcomes = [results.get(timeout=180) for _ in processes]
        for process in processes:
            process.join(timeout=30)
    finally:
        for process in processes:  # never an orphan: end what is left, by its pid
            if process.is_alive():
                process.kill()
                process.join(timeout=10)
    assert outcomes == ["ok"] * count
    storage = open_storage(url)
    try:
        assert len(optuna.load_study(study_name="shared", storage=storage).get_trials()) == 3 * count
    finally:
        storage.engine.dispose()
    with sqlite3.connect(tmp_path / "shared.db") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
