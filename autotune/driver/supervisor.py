"""The supervisor: keeps an executor busy on one stored study until it holds its budget, and
measures given values (the baseline, the finalists) through the same executor.

It does not know where jobs run (`autotune.executors`). It turns a job that ended without its
trial recorded into that trial's result: the executor's reason (``killed``, ``crashed``, ``hung``,
or the job's own) written by `autotune.store.outcomes`. The search goes on either way.

The budget is global: a job is started only while the measured trials, the trials running
anywhere (other supervisors included) and this supervisor's own jobs are fewer than it, and a job
checks again right before it asks the study for a trial. Under a launcher (every rank runs this
loop, with the in-process executor) rank 0 decides each step and the other ranks follow.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from autotune.errors import AutotuneError, StoreError
from autotune.executors.base import Ended, Executor
from autotune.measure.memory_model import LadderProbe
from autotune.measure.ranks import from_rank_zero, is_rank_zero
from autotune.plan.resolved import Plan
from autotune.progress import Reporter
from autotune.records import TrialRecord, WholeRunFindings, measured_record, trial_record
from autotune.store.outcomes import DISK_FULL, STORE_LOST, TrialOutcome, fail_running_trial
from autotune.store.owner import this_process
from autotune.store.session import StudyStore
from autotune.store.trials import fail_interrupted_trials, measured_count, running_trials, trials_of_job
from autotune.trial.job import Job, JobFailed, Measured, TrialDone

# Jobs in a row that end without measuring anything (a broken environment, not a bad trial)
# after which the search stops with their error.
MAX_FAILED_STARTS = 3
RECOVER_EVERY_S = 2.0
WAIT_S = 0.5


class WorkerFailed(AutotuneError):
    """Jobs keep failing before they measure anything."""

    exit_code = 1


class MeasureFailed(RuntimeError):
    """A measurement of given values failed: its `reason` (see `autotune.store.outcomes`), and
    the message as the text."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Supervisor:
    """Runs a plan's trials and measurements through an executor (see the module docstring).

    Args:
        plan: the resolved run (its study already exists in the store).
        study: that study.
        executor: where the jobs run.
        reporter: receives the supervisor's notes and the trials it records.
        callbacks: Trainer callbacks handed to every job (they must pickle for process executors).
        debug: keep tracebacks of failed trials.
        seed_offset: added to the sampler seeds of this supervisor's jobs (pool members that join
            a study pass a random one, so that they do not repeat each other's proposals).
        workload_file: the file holding the run's workload for its jobs (`Job.workload`: the
            Python API's own Trainer pieces); None: jobs build the one the run configuration names.
    """

    def __init__(
        self,
        plan: Plan,
        study: StudyStore,
        executor: Executor,
        reporter: Reporter,
        callbacks: Sequence[Any] = (),
        debug: bool = False,
        seed_offset: int = 0,
        workload_file: str | None = None,
    ) -> None:
        self.plan = plan
        self.study = study
        self.executor = executor
        self.reporter = reporter
        self.callbacks = tuple(callbacks)
        self.debug = debug
        self.seed_offset = seed_offset
        self.workload_file = workload_file
        self.failed_starts = 0
        self.me = this_process()

    def job(self, **fields: Any) -> Job:
        """A job of this supervisor's study (the executor adds its slot and log)."""
        return Job(
            study_name=self.plan.study_name,
            storage_url=self.plan.config.storage_url,
            job_id=uuid.uuid4().hex[:12],
            env=dict(os.environ),
            callbacks=self.callbacks,
            debug=self.debug,
            supervisor=self.me,
            ddp_timeout_s=self.plan.config.ddp_timeout_s,
            workload=self.workload_file,
            **fields,
        )

    # -- measurements of given values (baseline, finalists) -------------------------------------

    def measure(
        self,
        params: dict[str, Any],
        number: int,
        verbatim: bool = False,
        window: dict[str, Any] | None = None,
    ) -> TrialRecord:
        """Measure knob values once in a job of their own and return the measurement's record
        (`window`: measurement settings replaced for this job, as `Job.window`).

        Raises:
            MeasureFailed: the measurement failed, or its process died (with the reason).
        """
        job = self.job(kind="measure", params=dict(params), number=number, verbatim=verbatim, window=window)
        return measured_record(self._run_one(job))

    def whole_run(self, params: dict[str, Any], number: int, verbatim: bool = False) -> WholeRunFindings:
        """Run knob values once as a whole run does, in a job of their own (a fresh process under
        the cap, as a trial's): each step's peak and the step that failed
        (`AutotuneTrainer.whole_run_check`).

        Raises:
            MeasureFailed: the job failed, or its process died (with the reason).
        """
        job = self.job(kind="whole_run", params=dict(params), number=number, verbatim=verbatim)
        return WholeRunFindings.from_dict(self._run_one(job))

    def batch_ladder(self, candidates: Sequence[int]) -> tuple[list[int], LadderProbe | None]:
        """Which of `candidates` (the space's larger batches) fit, by the memory estimate of a job
        of their own (on the trial device, in a process like a trial's), and the probe that
        decided one where an estimate was in doubt (None: none was).

        Raises:
            MeasureFailed: the job failed, or its process died (with the reason).
        """
        job = self.job(kind="ladder", params={"candidates": [int(b) for b in candidates]})
        found = self._run_one(job)
        probe = found.get("probe")
        return [int(b) for b in found["batch_ladder"]], LadderProbe.from_dict(probe) if probe else None

    def _run_one(self, job: Job) -> dict[str, Any]:
        """Run one job that measures (not a trial) and return what it measured."""
        self.executor.start(job)
        while True:
            for ended in self.executor.wait(1.0):
                if ended.job.job_id != job.job_id:
                    continue
                if isinstance(ended.result, Measured):
                    return dict(ended.result.values)
                failed = ended.result
                assert isinstance(failed, JobFailed)
                _raise_if_store_lost(failed)
                raise MeasureFailed(failed.reason, failed.message)

    # -- the search -----------------------------------------------------------------------------

    def run_search(self, target: int, should_stop: Callable[[], str | None]) -> None:
        """Keep the executor busy until the study holds `target` measured trials, or `should_stop`
        returns why no more trials are worth starting (then running jobs finish).

        The store is read when a job ended, and every `RECOVER_EVERY_S` otherwise (to see other
        processes' trials): not on every progress event, which would take CPU from the trials
        being measured.

        Raises:
            StoreError: the store stayed unreachable past its retry bound (the message names what
                the jobs running here lose; the caller's executor ends them).
        """
        try:
            self._run_search(target, should_stop)
        except StoreError as exc:
            running = len(self.executor.running())
            if not running:
                raise
            raise StoreError(
                f"{exc.message}; the search stopped and loses the {running} trial(s) running here "
                "(marked interrupted by the next autotune process on this study once the store is back)",
                exc.hint,
            ) from exc

    def _run_search(self, target: int, should_stop: Callable[[], str | None]) -> None:
        stopping: str | None = None
        last_look = float("-inf")
        changed = True
        while True:
            now = time.monotonic()
            if changed or now - last_look > RECOVER_EVERY_S:
                last_look = now
                step = from_rank_zero(self._decide(target, stopping, should_stop) if is_rank_zero() else None)
                kind, detail = step
                if kind in ("stop", "stop_now"):
                    stopping = detail
                    self.reporter.on_note(detail)
                    if kind == "stop_now":
                        return  # nothing to wait for (the next look would say done, seconds later)
                elif kind == "done":
                    return
                elif kind == "start":
                    for job in detail:
                        self.executor.start(job)
            changed = False
            for ended in self.executor.wait(WAIT_S):
                changed = True
                if is_rank_zero():
                    self._settle(ended)

    def _decide(
        self, target: int, stopping: str | None, should_stop: Callable[[], str | None]
    ) -> tuple[str, Any]:
        """Rank 0's next step: ``("stop", why)`` (``"stop_now"`` with nothing running),
        ``("done", None)``, ``("wait", None)``, ``("start", jobs)``."""
        self._recover()
        measured = measured_count(self.study)
        if stopping is None and measured < target:
            why = should_stop()
            if why:
                return ("stop" if self.executor.running() else "stop_now"), why
        if not self.executor.running() and (measured >= target or stopping):
            return "done", None
        if stopping is not None:
            return "wait", None
        return "start", self._new_jobs(target, measured)

    def _new_jobs(self, target: int, measured: int) -> list[Job]:
        mine = {job.job_id for job in self.executor.running()}
        elsewhere = [t for t in running_trials(self.study) if (t.owner or {}).get("job") not in mine]
        jobs: list[Job] = []
        running = len(self.executor.running())
        for index in range(running, self.executor.capacity):
            if measured + running + len(jobs) + len(elsewhere) >= target:
                break
            offset = self.seed_offset + index * 1_000_003  # a sampler stream per concurrent job
            jobs.append(self.job(kind="trial", budget=target, seed_offset=offset))
        return jobs

    def _settle(self, ended: Ended) -> None:
        """Record what a finished trial job leaves behind."""
        result = ended.result
        if isinstance(result, TrialDone):
            if result.trained:
                self.failed_starts = 0
            return
        if not isinstance(result, JobFailed):
            return
        _raise_if_store_lost(result)
        ran = trials_of_job(self.study, ended.job.job_id)
        trials = [t for t in ran if t.state == "RUNNING"]
        if ran and not trials:  # the job recorded its own trial before it ended (a DDP rank 0)
            self.failed_starts = 0
            return
        for trial in trials:
            outcome = TrialOutcome.process_ended(result.reason, result.message, ray_error=result.ray_error)
            if fail_running_trial(self.study, trial.number, outcome):
                self.reporter.on_trial_end(
                    trial_record(trial.number, trial.params, "FAIL", outcome.user_attrs(None))
                )
        if trials:
            self.failed_starts = 0
            return
        if result.reason == DISK_FULL:  # no trial to record it on, and the next worker would fail alike
            raise WorkerFailed(
                f"a worker could not start: {result.message}",
                "free space there, or set TMPDIR to a folder on a disk with room",
            )
        self.failed_starts += 1
        self.reporter.on_note(
            f"a worker ended before it measured a trial ({result.reason}): {result.message}"
        )
        if self.failed_starts >= MAX_FAILED_STARTS:
            raise WorkerFailed(
                f"{self.failed_starts} workers in a row ended before measuring a trial: {result.message}",
                "rerun with --isolation none --debug to see the error in this process",
            )

    def _recover(self) -> None:
        jobs = {job.job_id for job in self.executor.running() if job.job_id is not None}
        interrupted = fail_interrupted_trials(self.study, jobs)
        if interrupted:
            self.reporter.on_note(
                f"trial(s) {', '.join(map(str, interrupted))} were interrupted: marked failed"
            )


def _raise_if_store_lost(failed: JobFailed) -> None:
    """A job that lost the store past its retry bound ends the search as the supervisor's own
    store call would: the bound is the user's, whichever process reached it first; starting the
    next job would only wait out the outage again."""
    if failed.reason == STORE_LOST:
        raise StoreError(failed.message)
