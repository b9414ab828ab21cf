"""Where a job runs, behind one small interface: the search's loop starts jobs, waits for them to
end, and reads each one's result, without knowing whether it ran in this process, a forkserver
worker, a torchrun group or a Ray actor."""

from __future__ import annotations

import abc
from dataclasses import dataclass

from autotune.trial.job import Job, JobResult


def watchdog_seconds(trial_timeout_s: float) -> float:
    """How long a job may run before it is ended as hung: the trial's own timeout (which a trial
    that still takes steps honours itself) plus a grace for start-up."""
    return trial_timeout_s + min(120.0, max(5.0, 0.25 * trial_timeout_s))


@dataclass(frozen=True)
class Ended:
    """A job that ended, and its result: the one it sent, or a `JobFailed` that says how its
    process ended (``killed``, ``crashed``, ``hung``) when it sent none or died after."""

    job: Job
    result: JobResult


class Executor(abc.ABC):
    """Runs jobs somewhere, up to `capacity` at once.

    A job's progress events go to the reporter the executor was made with. Every job is bounded:
    an executor ends a job that runs past its watchdog and reports it ``hung``.
    """

    capacity: int = 1

    def describe(self) -> str | None:
        """A line for the user about where jobs run, or None."""
        return None

    @abc.abstractmethod
    def start(self, job: Job) -> None:
        """Start `job` (its `job_id` set); fewer than `capacity` jobs are running."""

    @abc.abstractmethod
    def wait(self, timeout_s: float) -> list[Ended]:
        """Wait up to about `timeout_s` for jobs to end (handing on their events meanwhile) and
        return those that ended; an executor whose jobs run in this process returns when they
        are done."""

    @abc.abstractmethod
    def running(self) -> list[Job]:
        """The jobs started and not yet returned by `wait`."""

    @abc.abstractmethod
    def close(self) -> None:
        """End every running job and release what the executor holds. Safe to call twice."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
