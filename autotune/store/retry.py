"""Riding out store outages: which store errors pass (`is_transient`), how long a call retries
them (`retry_transient`, `store_retry_s`), and what is raised past that (`StoreError`, naming the
store and how long it was unreachable).

A PostgreSQL/MySQL server that restarts, fails over or has its connections terminated
(``pg_terminate_backend``) for a few seconds must not end a search. `autotune.store.rdb` applies
this policy to every call of optuna's RDB storage, with exponential backoff, for `retry_s` seconds
in all.

A write whose connection died may or may not have been committed, so a retried write must not be
applied twice:

- attribute, param, intermediate value and heartbeat writes are upserts (or ignore the duplicate
  key): applying one twice is applying it once;
- a new trial carries a random token (trial system attr ``autotune:create_token``), written in the
  same transaction; a retry first looks the token up and returns the trial it finds;
- a state change that finds the trial already finished with the state (and values) asked for
  landed on an earlier attempt: success. Claiming a WAITING trial (state RUNNING) that finds it
  RUNNING and started since the first attempt (this host's clock, as optuna records it) is ours;
- a study created (or deleted) on an earlier attempt is found by name (or found gone).

A write that fails because the disk or the database is full (`autotune.disk.is_disk_full`) is not
an outage: it raises `StoreFull` at once, naming the store and what is full, with no retry. A
heartbeat that fails so is kept (`RetryingRDBStorage.full`) for the trial to raise at its next step.

Once the process is interrupted (Ctrl-C, SIGTERM: `end_retries_within`, from the CLI's signal
handler and from the search's clean-up), the command must end within `--store-retry-s` or
`INTERRUPT_BOUND_S`, whichever is shorter: retries stop early enough for that (`EXIT_RESERVE_S`
before), so the clean-up after a signal never waits out a long outage.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import optuna
import sqlalchemy.exc

from autotune.disk import describe_free, is_disk_full
from autotune.errors import StoreError, StoreFull, first_line
from autotune.urls import without_password

STORE_RETRY_ENV = "AUTOTUNE_STORE_RETRY_S"
DEFAULT_STORE_RETRY_S = 300.0
CREATE_TOKEN_ATTR = "autotune:create_token"
FIRST_DELAY_S = 0.1
MAX_DELAY_S = 5.0
# After Ctrl-C or SIGTERM, store calls retry for at most this long (or --store-retry-s if shorter).
INTERRUPT_BOUND_S = 30.0
EXIT_RESERVE_S = 5.0  # of that bound (at most half), left to end the workers and exit after retries

T = TypeVar("T")


class _Outages:
    """How long this process's store calls have spent failing with errors that pass: the
    watchdogs of the jobs this process watches do not count that time (a trial blocked on the
    store is not hung, and a supervisor blocked on it cannot hear from its trials)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.failing = 0  # calls failing now (the heartbeat thread's and the loop's)
        self.since = 0.0
        self.total = 0.0

    def begin(self) -> None:
        with self.lock:
            if self.failing == 0:
                self.since = time.monotonic()
            self.failing += 1

    def end(self) -> None:
        with self.lock:
            self.failing -= 1
            if self.failing == 0:
                self.total += time.monotonic() - self.since

    def seconds(self) -> float:
        with self.lock:
            return self.total + (time.monotonic() - self.since if self.failing else 0.0)


_outages = _Outages()


def store_unreachable_s() -> float:
    """Seconds this process's store calls have spent failing with errors that pass, so far in
    all (monotonic: a watchdog compares two readings)."""
    return _outages.seconds()


_ending: dict[str, float] = {}  # "by": the monotonic time past which no call retries (interrupted)


def end_retries_within(bound_s: float | None = None) -> float:
    """After an interrupt (Ctrl-C, SIGTERM): the command must be gone within `bound_s` seconds
    from now (None: the shorter of `store_retry_s` and `INTERRUPT_BOUND_S`), so store calls (this
    thread's and every other) stop retrying `EXIT_RESERVE_S` (at most half the bound) before it,
    leaving that to end the workers and exit, then raise as past their bound. An earlier end stays.
    Returns the seconds until retries end."""
    bound = min(store_retry_s(), INTERRUPT_BOUND_S) if bound_s is None else max(0.0, bound_s)
    retrying = bound - min(EXIT_RESERVE_S, bound / 2)
    by = time.monotonic() + retrying
    _ending["by"] = min(by, _ending.get("by", by))
    return retrying


def restore_retries() -> None:
    """Forget `end_retries_within`: the clean-up is over, and the caller (a Python program that
    caught the interrupt) may go on with the store."""
    _ending.clear()


def store_retry_s() -> float:
    """How long store calls retry transient errors (``AUTOTUNE_STORE_RETRY_S``, default 300 s)."""
    return max(0.0, float(os.environ.get(STORE_RETRY_ENV, DEFAULT_STORE_RETRY_S)))


# Messages of errors that pass, from psycopg/libpq, PyMySQL/mysqlclient and the servers.
TRANSIENT = re.compile(
    r"terminating connection|server closed the connection|connection (?:is )?(?:closed|lost|reset)"
    r"|lost connection|gone away|connection refused|could not connect|connection timed out"
    r"|the database system is (?:starting up|shutting down|in recovery)|server shutdown"
    r"|shutdown in progress|could not serialize|serialization failure|deadlock"
    r"|lock wait timeout|broken pipe|statement timeout|read timed out",
    re.IGNORECASE,
)
# ... and of errors that an OperationalError can be but that no wait cures.
_PERMANENT = re.compile(
    r"password authentication failed|access denied|does not exist|unknown database"
    r"|no pg_hba\.conf entry|permission denied|no such table",
    re.IGNORECASE,
)


def is_transient(exc: BaseException) -> bool:
    """Whether a store error may pass if the call is tried again: a lost or refused connection, a
    server starting up or shutting down, a terminated backend, a serialization failure or deadlock,
    a timeout, a session whose connection died mid-transaction; also optuna's
    `StorageInternalError` wrapping one. Not: bad data, a constraint, a
    missing table or database, wrong credentials, or anything that is not a database error."""
    if is_disk_full(exc):
        return False  # no wait frees a disk
    seen: BaseException | None = exc
    for _ in range(5):  # optuna wraps SQLAlchemy's error, which wraps the driver's
        if seen is None:
            return False
        if isinstance(seen, sqlalchemy.exc.DBAPIError):
            text = str(seen.orig if seen.orig is not None else seen)
            if seen.connection_invalidated:
                return True
            if _PERMANENT.search(text):
                return False
            if isinstance(seen, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
                return True
            return bool(TRANSIENT.search(text))
        if isinstance(seen, sqlalchemy.exc.DisconnectionError | sqlalchemy.exc.TimeoutError):
            return True  # the pool's own: a connection found dead, or none free in time
        if isinstance(seen, sqlalchemy.exc.PendingRollbackError):
            return True  # a session used on after its connection died (optuna's `_get_trials` fallback)
        if not isinstance(seen, optuna.exceptions.StorageInternalError):
            return False
        seen = seen.__cause__
    return False


def retry_transient(
    call: Callable[[int], T],
    retry_s: float,
    store: str,
    password: str | None = None,
    *,
    database: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call(attempt)`` (attempt 0, 1, ...) until it returns, retrying transient errors with
    exponential backoff (0.1 s doubling to 5 s, jittered) while `retry_s` seconds have not passed.
    `database`: the store's SQLite file, if it is one (a full disk's message states its free space).

    Raises:
        StoreFull: `call` failed because the disk or the database is full (at once: no retry).
        StoreError: still failing after `retry_s` (its message names `store`, the time, and the last
            error's first line with `password` scrubbed), or past `end_retries_within`'s end.
        Exception: whatever `call` raised that is not transient, unchanged.
    """
    start = clock()
    delay = FIRST_DELAY_S
    attempt = 0
    failing = False
    try:
        while True:
            try:
                return call(attempt)
            except Exception as exc:
                if not isinstance(exc, StoreError) and is_disk_full(exc):
                    raise store_full(store, exc, password, database) from exc
                if not is_transient(exc):
                    raise
                if not failing:
                    failing = True
                    _outages.begin()
                waited = clock() - start
                ending = _ending.get("by")
                if waited + delay > retry_s or (ending is not None and time.monotonic() + delay > ending):
                    raise unreachable(store, waited, exc, password) from exc
                sleep(delay * random.uniform(0.5, 1.0))
                delay = min(2 * delay, MAX_DELAY_S)
                attempt += 1
    finally:
        if failing:
            _outages.end()


def unreachable(store: str, waited_s: float, exc: BaseException, password: str | None) -> StoreError:
    """The one error of a store that stayed unreachable past its retry bound (`store`: the URL as
    shown, `exc`: the last transient error)."""
    return StoreError(
        f"store {store} unreachable for {waited_s:.0f} s ({_said(exc, password)})",
        f"check that the database is up, or allow longer outages with --store-retry-s or {STORE_RETRY_ENV}",
    )


def store_full(
    store: str, exc: BaseException, password: str | None, database: str | None = None
) -> StoreFull:
    """The one error of a store write that failed for want of room (`store`: the URL as shown;
    `database`: a SQLite file, whose filesystem's free space the message states)."""
    # Without SQLAlchemy's "(sqlite3.OperationalError) " in front of the driver's words.
    said = re.sub(r"^\([\w.]+\) ", "", _said(exc, password))
    where = ""
    if database:
        folder = Path(database).expanduser().absolute().parent
        free = describe_free(folder)
        where = f"; {folder}: {free}" if free else ""
    return StoreFull(
        f"store {store} cannot be written, its disk or database is full ({said}{where}); not retried",
        "free space there (a server store: its data disk or table quota), then continue with "
        "`autotune resume --study STUDY`: a trial it could not record is marked interrupted then",
    )


def _said(exc: BaseException, password: str | None) -> str:
    """What a store error says: the first line of its cause (optuna wraps the driver's error),
    its password scrubbed."""
    cause = exc.__cause__ if isinstance(exc, optuna.exceptions.StorageInternalError) else None
    return without_password(first_line(cause or exc, empty=type(exc).__name__), password)
