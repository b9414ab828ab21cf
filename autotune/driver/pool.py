"""Joining a stored study as a pool member: `autotune worker --study STUDY --storage URL` on any host."""

from __future__ import annotations

from autotune.answer.decide import study_answer
from autotune.answer.race import best_trial
from autotune.driver.result import SearchResult
from autotune.driver.stopping import stop_reason
from autotune.driver.study import header
from autotune.driver.supervisor import Supervisor
from autotune.executors.forkserver import ForkserverExecutor
from autotune.logs import quiet_libraries
from autotune.plan.build import plan_from_study
from autotune.progress import LoggingReporter, Reporter
from autotune.store.owner import member_seed, this_process
from autotune.store.trials import fail_interrupted_trials, measured_count, ranked_trials


def join_study(
    study_name: str,
    storage_url: str,
    *,
    reporter: Reporter | None = None,
    workers: int | None = None,
    debug: bool = False,
    trust_remote_code: bool = False,
) -> SearchResult:
    """Measure trials of a stored study in worker processes until it holds its budget.

    The run configuration comes from the store. The budget is global: with other supervisors and
    pool members on the same study, each starts a trial only while the measured and running trials
    are fewer than the budget. This host's hardware and library versions must match the study's
    fingerprint. Baseline and finalists are the creating `autotune search`'s job.

    Raises:
        UsageError: no such study, or one measured on different hardware or libraries.
    """
    reporter = reporter or LoggingReporter()
    with quiet_libraries():
        plan, study = plan_from_study(
            study_name, storage_url, check_fingerprint=True, trust_remote_code=trust_remote_code
        )
        interrupted = fail_interrupted_trials(study)
        if interrupted:
            reporter.on_note(f"trial(s) {', '.join(map(str, interrupted))} were interrupted: marked failed")
        done_before = measured_count(study)
        target = plan.config.trials
        reporter.on_search_start(header(plan, done_before, max(0, target - done_before)))
        if done_before < target:
            # Not the creating search's sampler streams, nor another member's: from this process.
            offset = member_seed(plan.config.seed, this_process().identity)
            try:
                with ForkserverExecutor(plan, reporter, workers) as executor:
                    supervisor = Supervisor(plan, study, executor, reporter, debug=debug, seed_offset=offset)
                    supervisor.run_search(target, stop_reason(plan, study, target))
            finally:
                fail_interrupted_trials(study)
    ran = measured_count(study) - done_before
    result = SearchResult(
        study, plan.config, ranked_trials(study), best_trial(study), ran, study_answer(study)
    )
    reporter.on_search_end(result)
    return result
