"""The study store: optuna's RDB storage, and reading trials back as summaries.

No home-made schema: everything autotune keeps is optuna trials, params and user attrs, so
optuna's own CLI and optuna-dashboard read the same store.
"""

from __future__ import annotations

import os
import random
import re
import time
import warnings
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import make_url

from autotune.errors import StoreError, UsageError, first_line
from autotune.records import TrialRecord, read_study, read_trial
from autotune.study.objective import compiles, run_facts, score
from autotune.study.outcomes import (
    INTERRUPTED,
    NOT_TRAINED,
    TrialOutcome,
    fail_running_trial,
    with_whole_run,
)
from autotune.study.owner import OWNER_ATTR, Owner, is_dead_here
from autotune.study.rdb import RetryingRDBStorage
from autotune.study.retry import retry_transient, store_retry_s
from autotune.urls import display_url, engine_url, password_of, sqlite_file, without_password

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


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
    `autotune.study.retry`). Opening is retried the same way only with `existing` (the store is
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
# The call is then retried (`autotune.study.retry`). TCP keepalives find a server that vanished.
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


def reason_of(trial: FrozenTrial) -> str | None:
    """A trial's reason; a FAIL without one is a trial whose process died (optuna failed it)."""
    return _reason(read_trial(trial))


def _reason(record: TrialRecord) -> str | None:
    if record.reason is None and record.state == "FAIL":
        return INTERRUPTED
    return record.reason


def was_trained(trial: FrozenTrial) -> bool:
    """Whether a trial counts as measured: skipped, reused, predicted and interrupted trials do not
    (an interrupted configuration is tried again)."""
    return _counts(summarize_trial(trial))


def _counts(summary: TrialRecord) -> bool:
    """`was_trained` of a trial's summary (its reason already read as `summarize_trial` reads it)."""
    if summary.reason == INTERRUPTED:
        return False
    return bool(summary.trained if summary.trained is not None else summary.reason not in NOT_TRAINED)


def fail_interrupted_trials(study: optuna.Study, mine: Collection[str] = ()) -> list[int]:
    """Fail every RUNNING trial whose process is gone (`orphaned_trials`), with reason
    ``interrupted``; return their numbers. Optuna would fail stale ones too, but without a reason.
    Trials of the worker jobs in `mine` are left to the caller, which knows better why they ended
    (killed, crashed, hung)."""
    failed = []
    for trial in orphaned_trials(study, mine):
        message = "its process stopped (killed or crashed) before the trial ended"
        if fail_running_trial(
            study, trial._trial_id, TrialOutcome.process_ended(INTERRUPTED, message, False)
        ):
            failed.append(trial.number)
    return failed


def orphaned_trials(study: optuna.Study, mine: Collection[str] = ()) -> list[FrozenTrial]:
    """The RUNNING trials whose process is gone, read without writing. A trial whose owner (its
    ``worker`` attr) shares this process's boot and PID namespace is gone at once when that process
    is no longer alive; any other trial (another host, boot or PID namespace, or an owner record
    from before those were recorded) only when its heartbeat went stale (three intervals old): see
    `autotune.study.owner`. Trials of the worker jobs in `mine` are left out."""
    storage = study._storage  # optuna wraps an RDBStorage in a cache that keeps its heartbeat API
    stale: set[int] = set()
    if isinstance(storage, BaseHeartbeat) and storage.get_heartbeat_interval() is not None:
        stale = set(storage._get_stale_trial_ids(study._study_id))
    found = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if (trial.user_attrs.get(OWNER_ATTR) or {}).get("job") in mine:
            continue
        owner = Owner.from_attrs(trial.user_attrs.get(OWNER_ATTR))
        if (owner is not None and is_dead_here(owner)) or trial._trial_id in stale:
            found.append(trial)
    return found


# What a read-only listing says of a trial whose owner is gone: the store still holds it RUNNING
# until a search, resume or worker of the study marks it interrupted.
OWNER_GONE = "its owner process is gone; `autotune resume` records it as interrupted"


def orphaned_records(study: optuna.Study) -> list[TrialRecord]:
    """The records of `orphaned_trials`, as a listing shows them: state RUNNING, reason
    interrupted. Nothing is written."""
    return [
        replace(summary, failure=replace(summary.failure, reason=INTERRUPTED, message=OWNER_GONE))
        for summary in map(read_trial, orphaned_trials(study))
    ]


def running_trials_of(study: optuna.Study, owner: Owner) -> list[FrozenTrial]:
    """The RUNNING trials owned by one process."""
    return [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if Owner.from_attrs(t.user_attrs.get(OWNER_ATTR)) == owner
    ]


def trials_of_job(study: optuna.Study, job_id: str | None) -> list[FrozenTrial]:
    """The trials a worker job ran (its ``worker.job`` attr), in any state."""
    if job_id is None:
        return []
    return [
        t
        for t in study.get_trials(deepcopy=False)
        if (t.user_attrs.get(OWNER_ATTR) or {}).get("job") == job_id
    ]


def distinct_params(study: optuna.Study) -> int:
    """How many different configurations the study's finished trials hold."""
    finished = study.get_trials(deepcopy=False, states=FINISHED)
    return len({tuple(sorted(t.params.items())) for t in finished})


def running_trials(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def measured_count(study: optuna.Study) -> int:
    """Trials that count against the study's total budget: finished trials that tried to train,
    whatever their outcome. Trials that were skipped, reused or predicted cost nothing."""
    return trained_count(study.get_trials(deepcopy=False, states=FINISHED))


def trained_count(finished: list[FrozenTrial]) -> int:
    """How many of `finished` (finished trials) count against the budget (`was_trained`)."""
    return sum(map(_counts, _summaries(finished)))


def summarize_trial(trial: FrozenTrial) -> TrialRecord:
    """A trial's record, a FAIL without a reason read as interrupted."""
    record = read_trial(trial)
    return record.with_reason(_reason(record))


def ranked_trials(study: optuna.Study) -> list[TrialRecord]:
    """Finished trials, best first: feasible completed ones by their score (tokens/s, or with the
    user's run length the effective rate of that run: `autotune.study.objective.score`; reused
    duplicates left out of the ranking), then the rest by number."""
    summaries = read_trials(study)
    tokens = read_study(study).train_tokens
    rankable = [_rankable(s) for s in summaries]  # one pass: a membership test per record is quadratic
    scored = sorted(
        (s for s, ok in zip(summaries, rankable, strict=True) if ok), key=lambda s: -(score(s, tokens) or 0.0)
    )
    rest = sorted((s for s, ok in zip(summaries, rankable, strict=True) if not ok), key=lambda s: s.number)
    return scored + rest


def _rankable(summary: TrialRecord) -> bool:
    return (
        summary.state == "COMPLETE"
        and summary.tokens_per_s is not None
        and not summary.reused
        and summary.is_feasible
    )


def best_trial(study: optuna.Study) -> TrialRecord | None:
    """The best measured feasible trial: the one the finalists' re-measurement put first when
    they were re-measured, else the completed trial with the highest measured score. Never an
    infeasible trial. What the study hands back is its `answer`, which may be the defaults."""
    ranked = ranked_trials(study)
    winner = read_study(study).winner
    if winner is not None:
        for summary in ranked:
            if summary.number == winner.number and _rankable(summary):
                return summary
    return ranked[0] if ranked and _rankable(ranked[0]) else None


def read_trials(study: optuna.Study) -> list[TrialRecord]:
    """The records of a study's finished trials, each with its whole-run check where it had one
    (the study keeps them: `autotune.study.outcomes.with_whole_run`)."""
    record = read_study(study)
    finished = study.get_trials(deepcopy=False, states=FINISHED)
    return [
        with_whole_run(summary, record.whole_run_of(t.number))
        for t, summary in zip(finished, _summaries(finished), strict=True)
    ]


# The records of the trials last summarized, by the identity of their trial objects: a command or
# a search reads a study's trials many times (ranked, best, counted, the answer's facts), the
# storage hands back the same finished trial objects each time (`deepcopy=False`), and a finished
# trial never changes, so a large study is summarized once per change, not once per read.
_summarized: dict[int, tuple[FrozenTrial, TrialRecord]] = {}


def _summaries(trials: list[FrozenTrial]) -> list[TrialRecord]:
    """`summarize_trial` of each of `trials` (finished ones), reusing the last call's records."""
    global _summarized
    known, memo, out = _summarized, {}, []
    for trial in trials:
        hit = known.get(id(trial))
        record = hit[1] if hit is not None and hit[0] is trial else summarize_trial(trial)
        memo[id(trial)] = (trial, record)
        out.append(record)
    _summarized = memo
    return out
    records = [summarize_trial(t) for t in trials]
    _last_summarized = (list(trials), records)
    return records


def load_existing_study(url: str, name: str, existing: bool = False) -> optuna.Study:
    """Load a stored study by name.

    Raises:
        UsageError: no study of that name in the store (the message lists those there are), or
            it was written by a newer autotune.
    """
    database = sqlite_file(url)
    if database is not None and not database.exists():  # reading must not create an empty store
        raise UsageError(
            f"no study store at {url}: {database} does not exist", "pass storage=URL", field="storage"
        )
    storage = open_storage(url, existing)
    names = optuna.get_all_study_names(storage)
    if name not in names:
        listed = ", ".join(sorted(names)) or "none"
        raise UsageError(
            f"no study {name!r} in {display_url(url)} (studies there: {listed})", "see `autotune studies`"
        )
    study = optuna.load_study(study_name=name, storage=storage)
    read_study(study)  # refuses a store of a newer schema
    return study


def trial_run_facts(study: optuna.Study, trial: TrialRecord) -> dict[str, Any]:
    """`autotune.study.objective.run_facts` of a trial of `study`: its loss delta, its predicted run
    time and cost, or when it compiles after how many tokens that pays for itself."""
    uncompiled = next(
        (s for s in ranked_trials(study) if _rankable(s) and not compiles(s)),
        None,
    )
    return run_facts(read_study(study), trial, uncompiled)
