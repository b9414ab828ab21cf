"""The search's study: created (or continued) with what it measures, checked on resume, and
described to the reporter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.answer.decide import decide
from autotune.answer.failure import common_failure
from autotune.answer.race import best_trial
from autotune.driver.result import SearchResult
from autotune.errors import SearchFailed
from autotune.measure.ranks import is_rank_zero
from autotune.plan.paths import stored_run_config
from autotune.plan.resolved import Plan, data_notes, study_fingerprint, trial_world_size, weights_notes
from autotune.progress import Reporter, SearchHeader
from autotune.records import read_study, write_study
from autotune.store.fingerprint import Fingerprint, check_resume
from autotune.store.session import StudyStore
from autotune.store.trials import (
    fail_interrupted_trials,
    measured_count,
    ranked_trials,
    read_trials,
)


def open_study(
    plan: Plan, reporter: Reporter, enqueue: Sequence[Mapping[str, Any]] = ()
) -> tuple[StudyStore, int, int]:
    """Create (or continue) the plan's study: describe it, check its fingerprint, fail the trials
    of dead processes, tell the reporter. Returns the study, the measured trials it holds and how
    many more the budget asks for.

    Raises:
        UsageError: the stored study was measured differently, or written by a newer autotune.
        StoreError: the study is not a throughput study (`StudyStore.create`).
    """
    study = StudyStore.create(plan.storage, plan.study_name)
    current = study_fingerprint(plan)
    stored = read_study(study).fingerprint  # a newer autotune's store is refused here
    if stored is None:
        describe_study(study, plan, current)
    else:
        for field in check_resume(plan.study_name, stored, current, plan.config.allow_mismatch):
            reporter.on_note(f"continuing although {field} differs (--allow-mismatch {field})")
    interrupted = fail_interrupted_trials(study)
    if interrupted:
        reporter.on_note(f"trial(s) {', '.join(map(str, interrupted))} were interrupted: marked failed")
    done_before = measured_count(study)
    remaining = max(0, plan.config.trials - done_before)
    reporter.on_search_start(header(plan, done_before, remaining))
    if remaining:
        for params in enqueue:
            study.enqueue(params)
    return study, done_before, remaining


def finish(study: StudyStore, config: Any, done_before: int, reporter: Reporter) -> SearchResult:
    """Decide the study's answer from its records (`autotune.answer.decide.decide`), store it
    (rank zero of a launched group), and tell the reporter the result.

    Raises:
        SearchFailed: no configuration was measured and every trial that ran failed with the same
            error (`autotune.answer.failure.common_failure`): that error, in one line.
    """
    trials = read_trials(study)
    answer = decide(read_study(study), trials)
    if is_rank_zero():
        write_study(study, answer=answer)
    failed = common_failure(trials)
    if failed is not None:
        reason, message, count = failed
        raise SearchFailed(
            f"every trial failed the same way ({count} trials, {reason}): {message}",
            f"`autotune show --study {study.study_name} --failed` lists them; --debug keeps their tracebacks",
            reason=reason,
            trials=count,
        )
    ranked = ranked_trials(study)
    result = SearchResult(
        study, config, ranked, best_trial(study), measured_count(study) - done_before, answer
    )
    reporter.on_search_end(result)
    return result


def describe_study(study: StudyStore, plan: Plan, fingerprint: Fingerprint) -> None:
    """Store what the study measures (once, at creation), for inspection, export and resume."""
    write_study(
        study,
        fingerprint=fingerprint.to_dict(),
        run_config=stored_run_config(plan.config),
        workload=plan.workload.describe(),
        space=plan.space.describe(),
        memory_cap=plan.config.memory_cap,
        base_args=plan.base_args,
        peft=plan.workload.adapter_config(),
        device=plan.hardware.to_dict(),
        not_searched=plan.not_searched,
    )


def header(plan: Plan, done_before: int, remaining: int) -> SearchHeader:
    space = plan.space
    return SearchHeader(
        model=plan.workload.name,
        task=plan.workload.task,
        seq_len=plan.workload.seq_len,
        space=f"{space.name} ({len(space.knobs)} knobs, {space.grid_size()} combinations)",
        space_notes=[*space.notes, *data_notes(plan, trial_world_size(plan.config)), *weights_notes(plan)],
        not_searched=list(plan.not_searched),
        storage=plan.config.storage_display,
        study=plan.study_name,
        budget=plan.config.trials,
        finished=done_before,
        to_run=remaining,
        device=plan.hardware.to_dict(),
        memory_cap=plan.config.memory_cap,
    )
