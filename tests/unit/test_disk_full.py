"""Full disks: which errors say so (SQLite, PostgreSQL, MySQL, the OS), a full store reported at
once and never retried, a heartbeat that found it full raised at the trial's next step, retries
bounded once the search is interrupted, the clean-up's store line said once, and a trial that ran
out of disk under its compile cache or scratch folder recorded ``disk_full`` with its folder."""

from __future__ import annotations

import errno
import sqlite3
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy.exc
from optuna.storages import RDBStorage

from autotune.disk import disk_full_line, full_path, is_disk_full
from autotune.errors import StoreError, StoreFull
from autotune.progress import Reporter
from autotune.store import retry
from autotune.store.outcomes import DISK_FULL, STORE_LOST
from autotune.store.rdb import RetryingRDBStorage
from autotune.store.retry import end_retries_within, is_transient, restore_retries, retry_transient
from autotune.store.storage import open_storage
from autotune.trial.feasibility import PastTrial, find_duplicate
from tests.helpers import FakeClock

pytestmark = pytest.mark.timeout(60)


class _PgDiskFull(Exception):
    """What psycopg raises on a full data disk (``psycopg.errors.DiskFull``: SQLSTATE 53100)."""

    sqlstate = "53100"


class _MySQLError(Exception):
    """PyMySQL's errors carry (code, message)."""


def _operational(orig: BaseException) -> sqlalchemy.exc.OperationalError:
    return sqlalchemy.exc.OperationalError("UPDATE trials ...", None, orig)


def _wrapped(cause: BaseException) -> optuna.exceptions.StorageInternalError:
    try:
        raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from cause
    except optuna.exceptions.StorageInternalError as exc:
        return exc


FULL = [
    _operational(sqlite3.OperationalError("database or disk is full")),
    _wrapped(_operational(sqlite3.OperationalError("database or disk is full"))),
    _operational(_PgDiskFull('could not extend file "base/16384/16420": wrote only 4096 of 8192 bytes')),
    _operational(Exception('could not write to file "pg_wal/xlogtemp.77": No space left on device')),
    _operational(_MySQLError(1114, "The table 'trial_values' is full")),
    _operational(
        _MySQLError(3, "Error writing file '/var/tmp/MYfd=45' (Errcode: 28 - No space left on device)")
    ),
    OSError(errno.ENOSPC, "No space left on device", "/cache/fx/abc.py"),
    OSError(errno.EDQUOT, "Disk quota exceeded"),
]
NOT_FULL = [
    _operational(sqlite3.OperationalError("database is locked")),
    _operational(Exception("server closed the connection unexpectedly")),
    _operational(_MySQLError(2013, "Lost connection to MySQL server during query")),
    OSError(errno.EIO, "Input/output error"),
    KeyError("no such trial"),
]


@pytest.mark.parametrize("error", FULL, ids=lambda e: str(e)[:50])
def test_full_disks_and_databases_are_told_apart_and_do_not_pass(error: BaseException) -> None:
    assert is_disk_full(error)
    assert not is_transient(error)  # an outage passes by itself; a full disk does not


@pytest.mark.parametrize("error", NOT_FULL, ids=lambda e: str(e)[:50])
def test_other_errors_are_not_a_full_disk(error: BaseException) -> None:
    assert not is_disk_full(error)


def test_a_compile_failure_that_hides_its_cause_is_still_a_full_disk() -> None:
    """Dynamo raises its backend's failure ``from None``, keeping the original as an attribute."""

    class BackendCompilerFailed(Exception):
        def __init__(self, inner: BaseException) -> None:
            super().__init__(f"backend='inductor' raised:\n{type(inner).__name__}: {inner}")
            self.inner_exception = inner

    inner = OSError(errno.ENOSPC, "No space left on device", "/store/x.db.compile-cache/fx/ab.py")
    error = BackendCompilerFailed(inner)
    assert is_disk_full(error)
    assert full_path(error) == Path("/store/x.db.compile-cache/fx/ab.py")
    from autotune.trial.errors import failure_reason  # torch: imported where needed

    assert failure_reason(error) == DISK_FULL


def test_a_full_store_raises_at_once_in_one_line_naming_it(tmp_path: Path) -> None:
    clock = FakeClock()
    attempts: list[int] = []

    def call(attempt: int) -> None:
        attempts.append(attempt)
        raise _wrapped(_operational(sqlite3.OperationalError("database or disk is full")))

    store = "postgresql://autotune:***@db:5432/autotune"
    outages_before = retry.store_unreachable_s()
    with pytest.raises(StoreFull) as info:
        retry_transient(call, 300, store, "secret", clock=clock, sleep=clock.sleep)
    assert attempts == [0] and clock.sleeps == []  # no retry, no wait
    message = str(info.value)
    assert message.startswith(f"store {store} cannot be written, its disk or database is full (database or")
    assert "not retried" in message and "autotune resume" in message and "\n" not in message
    assert retry.store_unreachable_s() == outages_before  # not an outage to the watchdogs


def test_a_full_sqlite_store_states_the_free_space_of_its_folder(tmp_path: Path) -> None:
    def call(attempt: int) -> None:
        raise _operational(sqlite3.OperationalError("database or disk is full"))

    database = tmp_path / "s.db"
    with pytest.raises(StoreFull, match=rf"full \(database or disk is full; {tmp_path}: [\d.]+ \w+ free\)"):
        retry_transient(call, 300, f"sqlite:///{database}", database=str(database))


def _full_heartbeat(*args: Any, **kwargs: Any) -> None:
    raise _operational(sqlite3.OperationalError("database or disk is full"))


def test_a_heartbeat_that_finds_the_store_full_is_kept_for_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name="h")
    trial = study.ask()
    backend = RetryingRDBStorage.of(storage)
    assert backend is not None
    backend.raise_if_full()  # nothing yet
    monkeypatch.setattr(RDBStorage, "record_heartbeat", _full_heartbeat)
    backend.record_heartbeat(trial._trial_id)  # optuna's thread would die of a raise: it is kept
    with pytest.raises(StoreFull, match=rf"store sqlite:///{tmp_path}/h.db cannot be written"):
        backend.raise_if_full()
    monkeypatch.undo()
    backend.record_heartbeat(trial._trial_id)  # space freed: the next beat lands and clears it
    backend.raise_if_full()
    storage.engine.dispose()


def test_an_interrupt_bounds_the_retries_of_an_outage() -> None:
    def call(attempt: int) -> None:
        raise _operational(Exception("server closed the connection unexpectedly"))

    assert end_retries_within(0.8) == pytest.approx(0.4)  # half left to end the workers and exit
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="unreachable for"):
            retry_transient(call, 300, "postgresql://u@db/x")
        assert time.monotonic() - started < 2.0  # not the 300 s of its bound
    finally:
        restore_retries()
    clock = FakeClock()
    calls: list[int] = []

    def twice(attempt: int) -> str:
        calls.append(attempt)
        if attempt == 0:
            raise _operational(Exception("server closed the connection unexpectedly"))
        return "ok"

    assert retry_transient(twice, 300, "store", clock=clock, sleep=clock.sleep) == "ok"  # restored


def test_the_interrupt_bound_is_the_shorter_of_the_retry_bound_and_30_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    try:
        monkeypatch.setenv(retry.STORE_RETRY_ENV, "300")
        assert end_retries_within() == pytest.approx(25.0)  # of 30 s: 5 s to end the workers and exit
        restore_retries()
        monkeypatch.setenv(retry.STORE_RETRY_ENV, "8")
        assert end_retries_within() == pytest.approx(4.0)
        assert retry.INTERRUPT_BOUND_S == 30.0
    finally:
        restore_retries()


class _Notes(Reporter):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def on_note(self, text: str) -> None:
        self.notes.append(text)


def _full(*args: Any, **kwargs: Any) -> list[int]:
    raise StoreFull(
        "store sqlite:///x.db cannot be written, its disk or database is full (...)", "free space"
    )


@pytest.mark.parametrize(
    ("ending", "notes"),
    [
        (KeyboardInterrupt(), 1),
        (StoreFull("store sqlite:///x.db cannot be written"), 0),
        (RuntimeError("x"), 1),
    ],
)
def test_the_clean_up_does_not_replace_what_ended_the_search(
    monkeypatch: pytest.MonkeyPatch, ending: BaseException, notes: int
) -> None:
    from autotune.driver import trials

    monkeypatch.setattr(trials, "fail_interrupted_trials", _full)
    reporter = _Notes()
    trials._fail_interrupted_on_the_way_out(None, reporter, ending)  # type: ignore[arg-type]
    assert len(reporter.notes) == notes  # the store's line once: not again after its own error
    assert all("stay RUNNING until the next autotune process" in note for note in reporter.notes)
    with pytest.raises(StoreFull):  # nothing else ended it: the store's error is the search's
        trials._fail_interrupted_on_the_way_out(None, reporter, None)  # type: ignore[arg-type]


def test_a_full_store_in_a_job_is_the_jobs_store_line() -> None:
    from autotune.trial.errors import failure_reason, one_line

    error = StoreFull(
        "store sqlite:///x.db cannot be written, its disk or database is full (...)", "free space"
    )
    assert failure_reason(error) == STORE_LOST  # its supervisor stops with the line
    assert one_line(error) == str(error)


def test_a_disk_full_line_names_the_folder(tmp_path: Path) -> None:
    cache, scratch = tmp_path / "x.db.compile-cache", tmp_path / "autotune-worker-1"
    places = {"compile cache": cache, "scratch folder": scratch}
    in_cache = OSError(errno.ENOSPC, "No space left on device", str(cache / "fx" / "a.py"))
    line = disk_full_line(in_cache, places)
    assert line.startswith(f"disk full under the compile cache {cache} (No space left on device; ")
    assert line.endswith(" free)")
    in_scratch = OSError(errno.ENOSPC, "No space left on device", str(scratch / "run" / "f.bin"))
    assert disk_full_line(in_scratch, places).startswith(f"disk full under the scratch folder {scratch} ")
    elsewhere = OSError(errno.ENOSPC, "No space left on device", "/elsewhere/f")
    assert disk_full_line(elsewhere, places).startswith("disk full at /elsewhere/f (No space left on device")
    assert disk_full_line(OSError(errno.ENOSPC, "No space left on device"), places) == (
        "disk full (No space left on device)"
    )


def test_a_configuration_that_ran_out_of_disk_runs_again() -> None:
    params = {"per_device_train_batch_size": 8}
    assert find_duplicate(params, [PastTrial(0, params, DISK_FULL)]) is None
    assert find_duplicate(params, [PastTrial(0, params, "oom")]) is not None
