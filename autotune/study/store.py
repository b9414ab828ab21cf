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
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import FrozenTrial, TrialState

from autotune.config import parse_memory_cap
from autotune.errors import StoreError, UsageError
from autotune.progress import TrialSummary
from autotune.run.feasibility import NOT_TRAINED, PastTrial
from autotune.study.owner import OWNER_ATTR, Owner, is_alive, is_local
from autotune.study.urls import display_url, engine_url, password_of, sqlite_file

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def default_study_name(model: str, space: str, seq_len: int) -> str:
    """``tiny-gpt2-quick-seq128``: one study per model, space and sequence length."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model.strip("/")).strip("_")
    return f"{slug}-{space}-seq{seq_len}"


HEARTBEAT_ENV = "AUTOTUNE_HEARTBEAT_S"
INTERRUPTED = "interrupted"


def heartbeat_interval_s() -> int:
    """Seconds between a running trial's heartbeats (``AUTOTUNE_HEARTBEAT_S``, default 10). A
    trial whose heartbeat is three intervals old belongs to a process that died."""
    return max(1, int(os.environ.get(HEARTBEAT_ENV, "10")))


def open_storage(url: str, existing: bool = False) -> optuna.storages.RDBStorage:
    """Open (and create if needed) the RDB store at `url`, with trial heartbeats on.

    ``postgresql://``, ``postgres://``, ``mysql://`` and ``mariadb://`` reach an installed driver
    (see `engine_url`). A SQLite file is switched to WAL with a busy timeout, so the workers of one
    host share it. Messages show the URL with its password hidden. With `existing`, the schema is
    known to be there and current (a worker of a supervisor that opened it): creating and
    checking it, which loads every schema migration script, is skipped.

    Raises:
        UsageError: the URL is not a database URL.
        StoreError: the database cannot be reached or opened.
    """
    target = engine_url(url)
    shown = display_url(url)
    try:
        database = sqlite_file(url)
        if database is not None:
            _prepare_sqlite(database)
        return _create_storage(target, existing)
    except ImportError as exc:
        cause = exc.__cause__ or exc  # optuna wraps the driver's own ImportError, which names it
        raise StoreError(
            f"cannot open {shown}: no database driver ({_first_line(cause, url)})",
            "install the drivers: pip install 'autotune[postgres,mysql]'",
        ) from None
    except Exception as exc:
        raise StoreError(
            f"cannot open storage {shown}: {_first_line(exc, url)}",
            "check the URL and that the database is up",
        ) from None


# How a process that lost the race to create a fresh store's schema sees it (SQLite, PostgreSQL,
# MySQL): the tables or the schema's version row appeared under it. Opening again then finds them.
_SCHEMA_RACE = re.compile(r"already exists|UNIQUE constraint|duplicate key|Duplicate entry", re.IGNORECASE)
_OPEN_ATTEMPTS = 8


def _create_storage(target: str, existing: bool = False) -> optuna.storages.RDBStorage:
    interval = heartbeat_interval_s()
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            with warnings.catch_warnings():  # heartbeats are "experimental" in optuna 5, and what we need
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    target,
                    engine_kwargs=_engine_kwargs(target),
                    heartbeat_interval=interval,
                    grace_period=3 * interval,
                    skip_table_creation=existing,
                    skip_compatibility_check=existing,
                )
        except sqlalchemy.exc.DBAPIError as exc:
            if attempt == _OPEN_ATTEMPTS - 1 or not _SCHEMA_RACE.search(str(exc)):
                raise
            time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # let the winner finish its schema
    raise AssertionError("unreachable")


def _first_line(exc: BaseException, url: str) -> str:
    """An error's first line, with the URL's password scrubbed should a driver echo it."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    password = password_of(url)
    return line.replace(password, "***") if password else line


def _prepare_sqlite(database: Path) -> None:
    """WAL journal (readers never block the writer; persistent in the file) and a busy timeout, so
    that several local processes share one SQLite file instead of failing with "database is locked".
    """
    import sqlite3

    if database.parent and not database.parent.exists():
        return  # SQLite's own error names the missing folder
    connection = sqlite3.connect(database, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
    finally:
        connection.close()


SQLITE_BUSY_TIMEOUT_S = 60


def _engine_kwargs(url: str) -> dict[str, Any]:
    # Many workers on one SQLite file wait for the lock instead of failing at once.
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    return {"pool_pre_ping": True}


def reason_of(trial: FrozenTrial) -> str | None:
    """A trial's reason; a FAIL without one is a trial whose process died (optuna failed it)."""
    reason = trial.user_attrs.get("reason")
    if reason is None and trial.state == TrialState.FAIL:
        return INTERRUPTED
    return reason


def was_trained(trial: FrozenTrial) -> bool:
    """Whether a trial counts as measured: skipped, reused, predicted and interrupted trials do not
    (an interrupted configuration is tried again)."""
    reason = reason_of(trial)
    if reason == INTERRUPTED:
        return False
    return bool(trial.user_attrs.get("trained", reason not in NOT_TRAINED))


def fail_interrupted_trials(study: optuna.Study, mine: Collection[str] = ()) -> list[int]:
    """Fail every RUNNING trial whose process is gone, with reason ``interrupted``; return their
    numbers. A trial owned by a process of this host (its ``worker`` attr) is failed at once when
    that process is no longer alive; any other trial when its heartbeat went stale (three intervals
    old). Optuna would fail stale ones too, but without a reason. Trials of the worker jobs in
    `mine` are left to the caller, which knows better why they ended (killed, crashed, hung)."""
    storage = study._storage  # optuna wraps an RDBStorage in a cache that keeps its heartbeat API
    stale: set[int] = set()
    if isinstance(storage, BaseHeartbeat) and storage.get_heartbeat_interval() is not None:
        stale = set(storage._get_stale_trial_ids(study._study_id))
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if (trial.user_attrs.get(OWNER_ATTR) or {}).get("job") in mine:
            continue
        owner = Owner.from_attrs(trial.user_attrs.get(OWNER_ATTR))
        dead_here = owner is not None and is_local(owner) and not is_alive(owner)
        if not dead_here and trial._trial_id not in stale:
            continue
        message = "its process stopped (killed or crashed) before the trial ended"
        if fail_running_trial(study, trial._trial_id, INTERRUPTED, message, trained=False):
            failed.append(trial.number)
    return failed


def fail_running_trial(study: optuna.Study, trial_id: int, reason: str, message: str, trained: bool) -> bool:
    """End a RUNNING trial as FAIL with a reason; False when it had already finished (its process,
    or another supervisor, got there first)."""
    storage = study._storage
    try:
        if storage.get_trial(trial_id).state != TrialState.RUNNING:
            return False
        storage.set_trial_user_attr(trial_id, "reason", reason)
        storage.set_trial_user_attr(trial_id, "trained", trained)
        storage.set_trial_user_attr(trial_id, "message", message)
        storage.set_trial_user_attr(trial_id, "feasible", False)
        return bool(storage.set_trial_state_values(trial_id, state=TrialState.FAIL))
    except optuna.exceptions.UpdateFinishedTrialError:
        return False


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


def measured_count(study: optuna.Study) -> int:
    """Trials that count against the study's total budget: finished trials that tried to train,
    whatever their outcome. Trials that were skipped, reused or predicted cost nothing."""
    return sum(1 for t in study.get_trials(deepcopy=False, states=FINISHED) if was_trained(t))


def as_past(trial: FrozenTrial) -> PastTrial:
    """A finished trial as the pre-checks of a new trial see it."""
    return PastTrial(trial.number, dict(trial.params), reason_of(trial))


def summarize_trial(trial: FrozenTrial) -> TrialSummary:
    attrs = dict(trial.user_attrs)
    return TrialSummary(
        number=trial.number,
        params=dict(trial.params),
        state=trial.state.name,
        tokens_per_s=attrs.get("tokens_per_s"),
        samples_per_s=attrs.get("samples_per_s"),
        peak_memory_bytes=attrs.get("peak_memory_bytes"),
        rel_ci_halfwidth=attrs.get("rel_ci_halfwidth"),
        reason=reason_of(trial),
        message=attrs.get("message"),
        attrs=attrs,
    )


def ranked_trials(study: optuna.Study) -> list[TrialSummary]:
    """Finished trials, best first: feasible completed ones by tokens/s (reused duplicates left
    out of the ranking), then the rest by number."""
    summaries = [summarize_trial(t) for t in study.get_trials(deepcopy=False, states=FINISHED)]
    scored = sorted(
        (s for s in summaries if _rankable(s)),
        key=lambda s: -float(s.tokens_per_s or 0.0),
    )
    rest = sorted((s for s in summaries if s not in scored), key=lambda s: s.number)
    return scored + rest


def _rankable(summary: TrialSummary) -> bool:
    return (
        summary.state == "COMPLETE"
        and summary.tokens_per_s is not None
        and "duplicate_of" not in summary.attrs
        and summary.attrs.get("feasible", True)
    )


def best_trial(study: optuna.Study) -> TrialSummary | None:
    """The best feasible trial: the finalists' winner when they were re-measured, else the completed
    trial with the highest measured tokens/s. Never an infeasible trial."""
    ranked = ranked_trials(study)
    winner = study.user_attrs.get("winner")
    if winner is not None:
        for summary in ranked:
            if summary.number == winner["number"] and _rankable(summary):
                return summary
    return ranked[0] if ranked and _rankable(ranked[0]) else None


def load_existing_study(url: str, name: str, existing: bool = False) -> optuna.Study:
    """Load a stored study by name.

    Raises:
        UsageError: no study of that name in the store (the message lists those there are).
    """
    database = sqlite_file(url)
    if database is not None and not database.exists():  # reading must not create an empty store
        raise UsageError(f"no study store at {url}: {database} does not exist", "pass --storage URL")
    storage = open_storage(url, existing)
    names = optuna.get_all_study_names(storage)
    if name not in names:
        listed = ", ".join(sorted(names)) or "none"
        raise UsageError(
            f"no study {name!r} in {display_url(url)} (studies there: {listed})", "see `autotune studies`"
        )
    return optuna.load_study(study_name=name, storage=storage)


def speedup_over_baseline(study: optuna.Study, trial: TrialSummary) -> tuple[float, float] | None:
    """(speedup, baseline tokens/s) of a trial over the study's baseline: re-measured medians,
    interleaved, when this trial is the re-measured winner and the baseline was re-measured with
    it; else the trial's search window over the baseline's first window. None without a baseline."""
    baseline = study.user_attrs.get("baseline") or {}
    if not baseline.get("tokens_per_s"):
        return None
    winner = study.user_attrs.get("winner") or {}
    if winner.get("number") == trial.number and baseline.get("remeasured_median"):
        base = float(baseline["remeasured_median"])
        return float(winner["median_tokens_per_s"]) / base, base
    if trial.tokens_per_s is None:
        return None
    base = float(baseline["tokens_per_s"])
    return float(trial.tokens_per_s) / base, base


def study_cap_bytes(study: optuna.Study, text: str) -> int:
    """A memory cap in bytes for a stored study: a fraction (``90%``) is of the device it ran on.

    Raises:
        UsageError: not a cap, or a fraction and the study does not record its device's memory.
    """
    cap = parse_memory_cap(text)
    total = int((study.user_attrs.get("device") or {}).get("memory_bytes") or 0)
    if cap.kind == "fraction" and total <= 0:
        raise UsageError(
            f"--memory-cap {text}: study {study.study_name!r} does not record its device's memory",
            "give the cap as a size, like 20GiB",
        )
    return cap.resolve(total)
