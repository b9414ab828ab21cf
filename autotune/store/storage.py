"""Opening a study store: optuna's RDB storage on SQLite, PostgreSQL or MySQL, its schema made or
checked, its engine bounded (timeouts, keepalives), its calls retried through outages.

No home-made schema: everything autotune keeps is optuna trials, params and user attrs, so
optuna's own CLI and optuna-dashboard read the same store.
"""

from __future__ import annotations

import os
import random
import re
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from sqlalchemy.engine import make_url

from autotune.errors import StoreError, first_line
from autotune.store.rdb import RetryingRDBStorage
from autotune.store.retry import retry_transient, store_retry_s
from autotune.urls import display_url, engine_url, password_of, sqlite_file, without_password


def default_study_name(model: str, space: str, seq_len: int) -> str:
    """``tiny-gpt2-quick-seq128``: one study per model, space and sequence length."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model.strip("/")).strip("_")
    return f"{slug}-{space}-seq{seq_len}"


HEARTBEAT_ENV = "AUTOTUNE_HEARTBEAT_S"


def heartbeat_interval_s() -> int:
    """Seconds between a running trial's heartbeats (``AUTOTUNE_HEARTBEAT_S``, default 10). A
    trial whose heartbeat is three intervals old belongs to a process that died."""
    return max(1, int(os.environ.get(HEARTBEAT_ENV, "10")))


def open_storage(
    url: str, existing: bool = False, retry_s: float | None = None
) -> optuna.storages.RDBStorage:
    """Open (and create if needed) the RDB store at `url`, with trial heartbeats on.

    ``postgresql://``, ``postgres://``, ``mysql://`` and ``mariadb://`` reach an installed driver
    (see `engine_url`), with connect and statement timeouts (see `_engine_kwargs`). A SQLite file is
    switched to WAL with a busy timeout, so the workers of one host share it. Messages show the URL
    with its password hidden. With `existing`, the schema is known to be there and current (a worker
    of a supervisor that opened it): creating and checking it, which loads every schema migration
    script, is skipped. Once open, every call of the storage retries transient errors (connection
    lost, server restarting) for `retry_s` seconds (None: `store_retry_s`, 300 by default; see
    `autotune.store.retry`). Opening is retried the same way only with `existing` (the store is
    known to be there, so unreachable means an outage); otherwise a wrong URL fails at once.

    Raises:
        UsageError: the URL is not a database URL.
        StoreError: the database cannot be reached or opened (later calls: it stayed unreachable
            for `retry_s` seconds).
    """
    target = engine_url(url)
    shown = display_url(url)
    try:
        database = sqlite_file(url)
        if database is not None:
            _prepare_sqlite(database)
        return _create_storage(target, existing, store_retry_s() if retry_s is None else retry_s, shown)
    except ImportError as exc:
        cause = exc.__cause__ or exc  # optuna wraps the driver's own ImportError, which names it
        raise StoreError(
            f"cannot open {shown}: no database driver ({_said(cause, url)})",
            "install the drivers: pip install 'hf-autotune[postgres,mysql]'",
        ) from None
    except StoreError:
        raise  # an existing store that stayed unreachable past the bound: already one line
    except Exception as exc:
        raise StoreError(
            f"cannot open storage {shown}: {_said(exc, url)}",
            "check the URL and that the database is up",
        ) from None


# How a process that lost the race to create a fresh store's schema sees it (SQLite, PostgreSQL,
# MySQL): the tables or the schema's version row appeared under it, or (SQLite) another process held
# the file's lock beyond what the busy handler waits for (SQLite answers a lock upgrade that could
# deadlock at once). Opening again then finds them.
_SCHEMA_RACE = re.compile(
    r"already exists|UNIQUE constraint|duplicate key|Duplicate entry|database is locked", re.IGNORECASE
)
_OPEN_ATTEMPTS = 8


def _create_storage(target: str, existing: bool, retry_s: float, shown: str) -> optuna.storages.RDBStorage:
    # A store known to exist (`existing`: a worker of a supervisor that opened it) that drops its
    # connections for a while (a restart, an outage) is waited for as every other store call is
    # (`retry_transient`: the same bound and backoff, the outage not counted against a job, and past
    # the bound the same one error). A first open fails at once: an unreachable URL is most often a
    # wrong one.
    if existing:
        return retry_transient(
            lambda _attempt: _open_past_schema_race(target, True, retry_s, shown),
            retry_s,
            shown,
            password_of(target),
        )
    return _open_past_schema_race(target, False, retry_s, shown)


def _open_past_schema_race(
    target: str, existing: bool, retry_s: float, shown: str
) -> optuna.storages.RDBStorage:
    """Open the storage, trying again while another process is creating its schema."""
    interval = heartbeat_interval_s()
    for attempt in range(1, _OPEN_ATTEMPTS + 1):
        try:
            with warnings.catch_warnings():  # heartbeats are "experimental" in optuna 5, and what we need
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return RetryingRDBStorage(
                    target,
                    retry_s=retry_s,
                    shown=shown,
                    engine_kwargs=_engine_kwargs(target),
                    heartbeat_interval=interval,
                    grace_period=3 * interval,
                    skip_table_creation=existing,
                    skip_compatibility_check=existing,
                )
        except (sqlalchemy.exc.DBAPIError, optuna.exceptions.StorageInternalError) as exc:
            # optuna wraps a failed commit (the schema's version row written twice, say) in its
            # own error: the driver's message is the cause's.
            if not _SCHEMA_RACE.search(f"{exc} {exc.__cause__ or ''}") or attempt == _OPEN_ATTEMPTS:
                raise
            time.sleep(random.uniform(0.05, 0.2) * attempt)  # let the winner finish its schema
    raise AssertionError("unreachable: the last attempt returns or raises")


def _said(exc: BaseException, url: str) -> str:
    """An error's first line, with the URL's password scrubbed should a driver echo it."""
    return without_password(first_line(exc), password_of(url))


def _prepare_sqlite(database: Path) -> None:
    """WAL journal (readers never block the writer; persistent in the file) and a busy timeout, so
    that several local processes share one SQLite file instead of failing with "database is locked".
    """
    import sqlite3

    if database.parent and not database.parent.exists():
        return  # SQLite's own error names the missing folder
    for attempt in range(1, _OPEN_ATTEMPTS + 1):
        connection = sqlite3.connect(database, timeout=SQLITE_BUSY_TIMEOUT_S)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            # Switching the journal needs the file alone: another process opening it at the same
            # moment makes SQLite answer "locked" at once, whatever the busy timeout.
            if "locked" not in str(exc) or attempt == _OPEN_ATTEMPTS:
                raise
            time.sleep(random.uniform(0.05, 0.2) * attempt)
        finally:
            connection.close()


SQLITE_BUSY_TIMEOUT_S = 60


# A server that does not answer must not hang a search: connecting gives up after this long, and
# a statement (none of optuna's takes seconds) is cancelled by the server after STATEMENT (or, on
# MySQL/MariaDB, abandoned by the client: their server-side limits differ and cover SELECTs only).
# The call is then retried (`autotune.store.retry`). TCP keepalives find a server that vanished.
STORE_CONNECT_TIMEOUT_S = 10
STORE_STATEMENT_TIMEOUT_S = 60


def _engine_kwargs(url: str) -> dict[str, Any]:
    """SQLAlchemy engine arguments for an engine URL: timeouts for the drivers autotune installs
    (psycopg/psycopg2, PyMySQL/mysqlclient); a driver argument the URL sets itself
    (``?connect_timeout=3``) is left to the URL."""
    # Many workers on one SQLite file wait for the lock instead of failing at once.
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    parsed = make_url(url)
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    connect_args: dict[str, Any] = {}
    if backend == "postgresql" and driver in ("psycopg", "psycopg2"):
        connect_args = {
            "connect_timeout": STORE_CONNECT_TIMEOUT_S,
            "options": f"-c statement_timeout={STORE_STATEMENT_TIMEOUT_S * 1000}",
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }
    elif backend in ("mysql", "mariadb") and driver in ("pymysql", "mysqldb"):
        connect_args = {
            "connect_timeout": STORE_CONNECT_TIMEOUT_S,
            "read_timeout": STORE_STATEMENT_TIMEOUT_S,
            "write_timeout": STORE_STATEMENT_TIMEOUT_S,
        }
    given = set(parsed.query)
    return {"pool_pre_ping": True, "connect_args": {k: v for k, v in connect_args.items() if k not in given}}
