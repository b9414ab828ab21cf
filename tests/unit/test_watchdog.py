"""The process executors' watchdog: independent of the supervisor's loop and of the store. A job is
killed as hung past its deadline even while the loop waits on the store; the time this process's
store calls spent failing does not count; a job that sent its result is never hung."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy.exc

from autotune.executors import processes
from autotune.executors.processes import ProcessExecutor, Watched
from autotune.store import retry
from autotune.store.retry import retry_transient, store_unreachable_s
from autotune.trial.job import Job, TrialDone

pytestmark = pytest.mark.timeout(60)


class FakeProcess(Watched):
    """A 'process' that lives until it is killed."""

    def __init__(self, job: Job, watchdog_s: float) -> None:
        super().__init__(job, watchdog_s)
        self.killed = threading.Event()

    def alive(self) -> bool:
        return not self.killed.is_set()

    def kill_group(self) -> None:
        self.killed.set()

    def join(self, timeout_s: float = 10.0) -> None:
        pass

    def waitables(self) -> list[Any]:
        return []

    def exit_failure(self) -> None:
        return None


class FakeExecutor(ProcessExecutor):
    def _spawn(self, job: Job) -> Watched:
        return FakeProcess(job, self.watchdog_s)


def _executor(tmp_path: Path, watchdog_s: float) -> FakeExecutor:
    measure = SimpleNamespace(trial_timeout_s=1.0)
    plan = SimpleNamespace(
        hardware=SimpleNamespace(cuda=False),
        config=SimpleNamespace(measure=measure, output_dir=str(tmp_path)),
    )
    executor = FakeExecutor(plan, reporter=None)  # type: ignore[arg-type]
    executor.watchdog_s = watchdog_s
    return executor


def _job() -> Job:
    return Job(study_name="s", storage_url="sqlite://", job_id="j", kind="trial")


def _transient() -> sqlalchemy.exc.OperationalError:
    return sqlalchemy.exc.OperationalError("SELECT 1", None, Exception("server closed the connection"))


def test_the_watchdog_thread_kills_a_hung_job_while_the_loop_is_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "WATCH_EVERY_S", 0.05)
    executor = _executor(tmp_path, watchdog_s=0.2)
    executor.start(_job())
    (worker,) = executor.active.values()
    assert isinstance(worker, FakeProcess)
    assert worker.killed.wait(20), "no watchdog ran while nobody called wait()"
    assert worker.hung
    assert executor.wait(0.01)[0].job.job_id == "j"
    assert executor.watcher is not None
    executor.watcher.join(20)
    assert not executor.watcher.is_alive()  # nothing left to watch: the thread ended
    executor.close()


def test_time_the_store_spent_failing_does_not_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    worker = FakeProcess(_job(), watchdog_s=10.0)
    now = time.monotonic()
    assert worker.overdue(now + 11)
    monkeypatch.setattr(processes, "store_unreachable_s", lambda: worker.store_wait_at_start + 5.0)
    assert not worker.overdue(now + 11)  # 5 s of it was a store outage
    assert worker.overdue(now + 16)


def test_a_job_that_sent_its_result_is_never_hung() -> None:
    worker = FakeProcess(_job(), watchdog_s=1.0)
    worker.result = TrialDone(True, 3)
    assert not worker.overdue(time.monotonic() + 1000)


def test_failing_store_calls_are_counted_as_outage_time(monkeypatch: pytest.MonkeyPatch) -> None:
    before = store_unreachable_s()
    failures = iter([_transient(), _transient()])

    def call(attempt: int) -> int:
        error = next(failures, None)
        if error is not None:
            time.sleep(0.05)
            raise error
        return attempt

    monkeypatch.setattr(retry, "FIRST_DELAY_S", 0.05)
    assert retry_transient(call, 30, "store") == 2
    spent = store_unreachable_s() - before
    assert spent >= 0.1
    assert store_unreachable_s() - before == spent  # not failing now: the clock stands still
    assert retry_transient(lambda attempt: 7, 30, "store") == 7
    assert store_unreachable_s() - before == spent
