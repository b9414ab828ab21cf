"""Running a planned search's trials: choose where jobs run, measure the baseline, keep the
executor busy until the budget is met, re-measure the finalists, check the whole run of what the
answer may hand back."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback

from autotune.driver.accounting import TimeAccount
from autotune.driver.finalists import measure_baseline, remeasure_finalists
from autotune.driver.sequential import finalists_budget_s
from autotune.driver.stopping import stop_reason
from autotune.driver.supervisor import MeasureFailed, Supervisor
from autotune.driver.twin import math_keeping_twin
from autotune.driver.wholerun import check_whole_run
from autotune.errors import StoreError
from autotune.executors.base import Executor
from autotune.executors.forkserver import ForkserverExecutor
from autotune.executors.inprocess import InProcessExecutor
from autotune.executors.torchrun import TorchrunExecutor
from autotune.measure.memory_model import LadderProbe
from autotune.measure.ranks import from_rank_zero, is_rank_zero
from autotune.plan.resolved import Plan
from autotune.progress import Reporter
from autotune.records import Baseline, read_study, trial_facts, write_study
from autotune.store.owner import member_seed, this_process
from autotune.store.retry import end_retries_within, restore_retries
from autotune.store.session import StudyStore
from autotune.store.trials import fail_interrupted_trials, measured_count
from autotune.urls import sqlite_file


def executor_for(
    plan: Plan,
    study: StudyStore,
    reporter: Reporter,
    callbacks: Sequence[Any] = (),
    debug: bool = False,
) -> Executor:
    """Where the plan's jobs run: this process (``--isolation none``), forkserver workers, torchrun
    groups (``--nproc-per-node``), or Ray actors (``--backend ray``; measurements in workers)."""
    if plan.config.isolation == "none":
        return InProcessExecutor(plan, study, reporter, callbacks, debug)
    if plan.config.backend == "ray":  # imported first: a missing Ray is said before any measurement
        from autotune.executors.ray import RayExecutor  # Ray is an optional extra

    local: Executor
    if plan.config.nproc_per_node > 1:
        local = TorchrunExecutor(plan, reporter, plan.config.workers)
    else:
        local = ForkserverExecutor(plan, reporter, plan.config.workers)
    if plan.config.backend == "ray":
        return RayExecutor(plan, study, reporter, local)
    return local


def run_trials(
    plan: Plan,
    study: StudyStore,
    budget: int,
    reporter: Reporter,
    callbacks: Sequence[TrainerCallback] = (),
    debug: bool = False,
    executor: Executor | None = None,
    workload_file: str | None = None,
) -> None:
    """Run trials until `budget` more are measured, then re-measure the best few to pick the winner
    and check its whole run (`autotune.driver.wholerun`).
    `workload_file`: where the jobs read the run's workload (`Supervisor`), None: from its configuration.

    Trials that need no training (unavailable here, duplicates, predicted out of memory) cost
    milliseconds and do not count against the budget, so trials are asked for until the budget is
    met; a sampler that keeps proposing only those is stopped after a bound (`stop_reason`).
    """
    target = measured_count(study) + budget
    ending: BaseException | None = None
    try:
        with executor or executor_for(plan, study, reporter, callbacks, debug) as running:
            supervisor = Supervisor(
                plan,
                study,
                running,
                reporter,
                callbacks,
                debug,
                seed_offset=_seed_offset(plan),
                workload_file=workload_file,
            )
            if (note := running.describe()) is not None:
                reporter.on_note(note)
            account = TimeAccount(study, slots(plan, running))
            measure = account.measuring(supervisor.measure)
            resolve_batch_ladder(plan, study, supervisor, reporter)
            # Under a launcher every rank runs this: what is read from the study is rank 0's.
            if from_rank_zero(plan.config.measure_baseline and not _baseline_stored(study)):
                with account.stage("baseline"):
                    measure_baseline(measure, plan, study, reporter)
            with account.stage("search"):
                supervisor.run_search(target, stop_reason(plan, study, target))
                try_math_keeping_twin(plan, study, supervisor, reporter)
            with account.stage("finalists"):  # FINALISTS_SHARE of the search at most
                budget_s = finalists_budget_s(time.monotonic() - account.started_s)
                remeasure_finalists(measure, plan, study, reporter, budget_s)
            with account.stage("whole_run"):  # before the answer is decided (`finish`)
                check_whole_run(supervisor.whole_run, plan, study, reporter)
            if is_rank_zero():
                account.store(study)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM: the clean-up waits out no long outage
        ending = exc
        end_retries_within()
        raise
    except BaseException as exc:
        ending = exc
        raise
    finally:
        try:
            if is_rank_zero():  # the trials of jobs the executor ended on the way out (Ctrl-C, an error)
                _fail_interrupted_on_the_way_out(study, reporter, ending)
        finally:
            if isinstance(ending, KeyboardInterrupt):
                restore_retries()


def try_math_keeping_twin(plan: Plan, study: StudyStore, supervisor: Supervisor, reporter: Reporter) -> None:
    """Where the fastest trial changes the training math and its twin that keeps it was not
    tried (`math_keeping_twin`), try that twin: one trial more, enqueued so that the next trial
    job asks for it. The answer weighs a math change against the best that keeps the math."""
    # under a launcher every rank runs this: what is read from the study, and decided, is rank 0's
    twin = from_rank_zero(math_keeping_twin(study, plan.space) if is_rank_zero() else None)
    if twin is None:
        return
    target = from_rank_zero(measured_count(study) + 1 if is_rank_zero() else None)
    should_stop = stop_reason(plan, study, target)
    if from_rank_zero(should_stop() if is_rank_zero() else None) is not None:
        return  # every combination was tried (or the sampler proposes only skips)
    reporter.on_note(twin.note())
    if is_rank_zero():
        study.enqueue(twin.params, trial_facts(twin_of=twin.of))
    supervisor.run_search(target, should_stop)


def _fail_interrupted_on_the_way_out(
    study: StudyStore, reporter: Reporter, ending: BaseException | None
) -> None:
    """Fail the trials the executor ended (`fail_interrupted_trials`). A store that cannot take
    the write (full, or unreachable past its bound) does not replace the error or the interrupt
    that ended the search: the trials stay RUNNING, and the next autotune process on the study
    marks them interrupted (their owner is dead). The store's line is said once: not again when
    it is what ended the search."""
    try:
        fail_interrupted_trials(study)
    except StoreError as exc:
        if ending is None:
            raise
        if not isinstance(ending, StoreError):
            reporter.on_note(
                f"{exc.message}: the trial(s) running here stay RUNNING until the next autotune "
                "process on this study marks them interrupted"
            )


def _baseline_stored(study: StudyStore) -> bool:
    """Whether the study holds its baseline: measured, or why it could not be (a resumed search
    does not measure it again)."""
    return read_study(study).baseline != Baseline()


def _probe_note(probe: LadderProbe) -> str:
    mib = 2**20
    verdict = "fits" if probe.fits else "does not fit"
    estimated, limit, measured = (
        n / mib for n in (probe.estimated_bytes, probe.limit_bytes, probe.measured_bytes)
    )
    return (
        f"batch ladder: batch {probe.batch} was in doubt (estimate {estimated:.0f} MiB, limit "
        f"{limit:.0f} MiB); one probe measured {measured:.0f} MiB: it {verdict}"
    )


def resolve_batch_ladder(plan: Plan, study: StudyStore, supervisor: Supervisor, reporter: Reporter) -> None:
    """Resolve the space's batch ladder (a batch list ending with ``fits``) once per study, before
    its first trial: a job estimates which larger batches fit, the study stores them
    (``batch_ladder``, which every worker's plan reads), and `plan.space` searches them. A resumed
    study keeps the ladder it stored. Under a launcher every rank runs this; rank 0's result stands.
    A ladder that cannot be estimated leaves the listed batches only, with a note. A batch whose
    estimate was in doubt was measured once (``batch_ladder_probe``: its batch, estimate, measured
    peak and the limit)."""
    candidates = plan.space.ladder_candidates()
    if not candidates:
        return
    rungs = from_rank_zero(read_study(study).batch_ladder if is_rank_zero() else None)
    if rungs is None:
        probe = None
        try:
            rungs, probe = supervisor.batch_ladder(candidates)
        except MeasureFailed as exc:
            reporter.on_note(
                f"the batch ladder could not be estimated ({exc.reason}: {exc}): listed batches only"
            )
            rungs = []
        rungs = from_rank_zero(rungs)
        if is_rank_zero():
            write_study(study, batch_ladder=rungs)
            if probe is not None:
                write_study(study, batch_ladder_probe=probe.to_dict())
                reporter.on_note(_probe_note(probe))
    plan.space = plan.space.with_ladder(rungs)
    if is_rank_zero():
        write_study(study, space=plan.space.describe())
    reporter.on_note(plan.space.notes[-1])


def slots(plan: Plan, executor: Executor) -> int:
    """Jobs that run at once, for the time breakdown: Ray's capacity is Tune's queue, and Tune runs
    one trial per GPU (or per CPU machine)."""
    if plan.config.backend == "ray":
        return max(1, plan.hardware.count) if plan.hardware.cuda else 1
    return executor.capacity


def _seed_offset(plan: Plan) -> int:
    """0 on a SQLite store, where a search runs on one host and replays exactly with its --seed;
    on a server store, where other searches and pool members may share the study, this process's
    own stream (`member_seed`): members started with one --seed never replay each other."""
    if sqlite_file(plan.config.storage_url) is not None:
        return 0
    return member_seed(plan.config.seed, this_process().identity)
