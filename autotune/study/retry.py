"""Riding out store outages: optuna's RDB storage whose calls retry transient errors for a while.

A PostgreSQL/MySQL server that restarts, fails over or has its connections terminated
(``pg_terminate_backend``) for a few seconds must not end a search. `RetryingRDBStorage` is
optuna's `RDBStorage` whose methods (every one optuna's `_CachedStorage` wrapper and heartbeat
thread call) retry errors that pass (`is_transient`) with exponential backoff, for `retry_s`
seconds in all; past that they raise `StoreError` naming the store and how long it was unreachable.

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

import copy
import functools
import json
import logging
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import optuna
import sqlalchemy.exc
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import make_url

from autotune.disk import describe_free, is_disk_full
from autotune.errors import StoreError, StoreFull, first_line
from autotune.study import bulk
from autotune.urls import sqlite_file, without_password

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
_TRANSIENT = re.compile(
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
            return bool(_TRANSIENT.search(text))
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
        "`autotune resume STUDY`: a trial it could not record is marked interrupted then",
    )


def _said(exc: BaseException, password: str | None) -> str:
    """What a store error says: the first line of its cause (optuna wraps the driver's error),
    its password scrubbed."""
    cause = exc.__cause__ if isinstance(exc, optuna.exceptions.StorageInternalError) else None
    return without_password(first_line(cause or exc, empty=type(exc).__name__), password)


class _QuietFallback(logging.Filter):
    """optuna's RDB storage logs a warning, with the whole SQL statement, when a trial query fails
    with an operational error, then tries a slower query; on a lost connection that one fails
    too and the call is retried here. Those warnings would flood the terminal in an outage."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith("Caught an error from sqlalchemy") and _TRANSIENT.search(text))


logging.getLogger("optuna.storages._rdb.storage").addFilter(_QuietFallback())

_calls = threading.local()  # an outer retried call retries the whole: inner calls run plainly


def _retried(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def retried(self: RetryingRDBStorage, *args: Any, **kwargs: Any) -> T:
        return self._retry(lambda attempt: method(self, *args, **kwargs))

    return retried


class RetryingRDBStorage(RDBStorage):
    """optuna's `RDBStorage` riding out store outages (see the module docstring).

    Args:
        url: the engine URL (with its driver and password).
        retry_s: how long one call retries transient errors before raising `StoreError`.
        shown: the store as messages name it (the URL with its password hidden).
        **kwargs: `RDBStorage`'s own.
    """

    def __init__(self, url: str, *, retry_s: float, shown: str, **kwargs: Any) -> None:
        self.retry_s = retry_s
        self.shown = shown
        self.new_trial_user_attrs: dict[str, Any] = {}
        self.full: StoreFull | None = None  # the last heartbeat that failed for want of room
        # What every call's error messages need of the URL, read once.
        self._password = make_url(url).password
        database = sqlite_file(url)
        self._database = None if database is None else str(database)
        super().__init__(url, **kwargs)

    @staticmethod
    def of(storage: Any) -> RetryingRDBStorage | None:
        """The `RetryingRDBStorage` behind `storage` (optuna wraps an RDB storage in its
        `_CachedStorage`, which a study's ``_storage`` is), or None."""
        backend = getattr(storage, "_backend", storage)
        return backend if isinstance(backend, RetryingRDBStorage) else None

    def stamp_new_trials(self, user_attrs: dict[str, Any]) -> None:
        """Write `user_attrs` in the same transaction that creates each trial optuna asks for (a
        worker's owner record): no moment exists where the trial is RUNNING but nobody's."""
        self.new_trial_user_attrs = copy.deepcopy(user_attrs)

    def _retry(self, call: Callable[[int], T]) -> T:
        if getattr(_calls, "active", False):
            return call(0)
        _calls.active = True
        try:
            return retry_transient(call, self.retry_s, self.shown, self._password, database=self._database)
        finally:
            _calls.active = False

    def record_heartbeat(self, trial_id: int) -> None:
        """optuna's heartbeat, from its thread: a write that fails because the store is full is
        kept in `full` (the trial raises it at its next step: `raise_if_full`) instead of ending
        the thread with a traceback; the next beat tries again."""
        try:
            self._retry(lambda attempt: RDBStorage.record_heartbeat(self, trial_id))
        except StoreFull as exc:
            self.full = exc
        else:
            self.full = None

    def raise_if_full(self) -> None:
        """Raise the `StoreFull` of the last heartbeat, if it failed so."""
        if self.full is not None:
            raise self.full

    def create_new_study(self, directions: Sequence[StudyDirection], study_name: str | None = None) -> int:
        def attempt(number: int) -> int:
            try:
                return RDBStorage.create_new_study(self, directions, study_name)
            except optuna.exceptions.DuplicatedStudyError:
                if number == 0 or study_name is None:
                    raise
                return RDBStorage.get_study_id_from_name(self, study_name)  # ours, on an earlier attempt

        return self._retry(attempt)

    def delete_study(self, study_id: int) -> None:
        def attempt(number: int) -> None:
            try:
                RDBStorage.delete_study(self, study_id)
            except KeyError:
                if number == 0:
                    raise

        self._retry(attempt)

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        return self._create_new_trial(study_id, template_trial)._trial_id

    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        token = uuid.uuid4().hex
        template = _template_with_token(template_trial, token, self.new_trial_user_attrs)
        return self._retry(lambda attempt: self._create_trial_once(study_id, template, token, attempt > 0))

    def _create_trial_once(
        self, study_id: int, template: FrozenTrial, token: str, retry: bool
    ) -> FrozenTrial:
        """optuna's trial creation, one transaction, without its own retries (which could create the
        trial twice); on a retry, the trial an earlier attempt committed is returned instead."""
        with _create_scoped_session(self.scoped_session) as session:
            if retry:
                attribute = models.TrialSystemAttributeModel
                found = (
                    session.query(attribute.trial_id)
                    .join(models.TrialModel, models.TrialModel.trial_id == attribute.trial_id)
                    .filter(models.TrialModel.study_id == study_id)
                    .filter(attribute.key == CREATE_TOKEN_ATTR, attribute.value_json == json.dumps(token))
                    .one_or_none()
                )
                if found is not None:
                    trial_model = models.TrialModel.find_or_raise_by_id(found[0], session)
                    return self._build_frozen_trial_from_trial_model(trial_model)
            models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
            trial = self._get_prepared_new_trial(study_id, template, session)
            frozen = copy.deepcopy(template)
            frozen.number = int(trial.number)  # a Column to mypy
            frozen.datetime_start = trial.datetime_start
            frozen._trial_id = int(trial.trial_id)
            return frozen

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        first_attempt = datetime.now()  # optuna stamps datetime_start with this host's clock

        def attempt(number: int) -> bool:
            try:
                changed = RDBStorage.set_trial_state_values(self, trial_id, state, values)
            except optuna.exceptions.UpdateFinishedTrialError:
                if number > 0 and self._landed(trial_id, state, values, first_attempt):
                    return True
                raise
            if not changed and number > 0 and state == TrialState.RUNNING:
                return self._landed(trial_id, state, values, first_attempt)
            return changed

        return self._retry(attempt)

    def _landed(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None, since: datetime
    ) -> bool:
        """Whether an earlier attempt's state change was committed after all."""
        stored = RDBStorage.get_trial(self, trial_id)
        if stored.state != state:
            return False
        if state == TrialState.RUNNING:
            return stored.datetime_start is not None and stored.datetime_start >= since
        return values is None or stored.values == list(values)


def _template_with_token(
    template: FrozenTrial | None, token: str, user_attrs: dict[str, Any] | None = None
) -> FrozenTrial:
    """The trial to create, holding the creation token: `template` (optuna's `add_trial` and
    `enqueue_trial`), or what optuna creates without one (a RUNNING trial starting now, with
    `user_attrs`)."""
    if template is None:
        return FrozenTrial(
            number=-1,
            state=TrialState.RUNNING,
            value=None,
            datetime_start=datetime.now(),
            datetime_complete=None,
            params={},
            distributions={},
            user_attrs=copy.deepcopy(user_attrs or {}),
            system_attrs={CREATE_TOKEN_ATTR: token},
            intermediate_values={},
            trial_id=-1,
        )
    template = copy.deepcopy(template)
    template.system_attrs = {**template.system_attrs, CREATE_TOKEN_ATTR: token}
    return template


# Calls whose repetition is harmless (reads; upserts; writes that ignore a duplicate key), retried
# as they are. With the methods above, every call optuna's `_CachedStorage` and heartbeat make.
RETRIED_AS_IS = (
    "set_study_user_attr",
    "set_study_system_attr",
    "get_study_id_from_name",
    "get_study_name_from_id",
    "get_study_directions",
    "get_study_user_attrs",
    "get_study_system_attrs",
    "get_trial_user_attrs",
    "get_trial_system_attrs",
    "get_all_studies",
    "set_trial_param",
    "_set_trial_param",
    "get_trial_param",
    "set_trial_intermediate_value",
    "set_trial_user_attr",
    "set_trial_system_attr",
    "get_trial_id_from_study_id_trial_number",
    "get_trial",
    "get_all_trials",
    "get_best_trial",
    "_get_best_trial_id",
    "_get_stale_trial_ids",
)
for _name in RETRIED_AS_IS:
    setattr(RetryingRDBStorage, _name, _retried(getattr(RDBStorage, _name)))
# Every trial read goes through `_get_trials` (`_CachedStorage` calls it): read in bulk, no ORM.
RetryingRDBStorage._get_trials = _retried(bulk.get_trials)  # type: ignore[method-assign]
