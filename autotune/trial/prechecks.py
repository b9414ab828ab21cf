"""The pre-checks of a trial, before anything is built: a combination that cannot run here, the
same parameters as a finished trial (its result is reused) or a running one, DDP without its search
for unused parameters on a model that failed that way, a configuration that needs at least the
memory of one that ran out of it, an estimate clearly over the cap, or a budget that trials started
before it hold already (another worker's). Each ends the trial with a `NotTrained` exception that
says why."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.measure.memory_model import MemoryEstimate
from autotune.measure.ranks import from_rank_zero, is_rank_zero
from autotune.plan.resolved import Plan
from autotune.records import TrialRecord
from autotune.space import precision_of
from autotune.space.knobs import combination_unavailable
from autotune.store.asked import study_of
from autotune.store.outcomes import DUPLICATE, DUPLICATE_RUNNING, OOM_PREDICTED, UNUSED_PARAMETERS_KNOWN
from autotune.store.session import FINISHED_STATES
from autotune.store.trials import counts_as_trained, trial_summaries
from autotune.trial.errors import (
    NotTrained,
    OverBudget,
    OverEstimate,
    PredictedOOM,
    Reused,
    RunningTwin,
    SkippedOnRankZero,
    Unavailable,
    UnusedParametersKnown,
)
from autotune.trial.feasibility import as_past, precheck


def agreed_precheck(check: Callable[[], None]) -> None:
    """Run `check` on rank 0 (which alone sees the study) and take its decision on every rank of a
    DDP trial, so that all skip together instead of waiting for each other."""
    skip: NotTrained | None = None
    if is_rank_zero():
        try:
            check()
        except NotTrained as exc:
            skip = exc
    decided = from_rank_zero((skip.reason, str(skip)) if skip is not None else None)
    if skip is not None:
        raise skip
    if decided is not None:
        raise SkippedOnRankZero(*decided)


def precheck_trial(
    trial: Any,
    values: Mapping[str, Any],
    plan: Plan,
    base_args: Mapping[str, Any],
    estimate: Callable[[Sequence[TrialRecord]], MemoryEstimate | None],
    budget: int | None = None,
) -> None:
    """Raise the `NotTrained` that ends `trial` before training, if any (see the module docstring).
    `estimate` makes the memory estimate from the study's finished trials (their measured peaks);
    it is called only when the cheaper checks pass. `budget`: the study's total budget of measured
    trials, where this trial's worker holds one (`Job.budget`).

    Raises:
        NotTrained: why the trial needs no training.
    """
    # A space that does not search precision trains at the base config's.
    checked = {"precision": precision_of(dict(base_args)), **values}
    blocked = combination_unavailable(checked, plan.hardware, plan.model)
    if blocked is not None:
        raise Unavailable(*blocked)
    study = study_of(trial)
    if study is None:
        return
    trials = trial_summaries(study, (*FINISHED_STATES, "RUNNING"))
    others = [t for t in trials if t.number != trial.number]
    finished = [t for t in others if t.state in FINISHED_STATES]
    running = [as_past(t) for t in others if t.state == "RUNNING"]
    if budget is not None:
        # Workers check the budget before they ask for a trial, so two can both see room for the
        # last one; of trials created concurrently, the earlier number goes on. A running trial
        # that turns out to need no training gives its place back to the next ask.
        started_before = sum(1 for t in others if t.state == "RUNNING" and t.number < trial.number)
        if sum(map(counts_as_trained, finished)) + started_before >= budget:
            raise OverBudget(budget)
    made: list[MemoryEstimate | None] = []

    def estimate_bytes() -> int | None:
        made.append(estimate(finished))
        return made[-1].total_bytes if made[-1] is not None else None

    cap = plan.cap_bytes
    skip = precheck(trial.params, [as_past(t) for t in finished], estimate_bytes, cap, running)
    if skip is None:
        return
    reason, past = skip
    if reason == DUPLICATE and past is not None:
        raise Reused(next(t for t in finished if t.number == past.number))
    if reason == OOM_PREDICTED and past is not None:
        raise PredictedOOM(past.number)
    if reason == DUPLICATE_RUNNING and past is not None:
        raise RunningTwin(past.number)
    if reason == UNUSED_PARAMETERS_KNOWN and past is not None:
        raise UnusedParametersKnown(past.number)
    made_estimate = made[-1] if made else None
    assert made_estimate is not None and cap is not None  # an estimate over the cap needs both
    raise OverEstimate(made_estimate.total_bytes, cap)
