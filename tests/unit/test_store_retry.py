"""Store outages: which errors pass, the retry policy, writes applied once when an attempt's
commit landed but its answer was lost, timeouts on the engines, and a real PostgreSQL whose
connections are terminated while trials are written."""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy
import sqlalchemy.exc
from optuna.storages import RDBStorage
from optuna.storages._cached_storage import _CachedStorage
from optuna.trial import TrialState

from autotune.errors import StoreError
from autotune.store import retry
from autotune.store.rdb import RetryingRDBStorage
from autotune.store.retry import is_transient, retry_transient
from autotune.store.storage import _engine_kwargs, open_storage
from autotune.urls import engine_url
from tests.helpers import FakeClock, terminate_connections


def _operational(message: str) -> sqlalchemy.exc.OperationalError:
    return sqlalchemy.exc.OperationalError("UPDATE trials ...", None, Exception(message))


def _wrapped(cause: BaseException) -> optuna.exceptions.StorageInternalError:
    """What optuna raises: its own error, from SQLAlchemy's, from the driver's."""
    try:
        raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from cause
    except optuna.exceptions.StorageInternalError as exc:
        return exc


@pytest.mark.parametrize(
    "error",
    [
        _operational("terminating connection due to administrator command"),
        _operational("server closed the connection unexpectedly"),
        _operational("(2013, 'Lost connection to MySQL server during query')"),
        _operational("the database system is starting up"),
        _operational("could not serialize access due to concurrent update"),
        sqlalchemy.exc.InterfaceError("SELECT 1", None, Exception("(0, '')")),
        sqlalchemy.exc.DBAPIError("SELECT 1", None, Exception("deadlock detected")),
        sqlalchemy.exc.DBAPIError("SELECT 1", None, Exception("odd"), connection_invalidated=True),
        sqlalchemy.exc.DisconnectionError("connection found dead at checkout"),
        _wrapped(
            sqlalchemy.exc.PendingRollbackError("Can't reconnect until invalid transaction is rolled back")
        ),
        _wrapped(_operational("terminating connection due to administrator command")),
        _wrapped(sqlalchemy.exc.InterfaceError("SELECT 1", None, Exception("connection already closed"))),
    ],
    ids=lambda e: type(e).__name__ + ":" + str(getattr(e, "orig", None) or e.__cause__ or e)[:40],
)
def test_errors_that_pass(error: BaseException) -> None:
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        sqlalchemy.exc.IntegrityError("INSERT", None, Exception("duplicate key value violates unique")),
        sqlalchemy.exc.ProgrammingError("SELECT", None, Exception('relation "trials" does not exist')),
        sqlalchemy.exc.DataError("INSERT", None, Exception("value too long for type")),
        _operational('FATAL: password authentication failed for user "autotune"'),
        _operational('FATAL: database "autotune" does not exist'),
        _operational("(1045, \"Access denied for user 'root'@'localhost'\")"),
        _wrapped(sqlalchemy.exc.DataError("INSERT", None, Exception("value too long"))),
        _wrapped(ValueError("bad")),
        optuna.exceptions.UpdateFinishedTrialError("finished"),
        KeyError("no study"),
        ValueError("terminating connection"),  # not a database error, whatever it says
    ],
    ids=lambda e: type(e).__name__ + ":" + str(getattr(e, "orig", None) or e.__cause__ or e)[:40],
)
def test_errors_that_do_not_pass(error: BaseException) -> None:
    assert not is_transient(error)


def _failing(times: int, error: Callable[[], BaseException]) -> tuple[Callable[[int], str], list[int]]:
    attempts: list[int] = []

    def call(attempt: int) -> str:
        attempts.append(attempt)
        if len(attempts) <= times:
            raise error()
        return "done"

    return call, attempts


def test_transient_errors_are_retried_with_growing_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry.random, "uniform", lambda low, high: high)
    clock = FakeClock()
    call, attempts = _failing(8, lambda: _operational("server closed the connection"))
    assert retry_transient(call, 300, "store", clock=clock, sleep=clock.sleep) == "done"
    assert attempts == list(range(9))  # a call knows it is a retry
    assert clock.sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])  # capped at 5 s


def test_other_errors_pass_through_at_once() -> None:
    clock = FakeClock()
    call, attempts = _failing(1, lambda: KeyError("no such trial"))
    with pytest.raises(KeyError, match="no such trial"):
        retry_transient(call, 300, "store", clock=clock, sleep=clock.sleep)
    assert attempts == [0] and clock.sleeps == []


def test_an_outage_longer_than_the_bound_is_one_store_error() -> None:
    clock = FakeClock()
    call, _ = _failing(10**6, lambda: _wrapped(_operational("connection to server failed: secret at host")))
    store = "postgresql://autotune:***@db:5432/autotune"
    with pytest.raises(
        StoreError, match=r"^store postgresql://autotune:\*\*\*@db:5432/autotune unreachable"
    ) as info:
        retry_transient(call, 30, store, "secret", clock=clock, sleep=clock.sleep)
    message = str(info.value)
    assert "unreachable for 2" in message and 25 <= clock.now <= 30  # it says how long, within the bound
    assert "secret" not in message and "connection to server failed: *** at host" in message
    assert "\n" not in message and "AUTOTUNE_STORE_RETRY_S" in message


def test_no_retry_with_a_zero_bound() -> None:
    clock = FakeClock()
    call, attempts = _failing(1, lambda: _operational("gone away"))
    with pytest.raises(StoreError, match="unreachable for 0 s"):
        retry_transient(call, 0, "store", clock=clock, sleep=clock.sleep)
    assert attempts == [0]


def test_every_call_of_optunas_cache_and_heartbeat_is_retried() -> None:
    called = set(re.findall(r"self\._backend\.(\w+)\(", inspect.getsource(_CachedStorage)))
    assert {"_create_new_trial", "_get_trials", "record_heartbeat", "_get_stale_trial_ids"} <= called
    plain = {"get_heartbeat_interval", "get_heartbeat_stale_trial_callback"}  # no database
    for name in called - plain:
        assert name in vars(RetryingRDBStorage), f"RDBStorage.{name} is called by optuna but not retried"


# A commit that landed, then the connection died before its answer came back.
def _lands_then_fails(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[int]:
    original = getattr(owner, name)
    calls: list[int] = []

    def faulty(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        result = original(*args, **kwargs)
        if len(calls) == 1:
            raise _wrapped(_operational("server closed the connection unexpectedly"))
        return result

    monkeypatch.setattr(owner, name, faulty)
    return calls


def _sqlite(tmp_path: Path) -> RDBStorage:
    return open_storage(f"sqlite:///{tmp_path / 'retry.db'}")


def test_a_trial_whose_creation_landed_is_not_created_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    study = optuna.create_study(storage=_sqlite(tmp_path), study_name="s")
    calls = _lands_then_fails(monkeypatch, RetryingRDBStorage, "_create_trial_once")
    trial = study.ask()
    assert len(calls) == 2  # the retry found the trial its first attempt committed
    assert [t.number for t in study.get_trials()] == [trial.number] == [0]
    study.tell(trial, 1.0)
    assert study.trials[0].state == TrialState.COMPLETE


def test_stamped_attrs_land_with_the_trial_optuna_creates(tmp_path: Path) -> None:
    storage = _sqlite(tmp_path)
    study = optuna.create_study(storage=storage, study_name="s")
    study.enqueue_trial({"x": 1.0})  # a template of its own: not stamped
    # What a worker holds: the study's storage, optuna's cache around the RDB storage.
    assert isinstance(study._storage, _CachedStorage)
    stamped = RetryingRDBStorage.of(study._storage)
    assert stamped is storage and RetryingRDBStorage.of(object()) is None
    stamped.stamp_new_trials({"worker": {"pid": 7, "job": "j1"}})
    study.ask()  # takes the enqueued trial
    asked = study.ask()
    # Read through another storage, before this process writes anything else: the creation itself
    # carried the owner (a trial killed right after creation is still attributable).
    stored = optuna.load_study(study_name="s", storage=open_storage(storage.url)).trials
    assert stored[1].number == asked.number and stored[1].user_attrs == {"worker": {"pid": 7, "job": "j1"}}
    assert "worker" not in stored[0].user_attrs


@pytest.mark.parametrize("existing", [True, False])
def test_only_a_store_known_to_exist_is_waited_for_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existing: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'open.db'}"
    open_storage(url)  # the supervisor made the schema
    original = RetryingRDBStorage.__init__
    calls: list[int] = []

    def refused_once(self: RetryingRDBStorage, *args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise _operational("could not connect to server: Connection refused")
        original(self, *args, **kwargs)

    monkeypatch.setattr(RetryingRDBStorage, "__init__", refused_once)
    if existing:  # a worker: the store is there, so unreachable is an outage: waited for
        assert isinstance(open_storage(url, existing=True, retry_s=30), RetryingRDBStorage)
        assert len(calls) == 2
    else:  # a first open: most often a wrong URL, which fails at once
        with pytest.raises(StoreError, match="Connection refused"):
            open_storage(url, retry_s=30)
        assert len(calls) == 1


def test_an_existing_store_unreachable_past_the_bound_at_open_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'open.db'}"
    open_storage(url)

    def refused(self: RetryingRDBStorage, *args: Any, **kwargs: Any) -> None:
        raise _operational("could not connect to server: Connection refused")

    monkeypatch.setattr(RetryingRDBStorage, "__init__", refused)
    # The same one line as a store call past its bound, naming the flag that allows longer outages
    # (not "check the URL": a worker's store is known to exist).
    with pytest.raises(StoreError, match=r"unreachable for \d+ s .*Connection refused") as raised:
        open_storage(url, existing=True, retry_s=0.3)
    assert "--store-retry-s" in str(raised.value) and "check the URL" not in str(raised.value)


def test_a_finished_state_that_landed_is_success(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study = optuna.create_study(storage=_sqlite(tmp_path), study_name="s")
    trial = study.ask()
    calls = _lands_then_fails(monkeypatch, RDBStorage, "set_trial_state_values")
    study.tell(trial, 2.5)
    assert len(calls) == 2 and study.trials[0].value == 2.5


def test_a_claimed_waiting_trial_that_landed_is_ours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study = optuna.create_study(storage=_sqlite(tmp_path), study_name="s")
    study.enqueue_trial({"x": 1.0})
    calls = _lands_then_fails(monkeypatch, RDBStorage, "set_trial_state_values")
    trial = study.ask()
    assert len(calls) == 2
    assert trial.number == 0 and trial.suggest_float("x", 0, 2) == 1.0  # the enqueued one, once
    assert [t.state for t in study.get_trials()] == [TrialState.RUNNING]


def test_a_study_whose_creation_landed_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = _sqlite(tmp_path)
    _lands_then_fails(monkeypatch, RDBStorage, "create_new_study")
    study = optuna.create_study(storage=storage, study_name="s")
    assert optuna.get_all_study_names(storage) == ["s"]
    assert study._study_id == storage.get_study_id_from_name("s")


def test_engines_get_timeouts_unless_the_url_sets_them() -> None:
    postgres = _engine_kwargs(engine_url("postgresql://u:p@db/x"))
    assert postgres["pool_pre_ping"] is True
    assert postgres["connect_args"]["connect_timeout"] == 10
    assert postgres["connect_args"]["options"] == "-c statement_timeout=60000"
    own = _engine_kwargs(engine_url("postgresql://u:p@db/x?connect_timeout=3"))["connect_args"]
    assert "connect_timeout" not in own and "options" in own
    mysql = _engine_kwargs("mysql+pymysql://u:p@db/x")["connect_args"]
    assert (mysql["connect_timeout"], mysql["read_timeout"], mysql["write_timeout"]) == (10, 60, 60)
    assert _engine_kwargs("postgresql+pg8000://u@db/x")["connect_args"] == {}  # unknown arguments
    assert _engine_kwargs("sqlite:///x.db") == {"connect_args": {"timeout": 60}}


def test_storages_keep_their_retry_bound_when_pickled(tmp_path: Path) -> None:
    import pickle

    storage = open_storage(f"sqlite:///{tmp_path / 'p.db'}", retry_s=7)
    copy = pickle.loads(pickle.dumps(storage))
    assert isinstance(copy, RetryingRDBStorage) and copy.retry_s == 7


@pytest.mark.timeout(120)
def test_postgres_statement_timeout_is_set(postgres_url: str) -> None:
    storage = open_storage(postgres_url)
    with storage.engine.connect() as connection:
        assert connection.execute(sqlalchemy.text("SHOW statement_timeout")).scalar() == "1min"
    storage.engine.dispose()


@pytest.mark.timeout(120)
def test_mysql_accepts_the_timeouts(mysql_url: str) -> None:
    storage = open_storage(mysql_url)
    study = optuna.create_study(storage=storage, study_name="mysql-timeouts")
    study.tell(study.ask(), 1.0)
    assert len(study.trials) == 1
    storage.engine.dispose()


@pytest.mark.timeout(240)
def test_writes_land_exactly_once_while_postgres_terminates_connections(postgres_url: str) -> None:
    storage = open_storage(postgres_url, retry_s=60)
    study = optuna.create_study(storage=storage, study_name="outage", direction="maximize")
    database = sqlalchemy.engine.make_url(engine_url(postgres_url)).database
    admin = engine_url(postgres_url.rsplit("/", 1)[0] + "/postgres")
    kills: list[int] = []
    killer = threading.Thread(target=terminate_connections, args=(admin, database, 5.0, kills))
    killer.start()
    asked = 0
    try:
        while killer.is_alive() or asked < 10:
            trial = study.ask()
            trial.set_user_attr("asked", asked)
            storage.record_heartbeat(trial._trial_id)
            trial.set_user_attr("note", f"trial {asked}")
            study.tell(trial, float(asked))
            asked += 1
    finally:
        killer.join(timeout=30)
    assert sum(kills) > 0, "no connection was terminated: the test tested nothing"
    trials = optuna.load_study(study_name="outage", storage=postgres_url).get_trials()
    assert [t.number for t in trials] == list(range(asked))  # none lost, none twice
    assert [t.user_attrs["asked"] for t in trials] == list(range(asked))
    assert all(t.state == TrialState.COMPLETE and t.value == t.number for t in trials)
    assert all(t.user_attrs["note"] == f"trial {t.number}" for t in trials)
    storage.engine.dispose()
