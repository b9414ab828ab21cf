"""Every trial in its own worker process: faults are recorded results, the search goes on."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy

import autotune
from autotune.errors import SearchFailed
from autotune.store.owner import Owner, is_alive
from autotune.store.session import StudyStore
from autotune.store.trials import measured_count
from tests.helpers import FAST, Fault, study_if_there, write_space

pytestmark = pytest.mark.timeout(300)

SPACE = {"per_device_train_batch_size": [1, 2, 4, 8], "precision": ["fp32", "bf16"]}


def _run(tmp_path: Path, trials: int, **overrides: Any) -> autotune.SearchResult:
    settings: dict[str, Any] = dict(
        model="tiny-gpt2",
        space=write_space(tmp_path, SPACE),
        storage=f"sqlite:///{tmp_path / 'iso.db'}",
        study="iso",
        seq_len=16,
        trials=trials,
        measure=FAST,
        finalists=0,
        measure_baseline=False,
        whole_run_check=False,  # tests/integration/test_whole_run.py checks it
    )
    return autotune.search(**{**settings, **overrides})


def _assert_nothing_running(study: optuna.Study) -> None:
    assert not [t.number for t in study.get_trials() if t.state == optuna.trial.TrialState.RUNNING]


def test_a_worker_killed_mid_trial_is_recorded_and_the_search_completes(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'iso.db'}"
    killed: dict[str, Any] = {}
    stop = threading.Event()

    def kill_the_first_running_worker() -> None:
        # Found as a user would: the running trial's `worker` attr names its process.
        while not stop.is_set() and not killed:
            time.sleep(0.2)
            study = study_if_there(storage, "iso")
            try:
                running = study.get_trials(states=(optuna.trial.TrialState.RUNNING,)) if study else []
            except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
                continue  # SQLite busy with the search's writes: look again
            for trial in running:
                owner = Owner.from_attrs(trial.user_attrs.get("worker"))
                if owner is None or owner.pid == os.getpid() or trial.number < 1:
                    continue
                time.sleep(0.5)  # inside its training (a pre-checked trial ends in milliseconds)
                try:
                    still = study.trials[trial.number]
                except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
                    break
                if still.state == optuna.trial.TrialState.RUNNING:
                    os.kill(owner.pid, signal.SIGKILL)
                    killed.update(number=trial.number, owner=owner)
                    return

    killer = threading.Thread(target=kill_the_first_running_worker, daemon=True)
    killer.start()
    slow = autotune.MeasureSettings(settle_steps=1, measure_steps=100000, max_seconds=2.0, target_rel_ci=1e-6)
    try:
        result = _run(tmp_path, 3, measure=slow)
    finally:
        stop.set()
        killer.join(timeout=10)
    assert killed, "no worker was found running a trial"
    study = result.study.optuna_study
    trial = study.trials[killed["number"]]
    assert trial.state == optuna.trial.TrialState.FAIL
    assert trial.user_attrs["reason"] == "killed"
    assert "SIGKILL" in trial.user_attrs["message"] and "out-of-memory killer" in trial.user_attrs["message"]
    assert trial.user_attrs["trained"] is True  # a fault counts against the budget
    assert measured_count(StudyStore(study)) == 3
    _assert_nothing_running(study)
    assert not is_alive(killed["owner"])


def test_a_hung_trial_is_killed_by_the_watchdog(tmp_path: Path) -> None:
    hang = Fault("hang", {"per_device_train_batch_size": 2})
    result = _run(
        tmp_path,
        3,
        measure=autotune.MeasureSettings(**{**FAST.__dict__, "trial_timeout_s": 3.0}),
        enqueue=[{"per_device_train_batch_size": 2, "precision": "fp32"}],
        callbacks=[hang],
    )
    study = result.study.optuna_study
    hung = study.trials[0]
    assert hung.params["per_device_train_batch_size"] == 2
    assert hung.state == optuna.trial.TrialState.FAIL
    assert hung.user_attrs["reason"] == "hung"
    assert "watchdog" in hung.user_attrs["message"]
    assert measured_count(StudyStore(study)) == 3
    _assert_nothing_running(study)


@pytest.mark.parametrize(
    ("kind", "reason", "words"),
    [("segfault", "crashed", "SIGSEGV"), ("exit", "crashed", "exited with code 3")],
)
def test_a_crashing_worker_is_a_recorded_result(tmp_path: Path, kind: str, reason: str, words: str) -> None:
    result = _run(
        tmp_path,
        2,
        enqueue=[{"per_device_train_batch_size": 4, "precision": "fp32"}],
        callbacks=[Fault(kind, {"per_device_train_batch_size": 4})],
    )
    crashed = result.study.optuna_study.trials[0]
    assert crashed.state == optuna.trial.TrialState.FAIL
    assert crashed.user_attrs["reason"] == reason
    assert words in crashed.user_attrs["message"]
    assert measured_count(result.study) == 2
    assert result.best is not None and result.best.number != 0


def test_isolation_does_not_change_what_a_trial_measures(tmp_path: Path) -> None:
    """The same configuration's peak, measured after ten other trials, is within 5% of its peak as
    the first trial of a search: each worker starts from the same clean process."""
    target = {"per_device_train_batch_size": 8, "precision": "fp32", "activation_checkpointing": False}
    space = {
        **SPACE,
        "per_device_train_batch_size": [1, 2, 4, 8, 16, 32],
        "activation_checkpointing": [True, False],
    }
    others = [
        {"per_device_train_batch_size": bs, "precision": p, "activation_checkpointing": c}
        for bs in (1, 2, 4, 16, 32)
        for p, c in (("bf16", True), ("fp32", True))
    ]
    path = write_space(tmp_path, space, "wide")
    first = _run(tmp_path, 1, space=path, enqueue=[target], study="first")
    later = _run(tmp_path, 11, space=path, enqueue=[*others, target], study="later")
    alone = first.study.optuna_study.trials[0]
    eleventh = later.study.optuna_study.trials[10]
    assert alone.params == target and eleventh.params == target
    ratio = eleventh.user_attrs["peak_memory_bytes"] / alone.user_attrs["peak_memory_bytes"]
    assert 0.95 <= ratio <= 1.05, ratio


def test_in_process_isolation_still_runs_every_trial_here(tmp_path: Path) -> None:
    result = _run(tmp_path, 2, isolation="none")
    owners = {Owner.from_attrs(t.user_attrs["worker"]) for t in result.study.optuna_study.trials}
    assert {o.pid for o in owners if o is not None} == {os.getpid()}
    assert measured_count(result.study) == 2


def test_a_search_whose_every_trial_fails_the_same_way_raises_that_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No configuration measured, every trial ended by one error: the search raises it in one line
    (the store keeps the trials and the empty answer). Without a reporter, the ``autotune`` logger
    told each trial's start and end."""
    caplog.set_level(logging.INFO, logger="autotune")
    with pytest.raises(SearchFailed, match=r"^every trial failed the same way \(2 trials, error\)") as info:
        _run(tmp_path, 2, isolation="none", callbacks=[Fault("raise", {})])
    assert "RuntimeError: injected failure" in info.value.message and "\n" not in str(info.value)
    assert info.value.exit_code == 1 and info.value.reason == "error" and info.value.trials == 2
    study = optuna.load_study(study_name="iso", storage=f"sqlite:///{tmp_path / 'iso.db'}")
    assert [t.user_attrs["reason"] for t in study.trials] == ["error", "error"]
    logged = [r.getMessage() for r in caplog.records if r.name == "autotune"]
    assert any(m.startswith("search: model tiny-gpt2") for m in logged), logged
    assert any(m.startswith("trial 0: bs=") for m in logged), logged
    assert any(m.startswith("trial 1: pruned (error): RuntimeError: injected failure") for m in logged), (
        logged
    )
