"""A stored study's trials read back as records: ranked, counted against the budget, and the
RUNNING trials of processes that are gone found (and, by the processes that continue a study,
failed with their reason)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.records import TrialRecord, read_study, read_trial
from autotune.store.objective import compiles, run_facts, score
from autotune.store.outcomes import (
    INTERRUPTED,
    NOT_TRAINED,
    TrialOutcome,
    fail_running_trial,
    with_whole_run,
)
from autotune.store.owner import OWNER_ATTR, Owner, is_dead_here
from autotune.store.session import FINISHED_STATES, StudyStore

# optuna's states of `FINISHED_STATES`, for readers of optuna's own trial objects.
FINISHED = tuple(TrialState[name] for name in FINISHED_STATES)


def _reason(record: TrialRecord) -> str | None:
    if record.reason is None and record.state == "FAIL":
        return INTERRUPTED
    return record.reason


def was_trained(trial: FrozenTrial) -> bool:
    """Whether a trial counts as measured: skipped, reused, predicted and interrupted trials do not
    (an interrupted configuration is tried again)."""
    return counts_as_trained(summarize_trial(trial))


def counts_as_trained(summary: TrialRecord) -> bool:
    """`was_trained` of a trial's record as `summarize_trial` reads it (a FAIL without a reason
    read as interrupted)."""
    if summary.reason == INTERRUPTED:
        return False
    return bool(summary.trained if summary.trained is not None else summary.reason not in NOT_TRAINED)


def fail_interrupted_trials(study: StudyStore, mine: Collection[str] = ()) -> list[int]:
    """Fail every RUNNING trial whose process is gone (`orphaned_trials`), with reason
    ``interrupted``; return their numbers. Optuna would fail stale ones too, but without a reason.
    Trials of the worker jobs in `mine` are left to the caller, which knows better why they ended
    (killed, crashed, hung)."""
    failed = []
    for trial in orphaned_trials(study, mine):
        message = "its process stopped (killed or crashed) before the trial ended"
        if fail_running_trial(study, trial.number, TrialOutcome.process_ended(INTERRUPTED, message, False)):
            failed.append(trial.number)
    return failed


def orphaned_trials(study: StudyStore, mine: Collection[str] = ()) -> list[FrozenTrial]:
    """The RUNNING trials whose process is gone, read without writing. A trial whose owner (its
    ``worker`` attr) shares this process's boot and PID namespace is gone at once when that process
    is no longer alive; any other trial (another host, boot or PID namespace, or an owner record
    from before those were recorded) only when its heartbeat went stale (three intervals old): see
    `autotune.store.owner`. Trials of the worker jobs in `mine` are left out."""
    stale = study.stale_trial_ids()
    found = []
    for trial in study.frozen(("RUNNING",)):
        if (trial.user_attrs.get(OWNER_ATTR) or {}).get("job") in mine:
            continue
        owner = Owner.from_attrs(trial.user_attrs.get(OWNER_ATTR))
        if (owner is not None and is_dead_here(owner)) or trial._trial_id in stale:
            found.append(trial)
    return found


# What a read-only listing says of a trial whose owner is gone: the store still holds it RUNNING
# until a search, resume or worker of the study marks it interrupted.
OWNER_GONE = "its owner process is gone; `autotune resume` records it as interrupted"


def orphaned_records(study: StudyStore) -> list[TrialRecord]:
    """The records of `orphaned_trials`, as a listing shows them: state RUNNING, reason
    interrupted. Nothing is written."""
    return [
        replace(summary, failure=replace(summary.failure, reason=INTERRUPTED, message=OWNER_GONE))
        for summary in map(read_trial, orphaned_trials(study))
    ]


def running_trials_of(study: StudyStore, owner: Owner) -> list[TrialRecord]:
    """The records of the RUNNING trials owned by one process."""
    return [t for t in study.records(("RUNNING",)) if Owner.from_attrs(t.owner) == owner]


def trials_of_job(study: StudyStore, job_id: str | None) -> list[TrialRecord]:
    """The records of the trials a worker job ran (its ``worker.job`` attr), in any state."""
    if job_id is None:
        return []
    return [t for t in study.records() if (t.owner or {}).get("job") == job_id]


def distinct_params(study: StudyStore) -> int:
    """How many different configurations the study's finished trials hold."""
    finished = study.frozen(FINISHED_STATES)
    return len({tuple(sorted(t.params.items())) for t in finished})


def running_trials(study: StudyStore) -> list[TrialRecord]:
    """The records of the study's RUNNING trials."""
    return study.records(("RUNNING",))


def measured_count(study: StudyStore) -> int:
    """Trials that count against the study's total budget: finished trials that tried to train,
    whatever their outcome. Trials that were skipped, reused or predicted cost nothing."""
    return trained_count(study.frozen(FINISHED_STATES))


def trained_count(finished: list[FrozenTrial]) -> int:
    """How many of `finished` (finished trials) count against the budget (`was_trained`)."""
    return sum(map(counts_as_trained, _summaries(finished)))


def summarize_trial(trial: FrozenTrial) -> TrialRecord:
    """A trial's record, a FAIL without a reason read as interrupted."""
    record = read_trial(trial)
    return record.with_reason(_reason(record))


def trial_summaries(study: StudyStore, states: Collection[str] = ()) -> list[TrialRecord]:
    """`summarize_trial` of each trial of `study` in `states` (all where none are named)."""
    return [summarize_trial(t) for t in study.frozen(states)]


def ranked_trials(study: StudyStore) -> list[TrialRecord]:
    """Finished trials, best first: feasible completed ones by their score (tokens/s, or with the
    user's run length the effective rate of that run: `autotune.store.objective.score`; reused
    duplicates left out of the ranking), then the rest by number."""
    summaries = read_trials(study)
    tokens = read_study(study).train_tokens
    places = [rankable(s) for s in summaries]  # one pass: a membership test per record is quadratic
    scored = sorted(
        (s for s, ok in zip(summaries, places, strict=True) if ok), key=lambda s: -(score(s, tokens) or 0.0)
    )
    rest = sorted((s for s, ok in zip(summaries, places, strict=True) if not ok), key=lambda s: s.number)
    return scored + rest


def rankable(summary: TrialRecord) -> bool:
    """Whether a trial takes a place in the ranking: completed, measured, feasible, not reused."""
    return (
        summary.state == "COMPLETE"
        and summary.tokens_per_s is not None
        and not summary.reused
        and summary.is_feasible
    )


def read_trials(study: StudyStore) -> list[TrialRecord]:
    """The records of a study's finished trials, each with its whole-run check where it had one
    (the study keeps them: `autotune.store.outcomes.with_whole_run`)."""
    record = read_study(study)
    finished = study.frozen(FINISHED_STATES)
    return [
        with_whole_run(summary, record.whole_run_of(t.number))
        for t, summary in zip(finished, _summaries(finished), strict=True)
    ]


# The records of the trials last summarized, by the identity of their trial objects: a command or
# a search reads a study's trials many times (ranked, best, counted, the answer's facts), the
# storage hands back the same finished trial objects each time (`deepcopy=False`), and a finished
# trial never changes, so a large study is summarized once per change, not once per read.
_summarized: dict[int, tuple[FrozenTrial, TrialRecord]] = {}


def _summaries(trials: list[FrozenTrial]) -> list[TrialRecord]:
    """`summarize_trial` of each of `trials` (finished ones), reusing the last call's records."""
    global _summarized
    known, memo, out = _summarized, {}, []
    for trial in trials:
        hit = known.get(id(trial))
        record = hit[1] if hit is not None and hit[0] is trial else summarize_trial(trial)
        memo[id(trial)] = (trial, record)
        out.append(record)
    _summarized = memo
    return out


def trial_run_facts(study: StudyStore, trial: TrialRecord) -> dict[str, Any]:
    """`autotune.store.objective.run_facts` of a trial of `study`: its loss delta, its predicted run
    time and cost, or when it compiles after how many tokens that pays for itself."""
    uncompiled = next(
        (s for s in ranked_trials(study) if rankable(s) and not compiles(s)),
        None,
    )
    return run_facts(read_study(study), trial, uncompiled)
