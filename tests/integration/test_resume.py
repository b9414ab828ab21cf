"""Studies survive: kill -9 mid-trial and resume; fingerprints refuse a mismatched resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

import autotune
from autotune.errors import UsageError
from autotune.store.owner import Owner, is_alive
from autotune.store.session import StudyStore
from autotune.store.trials import measured_count
from tests.helpers import FAST_RUN, trial_states, wait_for, write_space


@pytest.mark.timeout(600)
def test_sigkill_mid_trial_then_resume(tmp_path: Path) -> None:
    space = write_space(
        tmp_path, {"per_device_train_batch_size": [1, 2, 4, 8], "precision": ["fp32", "bf16"]}
    )
    storage = f"sqlite:///{tmp_path / 'kill.db'}"
    # The default heartbeat (10 s): the killed trial is found through its dead owner, not a stale beat.
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Each trial measures for ~2 s (a CI target it cannot reach), so a kill lands mid-trial.
    args = [sys.executable, "-m", "autotune", "search", "--model", "tiny-gpt2", "--space", space]
    args += ["--trials", "4", "--storage", storage, "--study", "kill", "--seq-len", "16", "--finalists", "0"]
    args += [
        "--settle-steps",
        "1",
        "--measure-steps",
        "100000",
        "--max-seconds",
        "2",
        "--target-ci",
        "0.000001",
    ]
    args += ["--screen-ratio", "0"]  # no trial cut short: the kill lands in a full window
    args += ["--no-whole-run-check"]  # tests/integration/test_whole_run.py checks it
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: (
                optuna.trial.TrialState.COMPLETE in trial_states(storage, "kill")
                and trial_states(storage, "kill")[-1] == optuna.trial.TrialState.RUNNING
            ),
            timeout_s=180,
            what="a finished trial and a running one",
        )
        time.sleep(0.5)  # well inside the running trial's measured window
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = optuna.load_study(study_name="kill", storage=storage).trials
    completed_before = {
        t.number: (t.params, t.value) for t in before if t.state == optuna.trial.TrialState.COMPLETE
    }
    killed = [t.number for t in before if t.state == optuna.trial.TrialState.RUNNING]
    assert completed_before and len(killed) == 1
    owner = Owner.from_attrs(before[killed[0]].user_attrs["worker"])
    assert owner is not None and owner.pid != proc.pid  # the trial ran in a worker process

    # A read-only listing shows the killed trial, as interrupted, and writes nothing.
    wait_for(lambda: not is_alive(owner), timeout_s=30, what="the worker to end with its supervisor")
    shown = subprocess.run(
        [sys.executable, "-m", "autotune", "show", "--study", "kill", "--storage", storage, "--limit", "0"],
        env={**env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"Trials of kill ({len(before)})" in shown.stdout  # the finished ones and the killed one
    assert "interrupted (owner gone)" in shown.stdout
    assert f"#{killed[0]} interrupted: its owner process is gone" in shown.stdout
    unchanged = optuna.load_study(study_name="kill", storage=storage).trials[killed[0]]
    assert unchanged.state == optuna.trial.TrialState.RUNNING
    assert unchanged.user_attrs == before[killed[0]].user_attrs

    resumed = subprocess.run(  # at once: no waiting for a heartbeat to go stale
        [sys.executable, "-m", "autotune", "resume", "--study", "kill", "--storage", storage],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"trial(s) {killed[0]} were interrupted" in resumed.stdout

    study = optuna.load_study(study_name="kill", storage=storage)
    after = {t.number: t for t in study.trials}
    for number, (params, value) in completed_before.items():  # finished trials intact
        assert after[number].params == params and after[number].value == value
    interrupted = after[killed[0]]
    assert interrupted.state == optuna.trial.TrialState.FAIL
    assert interrupted.user_attrs["reason"] == "interrupted"
    assert measured_count(StudyStore(study)) == 4  # the total budget, exactly
    trained = [t for t in study.trials if t.user_attrs.get("trained") and "duplicate_of" not in t.user_attrs]
    params_trained = [tuple(sorted(t.params.items())) for t in trained]
    assert len(params_trained) == len(set(params_trained))  # no finished trial ran again
    assert not any(t.state == optuna.trial.TrialState.RUNNING for t in study.trials)
    assert not is_alive(owner)  # the worker did not outlive its supervisor


@pytest.fixture(scope="module")
def stored_study(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("fp")
    common = dict(
        model="tiny-gpt2",
        space=write_space(folder, {"per_device_train_batch_size": [1, 2]}),
        storage=f"sqlite:///{folder / 'fp.db'}",
        study="fp",
        seq_len=16,
        **FAST_RUN,
    )
    autotune.search(trials=1, **common)
    return common


def test_resume_with_another_sequence_length_is_refused(stored_study: dict) -> None:
    with pytest.raises(
        UsageError, match=r"study='fp' was measured differently \(seq_len: stored 16, now 32\)"
    ) as info:
        autotune.search(trials=2, **{**stored_study, "seq_len": 32})
    assert "new name with study=NAME" in (info.value.hint or "")  # the field: the CLI names its flag
    assert "allow_mismatch" not in (info.value.hint or "")  # not a field that may be overridden


def test_resume_with_another_cap_needs_an_explicit_allowance(stored_study: dict) -> None:
    with pytest.raises(UsageError, match="memory_cap: stored None, now '2GiB'") as info:
        autotune.search(trials=1, memory_cap="2GiB", **stored_study)
    assert "allow_mismatch=('memory_cap',)" in (info.value.hint or "")
    result = autotune.search(trials=1, memory_cap="2GiB", allow_mismatch=("memory_cap",), **stored_study)
    assert result.ran == 0  # allowed through; the budget was already spent


def test_an_unsafe_allowance_is_refused(stored_study: dict) -> None:
    with pytest.raises(UsageError, match=r"allow_mismatch=\('seq_len',\) is not allowed"):
        autotune.search(trials=1, allow_mismatch=("seq_len",), **{**stored_study, "seq_len": 32})


def test_a_larger_budget_is_no_mismatch(stored_study: dict) -> None:
    result = autotune.search(trials=2, **stored_study)
    assert result.ran == 1
