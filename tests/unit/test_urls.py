"""Storage URLs: the driver a URL reaches, and that a password is never shown."""

from __future__ import annotations

import importlib.util

import pytest
from sqlalchemy.engine import make_url

from autotune import urls
from autotune.errors import UsageError
from autotune.options import RunConfig
from autotune.urls import display_url, engine_url, sqlite_file


def _driver(url: str) -> str:
    return make_url(engine_url(url)).get_dialect().driver


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u@h:5432/db", "postgresql://u@h:5432/db"),
        ("postgres://u@h:5432/db", "postgresql://u@h:5432/db"),
        ("postgres+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
        ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
        ("mysql+mysqldb://root@h:3306/db", "mysql+mysqldb://root@h:3306/db"),
        ("sqlite:///autotune.db", "sqlite:///autotune.db"),
        ("postgresql://u:p%40ss@h/db", "postgresql://u:p%40ss@h/db"),  # the password reaches the driver
    ],
)
def test_engine_url_keeps_or_completes_the_driver(url: str, expected: str) -> None:
    assert engine_url(url) == expected


def test_postgresql_urls_reach_psycopg3() -> None:
    # SQLAlchemy 2's default PostgreSQL driver is psycopg 3, which the postgres extra installs.
    assert _driver("postgresql://u@h/db") == "psycopg"
    assert _driver("postgres://u@h/db") == "psycopg"
    assert importlib.util.find_spec("psycopg") is not None


@pytest.mark.parametrize("scheme", ["mysql", "mariadb"])
def test_mysql_urls_reach_pymysql_without_mysqlclient(scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        urls.importlib.util, "find_spec", lambda name: None if name == "MySQLdb" else real_find_spec(name)
    )
    assert engine_url(f"{scheme}://root@h:3306/db") == f"{scheme}+pymysql://root@h:3306/db"
    assert _driver(f"{scheme}://root@h:3306/db") == "pymysql"


def test_mysql_urls_keep_mysqlclient_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(urls.importlib.util, "find_spec", lambda name: object())
    assert engine_url("mysql://root@h:3306/db") == "mysql://root@h:3306/db"
    assert engine_url("mariadb://root@h/db") == "mariadb://root@h/db"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://user:SECRET@127.0.0.1:1/db",
        "mysql+pymysql://user:SECRET@h/db?charset=utf8mb4",
        "postgresql://user:SECRET@host:notaport/db",  # SQLAlchemy cannot parse it: hidden all the same
    ],
)
def test_display_url_hides_the_password(url: str) -> None:
    shown = display_url(url)
    assert "SECRET" not in shown
    assert "user:***@" in shown


@pytest.mark.parametrize("url", ["nonsense", "postgresql://user:SECRET@host:notaport/db"])
def test_invalid_url_is_a_usage_error_without_the_password(url: str) -> None:
    with pytest.raises(UsageError, match="invalid storage URL") as info:
        engine_url(url)
    assert "SECRET" not in str(info.value)


def test_run_config_stores_and_shows_the_url_without_its_password() -> None:
    config = RunConfig(storage="postgresql://postgres:SECRET@db:5432/autotune")
    assert config.storage_url == "postgresql://postgres:SECRET@db:5432/autotune"  # what connects
    assert config.storage_display == "postgresql://postgres:***@db:5432/autotune"
    assert config.to_dict()["storage"] == "postgresql://postgres:***@db:5432/autotune"


def test_sqlite_file() -> None:
    assert str(sqlite_file("sqlite:///autotune.db")) == "autotune.db"
    assert str(sqlite_file("sqlite:////tmp/a.db")) == "/tmp/a.db"
    assert sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file("sqlite://") is None
    assert sqlite_file("postgresql://u@h/db") is None
