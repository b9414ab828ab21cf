"""A store that cannot be written, through the real CLI: a full SQLite store (SQLite's own
``SQLITE_FULL`` error, raised where the driver raises it by `tests/fixtures/store_fault`) is one line
naming the store, at once and never retried; SIGTERM ends the search within its bound whether the
store is full or gone; the trial it could not record is failed by the next open.

The fault is injected, not a real full filesystem: mounting a small one needs root (see
`tests/integration/test_store_full_tmpfs.py`, which does that where it can)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from autotune.executors.processes import descendants, wait_gone
from autotune.records import read_study
from autotune.store.session import StudyStore
from autotune.store.trials import fail_interrupted_trials
from tests.helpers import default_interrupt_signals, trial_states, wait_for, write_space

FAULT_HOOK = Path(__file__).resolve().parents[1] / "fixtures" / "store_fault"


class _Search:
    """`autotune search` on a SQLite store under `tmp_path`, its store faults switched by a file."""

    def __init__(self, tmp_path: Path, *extra: str, heartbeat_s: int = 1) -> None:
        self.tmp_path = tmp_path
        self.storage = f"sqlite:///{tmp_path / 'full.db'}"
        self.flag = tmp_path / "fault"
        self.temp = tmp_path / "tmp"
        self.temp.mkdir()
        space = write_space(tmp_path, {"per_device_train_batch_size": [1, 2, 4, 8]})
        python_path = os.pathsep.join(p for p in (str(FAULT_HOOK), os.environ.get("PYTHONPATH")) if p)
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(self.temp),
            "PYTHONPATH": python_path,
            "AUTOTUNE_TEST_STORE_FAULT": str(self.flag),
            "AUTOTUNE_HEARTBEAT_S": str(heartbeat_s),
        }
        # Each trial measures for up to 60 s (a CI target it cannot reach): the fault lands mid-trial.
        args = [sys.executable, "-m", "autotune", "search", "--model", "tiny-gpt2", "--space", space]
        args += ["--trials", "4", "--storage", self.storage, "--study", "full", "--seq-len", "16"]
        args += ["--finalists", "0", "--no-baseline", "--settle-steps", "1", "--measure-steps", "100000"]
        args += ["--max-seconds", "60", "--target-ci", "0.000001", *extra]
        self.log = open(tmp_path / "search.log", "w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            args, env=env, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=default_interrupt_signals
        )
        self.started: list[tuple[int, str]] = []

    def wait_for_a_running_trial(self) -> None:
        wait_for(
            lambda: (
                optuna.trial.TrialState.RUNNING in trial_states(self.storage, "full")
                or self.proc.poll() is not None
            ),
            timeout_s=240,
            what="a running trial",
        )
        assert self.proc.poll() is None, self.output()
        self.started = descendants(self.proc.pid)
        assert self.started

    def wait_until_measuring(self, settle_s: float = 2.0) -> None:
        """Until the running trial has its values and its owner stored and the study its memory
        probe's figure (the last of a first trial's set-up writes), then `settle_s` more: it
        trains, writing nothing until it ends but its heartbeat."""

        def set_up() -> bool:
            study = optuna.load_study(study_name="full", storage=self.storage)
            running = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
            return bool(
                running
                and running[0].params
                and "worker" in running[0].user_attrs
                and read_study(study).activation_probes
            )

        wait_for(lambda: set_up() or self.proc.poll() is not None, timeout_s=120, what="a trial set up")
        time.sleep(settle_s)
        assert self.proc.poll() is None, self.output()

    def fault(self, kind: str) -> float:
        self.flag.write_text(kind)
        return time.monotonic()

    def wait(self, timeout_s: float) -> int:
        return self.proc.wait(timeout=timeout_s)

    def output(self) -> str:
        return (self.tmp_path / "search.log").read_text()

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # by its pid: only what this test started
            self.proc.wait(timeout=30)
        self.log.close()

    def check_nothing_left(self) -> None:
        """Every process it started has ended, no temporary folder is left; with the fault gone,
        the next open of the study (what `search` and `resume` do first) leaves no RUNNING trial:
        the trial the store could not take is failed, reason interrupted (tried again)."""
        output = self.output()
        assert wait_gone(self.started, timeout_s=15), output
        assert not [p.name for p in self.temp.iterdir() if p.name.startswith("autotune-")], output
        self.flag.unlink(missing_ok=True)
        study = StudyStore.open(self.storage, "full")
        assert fail_interrupted_trials(study) == [0], output
        trials = optuna.load_study(study_name="full", storage=self.storage).trials
        assert [t.state.name for t in trials] == ["FAIL"], output
        assert trials[0].user_attrs["reason"] == "interrupted"


def _store_lines(output: str, storage: str) -> list[str]:
    """The lines naming the store, but for the header's first ("autotune study NAME in URL")."""
    return [
        line for line in output.splitlines() if storage in line and not line.startswith("autotune study ")
    ]


@pytest.mark.timeout(360)
def test_a_full_store_is_one_line_at_once_and_the_next_open_fails_its_trial(tmp_path: Path) -> None:
    search = _Search(tmp_path)
    try:
        search.wait_for_a_running_trial()
        full_since = search.fault("full")
        code = search.wait(timeout_s=120)
        took_s = time.monotonic() - full_since
    finally:
        search.end()
    output = search.output()
    print(f"full store: the search exited {code} {took_s:.1f} s after the store filled")  # pytest -s
    assert code == 1, output
    # The trial's heartbeat (every second here) hit the full store: the trial stopped at its next
    # step, and its job's line ended the search. No retry: seconds, not the 300 s retry bound.
    assert took_s < 30, output
    lines = _store_lines(output, search.storage)
    assert len(lines) == 1, output
    assert "cannot be written, its disk or database is full (database or disk is full" in lines[0]
    assert "not retried" in lines[0] and "autotune resume" in lines[0]
    assert "unreachable" not in output and "Traceback" not in output
    search.check_nothing_left()


@pytest.mark.timeout(360)
@pytest.mark.parametrize(("fault", "retry_s", "bound_s"), [("full", "300", 30.0), ("outage", "8", 8.0)])
def test_sigterm_ends_the_search_within_its_bound_when_the_store_cannot_be_written(
    tmp_path: Path, fault: str, retry_s: str, bound_s: float
) -> None:
    """The trial's heartbeat is slow here (60 s) and the fault comes once the trial trains: the
    search is still measuring when SIGTERM comes, and its clean-up (failing the trial it ended)
    meets the store it cannot write. A full store: one line naming it, at once. A store gone (an
    error that could pass): its retries end within `--store-retry-s` or 30 s, the shorter."""
    search = _Search(tmp_path, "--store-retry-s", retry_s, heartbeat_s=60)
    try:
        search.wait_for_a_running_trial()
        search.wait_until_measuring()
        search.fault(fault)
        time.sleep(1.0)  # the supervisor's loop meets the fault too (reads fail in an outage)
        signalled = time.monotonic()
        search.proc.send_signal(signal.SIGTERM)
        code = search.wait(timeout_s=120)
        took_s = time.monotonic() - signalled
    finally:
        search.end()
    output = search.output()
    print(f"{fault} store, SIGTERM: exit {code} {took_s:.1f} s after the signal (bound {bound_s:.0f} s)")
    assert code == 143, output
    assert output.rstrip().endswith("terminated"), output
    assert took_s < bound_s, f"{took_s:.1f} s\n{output}"
    lines = _store_lines(output, search.storage)
    assert len(lines) == 1, output
    said = " ".join(output[output.index(lines[0]) :].split())  # a note wraps at the terminal's width
    said = said[: said.index("terminated")]
    if fault == "full":
        assert "its disk or database is full (database or disk is full" in said, output
    else:
        assert "unreachable for" in said and "unable to open database file" in said, output
    assert said.rstrip().endswith(
        "stay RUNNING until the next autotune process on this study marks them interrupted"
    )
    search.check_nothing_left()
