"""Running one job in this process: whatever process that is (a forkserver worker, a rank of a
torchrun group, a Ray actor, or the search's own process with ``--isolation none``).

A ``trial`` job loads the study, rebuilds the run from the configuration stored with it (so a
process on another host needs nothing but the study's name and store; a job of `autotune.tune`
also reads the user's own Trainer pieces from the file its supervisor wrote), builds the trial
`Trainer` and runs `Trainer.hyperparameter_search(backend="optuna")` on the shared study until it
has measured one trial. Pre-checked trials that train nothing (unavailable, duplicates, predicted
out of memory) cost milliseconds and may come first. A ``measure`` job instead measures given knob
values once (the baseline, a finalist); a ``whole_run`` job runs them once as a whole run does
(`autotune.trial.whole_run_steps`).

`serve_job` is what a fresh trial process does with its job: run it and send back its messages.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from autotune.disk import disk_full_line
from autotune.logs import quiet_libraries
from autotune.measure.peak import frozen_heap
from autotune.measure.ranks import from_rank_zero, is_rank_zero
from autotune.plan.build import plan_from_study
from autotune.plan.resolved import Plan
from autotune.progress import Reporter
from autotune.records import trial_facts
from autotune.scratch import temporary_folder
from autotune.store.asked import TrialPruned
from autotune.store.outcomes import DISK_FULL, DUPLICATE_RUNNING
from autotune.store.rdb import RetryingRDBStorage
from autotune.store.sampler import search_sampler
from autotune.store.session import StudyStore
from autotune.store.trials import (
    counts_as_trained,
    distinct_params,
    measured_count,
    running_trials,
    trial_summaries,
)
from autotune.trial.compile_cache import shared_compile_cache, study_compile_cache
from autotune.trial.compose import build_trainer
from autotune.trial.errors import failure_reason, one_line
from autotune.trial.job import Event, Job, JobFailed, JobResult, Measured, TrialDone
from autotune.trial.trainer import AutotuneTrainer
from autotune.workloads.user import load as load_workload

# Pre-checked trials in a row after which a trial job gives up finding one to train.
MAX_SKIPS = 50

Send = Callable[[Any], None]


class MessageReporter(Reporter):
    """Sends every progress event as an `Event` (to the supervisor, which hands it to its own
    reporter). A supervisor that is gone is nothing to tell."""

    def __init__(self, send: Send) -> None:
        self.send = send

    def _send(self, name: str, *args: Any) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.send(Event(name, args))

    def on_trial_start(self, number: int, params: dict[str, Any]) -> None:
        self._send("on_trial_start", number, params)

    def on_step(self, phase: str, step: int, step_s: float) -> None:
        self._send("on_step", phase, step, step_s)

    def on_trial_end(self, trial: Any) -> None:
        self._send("on_trial_end", trial)

    def on_note(self, text: str) -> None:
        self._send("on_note", text)


def serve_job(
    job: Job,
    send: Send | None,
    on_failure: Callable[[JobFailed], JobFailed] | None = None,
    setup: Callable[[], Any] | None = None,
) -> None:
    """Run `job` in this fresh process and send its result (`send`: None on ranks that do not
    talk to the supervisor). A job that raises (in `setup` too) sends `JobFailed` (as `on_failure`
    returns it, having noted it) and ends the process with exit code 1 at once, its traceback in
    the log."""
    reporter: Reporter = MessageReporter(send) if send is not None else Reporter()
    try:
        if setup is not None:
            setup()
        result = run_job(job, reporter)
    except BaseException as exc:
        failed = job_failure(exc)
        if on_failure is not None:
            failed = on_failure(failed)
        if send is not None:
            with contextlib.suppress(OSError, ValueError):
                send(failed)
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    if send is not None:
        send(result)


def job_failure(exc: BaseException) -> JobFailed:
    """What a job that raised sends: its reason and one line; a full disk (its scratch folder
    could not be made, say) names the place and the space left there."""
    reason = failure_reason(exc)
    return JobFailed(reason, disk_full_line(exc, {}) if reason == DISK_FULL else one_line(exc))


def run_job(job: Job, reporter: Reporter, scratch_in: str | None = None) -> JobResult:
    """Run a job in a process of its own: the plan comes from the study's stored configuration.

    Args:
        job: the job.
        reporter: receives the job's progress events.
        scratch_in: where the scratch folder goes when the run configuration names no output
            folder (default: next to the job's log, in the supervisor's folder, which it removes
            even when this process was killed).

    Raises:
        Exception: whatever the measurement raised (a ``measure`` job), or the study's store.
    """
    started_s = time.perf_counter()
    with quiet_libraries():
        # The Python API's own Trainer pieces, as the supervisor wrote them (no configuration names them).
        workload = load_workload(job.workload) if job.workload else None
        # The supervisor created and checked the store's schema: do not load its migrations again.
        plan, study = plan_from_study(
            job.study_name, job.storage_url, job.check_fingerprint, existing=True, workload=workload
        )
        folder = plan.config.output_dir or scratch_in
        if folder is None and job.log_path:
            folder = os.path.dirname(job.log_path)
        with (
            shared_compile_cache(study_compile_cache(plan)),  # before anything compiles here
            temporary_folder("autotune-worker-", folder) as scratch,
        ):
            trainer = build_trainer(plan, scratch, reporter, job.callbacks, job.debug)
            with frozen_heap():
                return run_on(trainer, plan, study, job, started_s)


def run_on(
    trainer: AutotuneTrainer, plan: Plan, study: StudyStore, job: Job, started_s: float | None = None
) -> JobResult:
    """Run a job on a Trainer already built for `plan` (a fresh process's, or the in-process
    executor's own), inside the caller's `frozen_heap`. `started_s` (`time.perf_counter`): when
    this process took up the job, from which the trial's set-up is counted (default: now)."""
    trainer.job_id = job.job_id
    storage = RetryingRDBStorage.of(plan.storage)
    if storage is not None:  # the owner lands with the trial it creates, in the same transaction
        storage.stamp_new_trials(trial_facts(owner=trainer.owner_attrs()))
    trainer.measurement.job_started_s = time.perf_counter() if started_s is None else started_s
    if job.kind == "measure":
        measured = trainer.measure_config(job.params, job.number, verbatim=job.verbatim, window=job.window)
        return Measured(dict(measured))
    if job.kind == "whole_run":
        return Measured(trainer.whole_run_check(job.params, job.number, verbatim=job.verbatim).to_dict())
    if job.kind == "ladder":
        rungs, probe = trainer.batch_ladder(job.params["candidates"])
        return Measured({"batch_ladder": rungs, "probe": probe.to_dict() if probe is not None else None})
    return one_trial(trainer, plan, study, job)


def one_trial(trainer: Any, plan: Plan, study: StudyStore, job: Job) -> TrialDone:
    """Ask the study for trials until one is trained; return which (or why none was).

    In a DDP trial only rank 0 asks the study (the Trainer broadcasts each trial's values); every
    decision to go on or stop is rank 0's, broadcast, so all ranks run the same trials."""
    collided = 0  # proposals that another worker was already training
    trainer.trial_budget = job.budget
    for _ in range(MAX_SKIPS):
        done: TrialDone | None = None
        if is_rank_zero():
            if measured_count(study) + len(running_trials(study)) >= job.budget:
                done = TrialDone(False, why="budget")
            elif distinct_params(study) >= plan.space.grid_size():
                done = TrialDone(False, why="exhausted")
        done = from_rank_zero(done)
        if done is not None:
            return done
        # Concurrent workers must not all draw the sampler's same next proposal: each slot has its
        # own stream, and a worker whose proposal collided with a running one leaves the shared one.
        seed = plan.config.seed + job.seed_offset + study.count()
        seed += collided * (os.getpid() % 65_521)
        # On ranks other than 0 a skipped or failed trial leaves the Trainer's loop as TrialPruned.
        with contextlib.suppress(TrialPruned):
            hyperparameter_search(trainer, plan, 1, seed)
        if is_rank_zero():
            owner = trainer.owner_attrs()
            mine = [t for t in trial_summaries(study) if t.owner == owner]
            done = TrialDone(True, mine[-1].number) if mine and counts_as_trained(mine[-1]) else None
            collided += bool(mine and mine[-1].reason == DUPLICATE_RUNNING)
        done = from_rank_zero(done)
        if done is not None:
            return done
    return TrialDone(False, why="skips")


def hyperparameter_search(trainer: Any, plan: Plan, n_trials: int, seed: int) -> None:
    """Run `n_trials` trials through the Trainer's own optuna search on the plan's study."""
    try:
        trainer.hyperparameter_search(
            hp_space=plan.space.hp_space,
            n_trials=n_trials,
            direction="maximize",
            backend="optuna",
            storage=plan.storage,
            study_name=plan.study_name,
            load_if_exists=True,
            # Seeded by the trials already stored, so a resumed study (or the next round) does
            # not replay the random start-up suggestions of the first.
            # constant_liar: trials running elsewhere (other workers) count as bad guesses, so
            # concurrent proposals spread out instead of repeating a running one.
            sampler=search_sampler(seed),
        )
    except ValueError:
        # The Trainer asks the study for its best trial at the end, which raises when no trial
        # completed; every trial is already stored with its reason, so that is a result too.
        if StudyStore.load(plan.storage, plan.study_name).count(("COMPLETE",)):
            raise
