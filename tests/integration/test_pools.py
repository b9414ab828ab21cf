"""Worker pools on one SQL study: several supervisors (and `autotune worker`) on real PostgreSQL
and MariaDB, a global budget, a supervisor killed mid-trial, no twin trials running at once."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import sqlalchemy

from autotune.store.owner import Owner, is_alive
from autotune.store.session import StudyStore
from autotune.store.storage import open_storage
from autotune.store.trials import measured_count, was_trained
from tests.helpers import study_if_there, wait_for, write_space

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

SPACE = {
    "per_device_train_batch_size": [1, 2, 4, 8],
    "precision": ["fp32", "bf16"],
    "activation_checkpointing": [True, False],
}
# Each trial measures for about 2 s (a CI target it cannot reach), so trials of different
# processes overlap and a kill lands mid-trial.
# No screening: no trial is cut short (bf16 is slow on CPUs without native bf16).
SLOW_TRIAL = [
    "--settle-steps",
    "1",
    "--measure-steps",
    "100000",
    "--max-seconds",
    "2",
    "--target-ci",
    "0.000001",
]
SLOW_TRIAL += ["--screen-ratio", "0"]


def _search_args(space: str, storage: str, study: str, trials: int) -> list[str]:
    args = [sys.executable, "-m", "autotune", "search", "--model", "tiny-gpt2", "--space", space]
    args += ["--trials", str(trials), "--storage", storage, "--study", study, "--seq-len", "16"]
    return [*args, "--finalists", "0", "--no-baseline", *SLOW_TRIAL]


_STORES: dict[str, optuna.storages.RDBStorage] = {}


@pytest.fixture(autouse=True)
def _close_stores() -> Iterator[None]:
    """Close the test's stores before its database is dropped."""
    yield
    for store in _STORES.values():
        store.engine.dispose()
    _STORES.clear()


def _load(storage: str, study: str) -> optuna.Study | None:
    """The study as stored now; one store per URL for the whole test (polling it with a fresh
    engine each time would hold PostgreSQL connections until the garbage collector runs)."""
    if storage not in _STORES:
        try:
            _STORES[storage] = open_storage(storage)
        except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
            return None  # its tables are being created by the search (see `study_if_there`)
    return study_if_there(_STORES[storage], study)


def _end(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _check_finished_study(study: optuna.Study) -> None:
    trials = study.get_trials()
    assert not [t.number for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    trained = [t for t in trials if was_trained(t)]
    for trial in trained:  # every finished trial's record is complete
        attrs = trial.user_attrs
        assert {"worker", "trained", "reason" if trial.state.name == "FAIL" else "training_args"} <= set(
            attrs
        )
        if trial.state == optuna.trial.TrialState.COMPLETE:
            assert attrs["tokens_per_s"] > 0 and attrs["peak_memory_bytes"] > 0 and attrs["feasible"]
    # No two trials trained the same parameters at the same time.
    for i, a in enumerate(trained):
        for b in trained[i + 1 :]:
            if a.params == b.params:
                assert a.datetime_complete <= b.datetime_start or b.datetime_complete <= a.datetime_start


def test_three_searches_share_a_postgres_study_and_survive_a_kill(tmp_path: Path, postgres_url: str) -> None:
    space = write_space(tmp_path, SPACE)
    name = f"pool-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    logs = [open(tmp_path / f"search-{i}.log", "w") for i in range(3)]  # noqa: SIM115
    procs = [
        subprocess.Popen(
            _search_args(space, postgres_url, name, 9), env=env, stdout=log, stderr=subprocess.STDOUT
        )
        for log in logs
    ]
    try:
        # Kill the first supervisor while one of its workers trains a trial: one that started
        # 0.2-0.8 s ago (past its pre-checks, seconds before its window can end).
        victim_trials: list[optuna.trial.FrozenTrial] = []

        def victim_running() -> bool:
            study = _load(postgres_url, name)
            if study is None or measured_count(StudyStore(study)) < 2:
                return False
            now = datetime.datetime.now()
            # Not a repeat of an earlier configuration: the store answers that one in milliseconds
            # (COMPLETE, reused), so it can end before the kill lands.
            earlier = {(t.number, tuple(sorted(t.params.items()))) for t in study.get_trials(deepcopy=False)}
            victim_trials[:] = [
                t
                for t in _running_under(study, procs[0].pid)
                if t.datetime_start
                and 0.2 < (now - t.datetime_start).total_seconds() < 0.8
                and not any(
                    n < t.number and params == tuple(sorted(t.params.items())) for n, params in earlier
                )
            ]
            return bool(victim_trials)

        wait_for(victim_running, 300, "the first search running a trial")
        procs[0].send_signal(signal.SIGKILL)
        for proc in procs[1:]:
            proc.wait(timeout=400)
    finally:
        _end(procs)
        for log in logs:
            log.close()
    outputs = [(tmp_path / f"search-{i}.log").read_text() for i in range(3)]
    assert [p.returncode for p in procs[1:]] == [0, 0], outputs
    study = _load(postgres_url, name)
    assert study is not None
    assert measured_count(StudyStore(study)) == 9, outputs  # the budget is global, and exact
    _check_finished_study(study)
    for trial in victim_trials:  # the killed search's trial: failed by a survivor, its worker gone
        after = study.trials[trial.number]
        why = (after.state, after.user_attrs.get("reason"), after.user_attrs.get("message"))
        assert after.state == optuna.trial.TrialState.FAIL, why
        assert after.user_attrs["reason"] == "interrupted"
        assert not is_alive(Owner.from_attrs(trial.user_attrs["worker"]))


def _running_under(study: optuna.Study | None, supervisor_pid: int) -> list[optuna.trial.FrozenTrial]:
    """RUNNING trials whose worker descends from `supervisor_pid` (worker -> forkserver -> it)."""
    if study is None:
        return []
    found = []
    for trial in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
        owner = Owner.from_attrs(trial.user_attrs.get("worker"))
        if owner is not None and supervisor_pid in _ancestors(owner.pid):
            found.append(trial)
    return found


def _ancestors(pid: int) -> list[int]:
    chain = []
    for _ in range(4):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rfind(")") + 2 :].split()[1])
        chain.append(pid)
    return chain


def test_a_search_with_two_workers_and_a_joining_worker_on_mariadb(tmp_path: Path, mysql_url: str) -> None:
    space = write_space(tmp_path, SPACE)
    name = f"pool-{uuid.uuid4().hex[:8]}"
    search = subprocess.Popen(
        [*_search_args(space, mysql_url, name, 5), "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    joined = None
    try:
        wait_for(
            lambda: (s := _load(mysql_url, name)) is not None and "run_config" in s.user_attrs, 120, "study"
        )
        joined = subprocess.run(
            [sys.executable, "-m", "autotune", "worker", "--study", name, "--storage", mysql_url],
            capture_output=True,
            text=True,
            timeout=400,
        )
        out, _ = search.communicate(timeout=400)
    finally:
        _end([search])
    assert search.returncode == 0, out
    assert joined is not None and joined.returncode == 0, joined.stdout + joined.stderr
    assert "2 workers share this CPU" in out
    study = _load(mysql_url, name)
    assert study is not None
    assert 5 <= measured_count(StudyStore(study)) <= 6
    _check_finished_study(study)
    pids = {Owner.from_attrs(t.user_attrs["worker"]).pid for t in study.trials if was_trained(t)}
    assert len(pids) == measured_count(StudyStore(study))  # one fresh process per measured trial
