"""Measuring given values around the search: the baseline before it, the finalists after it.

The best few trials and the baseline are re-measured in rounds, each in a rotated order (a
balanced Latin square, `autotune.measure.rounds.round_order`), the baseline twice in each (an A/A
pair). Every measurement of the rounds enters one model of their noise
(`autotune.measure.rounds.fit_rounds`: contestant, round and position effects, the noise pooled
over all of them, disturbed windows left out and measured again, the A/A pair as its check), and
every question the answer asks is read from it: does the leader beat the defaults, is it ahead of
the runner-up, does a change of the training math gain enough over keeping it.

The rounds are sequential: after the rounds asked for, the contestants of a question still open
are measured again, round after round, while the finalists' budget (`FINALISTS_SHARE` of the
search, `autotune.driver.sequential`) could still decide it, and no longer once it is decided.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from autotune.answer.choices import same_as_baseline
from autotune.driver.questions import contestant_name, decided_out
from autotune.driver.sequential import (
    BUDGET_RESERVE,
    Rounds,
    first_look,
    fitting,
    measurement_cost,
    next_round,
    pace_of,
    planned_rounds,
    round_window,
    rounds_paid,
    sized_rounds,
    warming_window,
    window_seconds,
    within_budget,
)
from autotune.measure.ranks import distributed, from_rank_zero, is_rank_zero
from autotune.measure.rounds import round_order
from autotune.plan.resolved import Plan, baseline_values
from autotune.progress import Reporter, describe_params
from autotune.records import (
    BASELINE,
    BASELINE_AGAIN,
    Baseline,
    TrialRecord,
    read_study,
    trial_attrs,
    write_study,
)
from autotune.store.objective import score
from autotune.store.semantics import record_changes
from autotune.store.session import StudyStore
from autotune.store.trials import ranked_trials

Measure = Callable[..., TrialRecord]  # (params, number, verbatim=..., window=...) -> its record


def measure_baseline(measure: Measure, plan: Plan, study: StudyStore, reporter: Reporter) -> None:
    """Measure the baseline once per study, before the search: the speedup is stated against it,
    and the trial lines and screening read against it, so it is measured warm, as a trial is: a
    first measurement in a fresh worker warms what the first process of a search pays for (the
    page cache of the model and data, the allocator's arenas, the forkserver's first fork), and
    the second is the one stored."""
    values = baseline_values(plan)
    reporter.on_note(f"measuring the baseline: {describe_params(values)}")
    try:
        warming = measure(values, -1, verbatim=True, window=warming_window(plan.config.measure))
        measured = measure(values, -1, verbatim=True)
    except Exception as exc:  # a baseline that fails is a fact to report, not a reason to stop
        if distributed():
            raise  # unless one rank alone failed and the others wait for it: end the group
        write_study(study, baseline=Baseline(params=values, error=f"{type(exc).__name__}: {exc}"[:300]))
        reporter.on_note(f"the baseline failed: {type(exc).__name__}: {exc}"[:300])
        return
    if not is_rank_zero():
        return
    # what its loss parity and its predicted run time are judged from, too
    write_study(study, baseline=Baseline.from_attrs({**trial_attrs(measured), "params": values}))
    peak_mib = (measured.peak_memory_bytes or 0) / 2**20
    first = warming.tokens_per_s or 0.0
    reporter.on_note(
        f"baseline: {(measured.tokens_per_s or 0.0) / 1000:.1f}k tok/s, peak {peak_mib:.0f} MiB "
        f"(a first, warming measurement read {first / 1000:.1f}k)"
    )


def remeasure_finalists(
    measure: Measure,
    plan: Plan,
    study: StudyStore,
    reporter: Reporter,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Re-measure the best few trials and the baseline in rotated rounds (see the module
    docstring) and store the rounds with the study (``finalists``), from which the answer is
    decided (`autotune.answer.decide`).

    Args:
        budget_s: the finalists' wall seconds at most (None: `MAX_ROUNDS` alone bounds them),
            counted from this call, `BUDGET_RESERVE` of it kept back. The finalists and rounds are
            chosen to fit it: fewer finalists where the rounds asked for would not, and no round
            that the time left would not pay for.
        clock: the seconds the budget is counted in (a test's fake clock).
    """
    began = clock()  # the budget counts from here: choosing the finalists is part of what it pays
    if budget_s is not None:
        budget_s *= 1 - BUDGET_RESERVE  # for what the rounds do not time, and their costs' spread
    record = read_study(study)
    finalists = choose_finalists(study, plan.config.finalists)
    baseline = record.baseline
    contestants: dict[int, tuple[dict[str, Any], bool]] = {f.number: (f.params, False) for f in finalists}
    if baseline.measured and finalists:
        contestants[BASELINE] = (baseline.params, True)
        contestants[BASELINE_AGAIN] = (baseline.params, True)
    contestants = from_rank_zero(contestants)  # every rank of a launched group measures the same
    if len(contestants) < 2:
        return
    first_rounds = plan.config.finalist_rounds
    settings = plan.config.measure
    paces = {f.number: pace_of(f, settings) for f in finalists}
    paces[BASELINE] = paces[BASELINE_AGAIN] = pace_of(baseline.as_trial(), settings)
    predicted = {n: pace.cost(settings) for n, pace in paces.items()}
    # the trials that keep the training math; when the best finalist changes it, the best of them
    # stays in the rounds: the answer hands the math change back only when it measurably beats
    # that one (`MATH_GAIN`)
    keeping = {f.number for f in finalists if not record_changes(record, f)}
    keeper = next((f.number for f in finalists if f.number in keeping), None)
    leader_changes = bool(finalists) and finalists[0].number not in keeping
    keep = {keeper} if leader_changes and keeper is not None else set()
    contestants = fitting(contestants, predicted, first_rounds, budget_s, reporter, keep=keep)
    if len(contestants) < 2:
        return  # the budget left one: nothing the rounds could compare it with
    max_rounds = planned_rounds(contestants, predicted, first_rounds, budget_s)
    keeping &= set(contestants)
    tokens = record.train_tokens  # with the user's run length, scores are the run's effective rate
    rounds = Rounds(contestants, looks=max_rounds - first_rounds + 1)
    named = ", ".join(contestant_name(n) for n in contestants if n != BASELINE_AGAIN)
    twice = " (the baseline twice in each)" if BASELINE_AGAIN in contestants else ""
    reporter.on_note(f"re-measuring {named} in {first_rounds} rotated rounds{twice}")
    sized = sized_rounds(first_rounds, contestants, paces, settings, budget_s)
    measured_now = list(contestants)
    round_number = 0
    while round_number < max_rounds:
        round_number += 1
        left = None if budget_s is None else budget_s - (clock() - began)
        if left is not None and round_number > 1:
            affordable = within_budget(measured_now, rounds, predicted, left)
            if affordable is None:
                reporter.on_note(
                    f"the finalists' budget ({budget_s:.0f} s) is spent: no round {round_number}"
                )
                if round_number <= first_rounds:
                    rounds.looks = 1  # the rounds end before their first look: it is their only one
                break
            measured_now = affordable
        # the first rounds' windows leave the budget room for the rounds a decision needs (two at
        # least, three where the least windows pay for them); a later round's may share what is left
        paying = max(1, sized - round_number + 1)
        per = None if left is None else window_seconds(left / paying, measured_now, paces)
        for position, number in enumerate(round_order(measured_now, round_number)):
            params, verbatim = contestants[number]
            window = round_window(settings, paces[number], rounds.fit, per)
            started = clock()
            try:
                measured = measure(params, number, verbatim=verbatim, window=window)
            except Exception as exc:  # a finalist that fails now is reported, not fatal
                if distributed():
                    raise  # unless one rank alone failed and the others wait for it
                reporter.on_remeasure(number, round_number, None, f"{type(exc).__name__}: {exc}")
                continue
            rounds.costs.setdefault(number, []).append(clock() - started)
            rounds.add(number, round_number, position, measured, score(measured, tokens) or 0.0)
            reporter.on_remeasure(number, round_number, measured.tokens_per_s, None)
        if round_number == first_rounds and budget_s is not None:
            # the rounds the budget pays for, by what the rounds asked for cost (a later round's
            # windows are sized from the rounds' noise, as round 2's were from round 1's), not by
            # their predictions: fixed now, before the first look at the rounds may end them
            costs = {n: measurement_cost(n, rounds, predicted) for n in contestants}
            left = budget_s - (clock() - began)
            max_rounds = from_rank_zero(
                rounds_paid(round_number, measured_now, costs, left) if is_rank_zero() else None
            )
            if (looked := first_look(first_rounds, max_rounds)) != first_rounds:
                first_rounds = looked
                reporter.on_note(
                    f"the budget pays for {looked} rounds: they are looked at once, after the last"
                )
            rounds.looks = max_rounds - first_rounds + 1
        rounds.look = max(1, round_number - first_rounds + 1)
        fit = from_rank_zero(rounds.refit() if is_rank_zero() else None)
        rounds.fit = fit
        if fit is None:
            if round_number >= max(first_rounds, 2) + 2:
                break  # nothing measured the rounds could fit
            continue
        out = from_rank_zero(
            [n for n in decided_out(fit, keeping) if n in measured_now] if is_rank_zero() else []
        )
        if out:
            measured_now = [n for n in measured_now if n not in out]
            why = ", ".join(f"trial {n}" for n in out)
            reporter.on_note(f"after {round_number} rounds {why} measured slower than the leader: out")
        if round_number < first_rounds:
            continue
        left = None if budget_s is None else budget_s - (clock() - began)
        plan_next = from_rank_zero(
            next_round(rounds, fit, keeping, max_rounds, round_number, left, predicted)
            if is_rank_zero()
            else None
        )
        if plan_next is None:
            break
        measured_now, why = plan_next
        reporter.on_note(f"after {round_number} rounds {why}: one more round of those")
    if is_rank_zero() and rounds.scores:
        _store(study, rounds)


def _store(study: StudyStore, rounds: Rounds) -> None:
    """Write the rounds (``finalists``) and the baseline's re-measured median; the leader and its
    race are read back from them (`autotune.answer.race.race_of`)."""
    record = read_study(study)
    updates: dict[str, Any] = {
        "finalists": rounds.records(),
        "rounds_looks": rounds.looks,
        "rounds_look": rounds.look,
    }
    if BASELINE in rounds.throughput:
        median = statistics.median(rounds.throughput[BASELINE].values())
        updates["baseline"] = replace(record.baseline, remeasured_median=median)
    write_study(study, **updates)


def choose_finalists(study: StudyStore, count: int) -> list[TrialRecord]:
    """The best `count` feasible trials by their search score (reused duplicates left out); when
    the first of them changes the training math, the best one that keeps it joins them (the
    answer hands back a math change only when it measurably beats that one, `MATH_GAIN`). A
    trial the search measured far behind is still a finalist: one window's bad luck (a neighbour's
    load, a cold cache) is what the rounds exist to undo."""
    if count <= 0:
        return []
    record = read_study(study)
    # a trial of the baseline's own configuration is the baseline, measured beside them anyway
    candidates = [
        t for t in ranked_trials(study) if t.feasible and not t.reused and not same_as_baseline(record, t)
    ]
    chosen = candidates[:count]
    if chosen and all(record_changes(record, t) for t in chosen):
        keeping = next((t for t in candidates[count:] if not record_changes(record, t)), None)
        if keeping is not None:
            chosen.append(keeping)
    return chosen
