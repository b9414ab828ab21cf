"""A job whose process lost the store past its retry bound ends the search with that one line,
exactly as the supervisor's own store call past the bound would; any other job that failed
before measuring is a note, and the search goes on."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from autotune.driver.supervisor import MeasureFailed, Supervisor, WorkerFailed
from autotune.errors import StoreError
from autotune.executors.base import Ended, Executor
from autotune.progress import Reporter
from autotune.store.outcomes import DISK_FULL, ERROR, STORE_LOST
from autotune.store.retry import unreachable
from autotune.store.session import StudyStore
from autotune.trial.errors import failure_reason, one_line
from autotune.trial.job import Job, JobFailed, JobResult

pytestmark = pytest.mark.timeout(60)


class _Notes(Reporter):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def on_note(self, text: str) -> None:
        self.notes.append(text)


class _EndsWith(Executor):
    """Every job it starts ends at the next wait with `result`."""

    def __init__(self, result: JobResult) -> None:
        self.result = result
        self.jobs: list[Job] = []
        self.started = 0

    def start(self, job: Job) -> None:
        self.jobs.append(job)
        self.started += 1

    def wait(self, timeout_s: float) -> list[Ended]:
        ended, self.jobs = self.jobs, []
        return [Ended(job, self.result) for job in ended]

    def running(self) -> list[Job]:
        return list(self.jobs)

    def close(self) -> None:
        self.jobs = []


def _supervisor(tmp_path: Path, result: JobResult) -> tuple[Supervisor, _EndsWith, _Notes]:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(storage=url, study_name="s")
    plan: Any = SimpleNamespace(study_name="s", config=SimpleNamespace(storage_url=url, ddp_timeout_s=60.0))
    executor = _EndsWith(result)
    notes = _Notes()
    return Supervisor(plan, StudyStore(study), executor, notes), executor, notes


def _lost() -> str:
    error = unreachable("postgresql://u@db/x", 300.0, ConnectionError("server closed the connection"), None)
    assert failure_reason(error) == STORE_LOST
    return one_line(error)  # what a worker sends (`serve_job`)


def test_a_worker_that_lost_the_store_stops_the_search_with_its_line(tmp_path: Path) -> None:
    supervisor, executor, notes = _supervisor(tmp_path, JobFailed(STORE_LOST, _lost()))
    with pytest.raises(StoreError) as raised:
        supervisor.run_search(3, lambda: None)
    line = str(raised.value)
    assert line.startswith("store postgresql://u@db/x unreachable for 300 s (server closed the connection)")
    assert "--store-retry-s" in line and "\n" not in line
    assert executor.started == 1  # no second job waited the outage out again
    assert not any("ended before it measured" in note for note in notes.notes)


def test_a_measurement_that_lost_the_store_is_a_store_error_not_a_failed_measurement(
    tmp_path: Path,
) -> None:
    supervisor, _, _ = _supervisor(tmp_path, JobFailed(STORE_LOST, _lost()))
    with pytest.raises(StoreError, match="unreachable for 300 s"):
        supervisor.measure({"per_device_train_batch_size": 8}, number=-1)


def test_other_failures_before_a_trial_are_notes_until_they_repeat(tmp_path: Path) -> None:
    supervisor, executor, notes = _supervisor(tmp_path, JobFailed(ERROR, "RuntimeError: boom"))
    with pytest.raises(WorkerFailed, match="3 workers in a row ended before measuring a trial: RuntimeError"):
        supervisor.run_search(3, lambda: None)
    assert executor.started == 3
    assert sum("ended before it measured a trial (error)" in note for note in notes.notes) == 3
    with pytest.raises(MeasureFailed, match="boom"):
        supervisor.measure({"per_device_train_batch_size": 8}, number=-1)


class _CountsWaits(_EndsWith):
    def __init__(self, result: JobResult) -> None:
        super().__init__(result)
        self.waits = 0

    def wait(self, timeout_s: float) -> list[Ended]:
        self.waits += 1
        return super().wait(timeout_s)


def test_a_stop_with_nothing_running_ends_the_search_without_waiting(tmp_path: Path) -> None:
    """Every combination tried (or any stop) with no job running: the search ends at once. It used
    to wait for its next look (2 s): `resume` of a finished study of 10,000 trials spent it idle."""
    supervisor, _, notes = _supervisor(tmp_path, JobFailed(ERROR, "unused"))
    executor = _CountsWaits(JobFailed(ERROR, "unused"))
    supervisor.executor = executor
    supervisor.run_search(3, lambda: "stopped: all 4 combinations of the space were tried")
    assert executor.waits == 0 and executor.started == 0
    assert notes.notes == ["stopped: all 4 combinations of the space were tried"]


def test_a_worker_that_found_the_disk_full_before_its_trial_ends_the_search_with_one_line(
    tmp_path: Path,
) -> None:
    """No trial to record it on (its scratch folder could not be made), and every next worker would
    fail alike: the search ends at the first, naming the place, not after three."""
    import errno

    from autotune.trial.entry import job_failure

    scratch = tmp_path / "autotune-worker-x"
    failed = job_failure(OSError(errno.ENOSPC, "No space left on device", str(scratch)))
    assert failed.reason == DISK_FULL
    assert failed.message.startswith(f"disk full at {scratch} (")
    supervisor, executor, _ = _supervisor(tmp_path, failed)
    with pytest.raises(WorkerFailed) as raised:
        supervisor.run_search(3, lambda: None)
    assert str(raised.value).startswith(f"a worker could not start: disk full at {scratch}")
    assert executor.started == 1
