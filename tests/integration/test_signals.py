"""Signals end a search cleanly: SIGTERM (as `timeout` sends it) like Ctrl-C, and Ctrl-C of a DDP
search whose ranks torchrun starts in sessions of their own. Afterwards nothing of the search is
left: no RUNNING trial, no process it started, no temporary folder."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.executors.processes import descendants, wait_gone
from autotune.executors.torchrun import MAX_SOCKET_PATH, events_socket
from tests.helpers import default_interrupt_signals, trial_states, wait_for, write_space


def _ignores(pid: int, number: signal.Signals) -> bool:
    """Whether process `pid` ignores signal `number` (its SigIgn mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (number - 1) & 1)
    return False


def _interrupt_mid_trial(tmp_path: Path, number: signal.Signals, *extra: str) -> tuple[int, str, str]:
    """Start `autotune search` with its temporary folder under `tmp_path`, send it `number` while
    a trial runs, check that nothing is left behind; its exit code, output and storage URL."""
    space = write_space(tmp_path, {"per_device_train_batch_size": [1, 2, 4, 8]})
    storage = f"sqlite:///{tmp_path / 'signal.db'}"
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(temp)}
    # Each trial measures for up to 60 s (a CI target it cannot reach): the signal lands mid-trial.
    args = [sys.executable, "-m", "autotune", "search", "--model", "tiny-gpt2", "--space", space]
    args += ["--trials", "4", "--storage", storage, "--study", "sig", "--seq-len", "16", "--finalists", "0"]
    args += ["--no-baseline", "--settle-steps", "1", "--measure-steps", "100000", "--max-seconds", "60"]
    args += ["--target-ci", "0.000001", *extra]
    log = open(tmp_path / "search.log", "w+")  # noqa: SIM115
    # As a shell starts it: SIGINT and SIGTERM at their defaults, whatever this test process inherited
    # or an earlier test left (an ignored signal is inherited across exec, and autotune respects it).
    proc = subprocess.Popen(
        args, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=default_interrupt_signals
    )
    try:
        wait_for(
            lambda: (
                optuna.trial.TrialState.RUNNING in trial_states(storage, "sig") or proc.poll() is not None
            ),
            timeout_s=240,
            what="a running trial",
        )
        assert proc.poll() is None, (tmp_path / "search.log").read_text()
        started = descendants(proc.pid)  # workers, torchrun and its ranks, the forkserver
        assert started
        assert not _ignores(proc.pid, number), f"the search ignores {number.name}"
        proc.send_signal(number)
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
    output = (tmp_path / "search.log").read_text()
    # Everything it started has ended (the forkserver leaves once its parent is gone).
    assert wait_gone(started, timeout_s=15), output
    study = optuna.load_study(study_name="sig", storage=storage)
    assert not [t.number for t in study.trials if t.state == optuna.trial.TrialState.RUNNING], output
    interrupted = study.trials[-1]
    assert interrupted.state == optuna.trial.TrialState.FAIL
    assert interrupted.user_attrs["reason"] == "interrupted"
    assert not [p.name for p in temp.iterdir() if p.name.startswith("autotune-")]
    return code, output, storage


@pytest.mark.timeout(420)
def test_sigterm_mid_trial_ends_the_search_as_ctrl_c_does(tmp_path: Path) -> None:
    code, output, _ = _interrupt_mid_trial(tmp_path, signal.SIGTERM)
    assert code == 143, output
    assert output.rstrip().endswith("terminated")


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_ctrl_c_of_a_ddp_search_ends_every_rank(tmp_path: Path) -> None:
    code, output, _ = _interrupt_mid_trial(tmp_path, signal.SIGINT, "--nproc-per-node", "2")
    assert code == 130, output
    assert output.rstrip().endswith("interrupted")


def test_a_deep_folder_gets_a_short_events_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path, private = events_socket(str(deep), "job-0123456789ab.sock")
    try:
        assert private is not None and path.startswith(private)
        assert len(os.fsencode(path)) <= MAX_SOCKET_PATH
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)  # the kernel takes it
    finally:
        if private is not None:
            import shutil

            shutil.rmtree(private)
    short, none = events_socket(str(tmp_path), "job.sock")
    assert (short, none) == (str(tmp_path / "job.sock"), None)


def test_a_trial_is_created_with_its_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The owner is in the very transaction that creates a trial, so a process killed at any moment
    after (before its sampler even proposed values) leaves a trial its supervisor can fail. Run as a
    worker runs a job (its plan and store rebuilt from the study), here in this process."""
    import autotune
    from autotune.progress import Reporter
    from autotune.store.rdb import RetryingRDBStorage
    from autotune.trial.entry import run_job
    from autotune.trial.job import Job, TrialDone
    from tests.helpers import IN_PROCESS

    created: list[dict[str, object]] = []
    original = RetryingRDBStorage._create_trial_once

    def recording(self: RetryingRDBStorage, study_id: int, template: object, *args: object) -> object:
        created.append(dict(template.user_attrs))  # type: ignore[attr-defined]
        return original(self, study_id, template, *args)  # type: ignore[arg-type]

    space = write_space(tmp_path, {"per_device_train_batch_size": [1, 2]})
    storage = f"sqlite:///{tmp_path / 'o.db'}"
    autotune.search(
        model="tiny-gpt2", space=space, trials=1, storage=storage, seq_len=16, study="o", **IN_PROCESS
    )
    monkeypatch.setattr(RetryingRDBStorage, "_create_trial_once", recording)
    done = run_job(Job(study_name="o", storage_url=storage, job_id="job-1", budget=2), Reporter())
    assert isinstance(done, TrialDone) and done.trained
    assert created and created[0]["worker"]["job"] == "job-1"  # type: ignore[index]
    assert created[0]["worker"]["pid"] == os.getpid()  # type: ignore[index]
