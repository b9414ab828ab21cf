"""Measuring given values around the search: the baseline before it, the finalists after it.

The best few trials and the baseline are re-measured in rounds, each in a rotated order (a
balanced Latin square), and the winner is declared by median: a single window's luck (or a
neighbour's noise) does not pick the answer, and the speedup over the baseline is measured under
the same conditions. The baseline is measured twice in each round (an A/A pair): what the
instrument shows against itself widens every interval the answer states."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import optuna

from autotune.config import MeasureSettings
from autotune.measure.ranks import distributed, from_rank_zero, is_rank_zero
from autotune.measure.stats import MIN_GAIN, instrument, paired_speedup, rank_finalists, verdict
from autotune.plan.resolved import Plan, baseline_values
from autotune.progress import Reporter, describe_params
from autotune.records import (
    AA,
    BASELINE,
    BASELINE_AGAIN,
    Baseline,
    FinalistRecord,
    TrialRecord,
    Winner,
    measured_record,
    read_study,
    write_study,
)
from autotune.study.choices import same_as_baseline
from autotune.study.objective import score
from autotune.study.semantics import record_changes
from autotune.study.store import ranked_trials

Measure = Callable[..., dict[str, Any]]  # (params, number, verbatim=...) -> measurements


def measure_baseline(measure: Measure, plan: Plan, study: optuna.Study, reporter: Reporter) -> None:
    """Measure the baseline once per study, before the search: the speedup is stated against it."""
    values = baseline_values(plan)
    reporter.on_note(f"measuring the baseline: {describe_params(values)}")
    try:
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
    write_study(study, baseline=Baseline.from_attrs({**measured, "params": values}))
    peak_mib = measured["peak_memory_bytes"] / 2**20
    reporter.on_note(f"baseline: {measured['tokens_per_s'] / 1000:.1f}k tok/s, peak {peak_mib:.0f} MiB")


# A round's window before the A/A pair has shown the spread between processes: its 95% half-width.
FIRST_ROUND_CI = 0.05
ROUND_CI_CAP = 0.10  # ... and the loosest any round's window takes
# The warm-up of a round's configuration that compiles nothing: its first step (a fresh process's
# first kernels, allocations and optimizer state) and one more. The search measured it already;
# only compilation needs its steps watched until they stop falling.
ROUND_EAGER_WARMUP_STEPS = 2
# A round's window may end after this many steps (at most the search's own minimum) once its
# interval is as narrow as the round needs: a round places its contestants against each other, and
# what decides is the spread across rounds, which the pooled noise of the rounds measures.
ROUND_MIN_STEPS = 3
# Rounds go on for an undecided answer up to this many (or twice `finalist_rounds`, if more).
MAX_ROUNDS = 6


def round_window(settings: MeasureSettings, aa: AA | None) -> dict[str, Any]:
    """The measurement settings of a finalists' round (`Job.window`): as long as placing the
    contestants needs, not each window's own target. A round's pairs differ by the process, the
    position and the machine's drift as well as by their windows; a window's noise well under
    that spread (its 95% half-width at most half the A/A pairs' spread, `FIRST_ROUND_CI` before
    there is one, within `target_rel_ci` and `ROUND_CI_CAP`) adds little to it. A third of the
    search's steps and seconds at most (at least its minimum window), and it may end after
    `ROUND_MIN_STEPS` steps once as precise as that. A configuration that compiles
    nothing warms up for `ROUND_EAGER_WARMUP_STEPS`: the search has seen it settle."""
    spread = aa.spread if aa is not None and aa.rounds >= 2 else 2 * FIRST_ROUND_CI
    target = min(ROUND_CI_CAP, max(settings.target_rel_ci, spread / 2))
    return {
        "min_steps": min(settings.min_steps, ROUND_MIN_STEPS),
        "max_steps": max(settings.min_steps, math.ceil(settings.max_steps / 3)),
        "max_seconds": settings.max_seconds / 3,
        "target_rel_ci": target,
        "eager_warmup_steps": min(settings.warmup_steps, ROUND_EAGER_WARMUP_STEPS),
    }


def remeasure_finalists(measure: Measure, plan: Plan, study: optuna.Study, reporter: Reporter) -> None:
    """Re-measure the best few trials and the baseline in rounds, each round in the order of a
    balanced Latin square, and declare the winner by median: a single window's luck (or a
    neighbour's noise) does not pick the answer, and the speedup over the baseline is measured
    under the same conditions.

    Each round measures the baseline twice, in two positions (`BASELINE_AGAIN`): the A/A pair,
    whose spread and offset widen every paired interval (`autotune.measure.stats.paired_speedup`).
    A round's windows are as short as placing the contestants needs (`round_window`), and a trial
    decided slower than the leader leaves the rounds at once (`_decided_out`)."""
    finalists = choose_finalists(study, plan.config.finalists)
    record = read_study(study)
    baseline = record.baseline
    contestants: dict[int, tuple[dict[str, Any], bool]] = {f.number: (f.params, False) for f in finalists}
    if baseline.measured and finalists:
        contestants[BASELINE] = (baseline.params, True)
        contestants[BASELINE_AGAIN] = (baseline.params, True)
    contestants = from_rank_zero(contestants)  # every rank of a launched group measures the same
    if len(contestants) < 2:
        return
    # the trials that keep the training math: the best of them stays in the rounds (the answer
    # compares a math change with it, `autotune.driver.answer.MATH_GAIN`)
    keeping = {f.number for f in finalists if not record_changes(record, f)}
    # With the user's run length, finalists are compared on its predicted time, not on tokens/s.
    tokens = record.train_tokens
    rounds = plan.config.finalist_rounds
    # Rounds go on (up to `MAX_ROUNDS`, or twice as many if more) while the answer is not decided:
    # the leader's speedup over the baseline (its interval wholly above or below the gain worth a
    # change), or its lead over the runner-up (their paired interval excludes 1), and while the
    # rounds left could decide it.
    # Those extra rounds race only the contestants of the open question; the others keep the
    # rounds they have.
    max_rounds = max(2 * rounds, MAX_ROUNDS)
    named = ", ".join(_name(n) for n in contestants if n != BASELINE_AGAIN)
    twice = " (the baseline twice in each)" if BASELINE_AGAIN in contestants else ""
    reporter.on_note(f"re-measuring {named} in {rounds} rotated rounds{twice}")
    by_round: dict[int, dict[int, float]] = {number: {} for number in contestants}
    throughput: dict[int, list[float]] = {number: [] for number in contestants}
    peaks: dict[int, list[int | None]] = {number: [] for number in contestants}
    measured_now = list(contestants)
    round_number = 0
    while round_number < max_rounds:
        round_number += 1
        window = round_window(plan.config.measure, _aa(by_round))
        for number in round_order(measured_now, round_number):
            params, verbatim = contestants[number]
            try:
                measured = measure(params, number, verbatim=verbatim, window=window)
            except Exception as exc:  # a finalist that fails now is reported, not fatal
                if distributed():
                    raise  # unless one rank alone failed and the others wait for it
                reporter.on_remeasure(number, round_number, None, f"{type(exc).__name__}: {exc}")
                continue
            by_round[number][round_number] = score(measured_record(measured), tokens) or 0.0
            throughput[number].append(measured["tokens_per_s"])
            peaks[number].append(measured.get("peak_memory_bytes"))
            reporter.on_remeasure(number, round_number, measured["tokens_per_s"], None)
        decided = _decided_out(by_round, keeping) if is_rank_zero() else []
        out = from_rank_zero([n for n in decided if n in measured_now])
        if out:
            measured_now = [n for n in measured_now if n not in out]
            why = ", ".join(f"trial {n}" for n in out)
            reporter.on_note(f"after {round_number} rounds {why} measured slower than the leader: out")
        if round_number >= rounds:
            pending = from_rank_zero(_undecided(by_round, max_rounds) if is_rank_zero() else None)
            if pending is None or round_number == max_rounds:
                break
            measured_now, why = pending
            reporter.on_note(f"after {round_number} rounds {why}: one more round of those")
    ranked = rank_finalists({number: list(values.values()) for number, values in by_round.items()})
    trials_ranked = [f for f in ranked if f.number >= 0]
    if not trials_ranked or not is_rank_zero():
        return
    by_number = {f.number: f for f in finalists}
    winner = trials_ranked[0]
    text = verdict(trials_ranked, describe_params(by_number[winner.number].params))
    remeasured_baseline = next((f for f in ranked if f.number == BASELINE), None)
    answer: dict[str, Any] = {
        "number": winner.number,
        "median_tokens_per_s": statistics.median(throughput[winner.number]),
        # what the finalists were ranked by: tokens/s, or the effective rate of the user's run
        "median_score": winner.median,
        "objective": "tokens_per_s" if tokens is None else "run_time",
    }
    if remeasured_baseline is not None:
        remeasured = replace(baseline, remeasured_median=statistics.median(throughput[BASELINE]))
        write_study(study, baseline=remeasured)
        speedup = paired_speedup(by_round[winner.number], by_round[BASELINE], _aa(by_round))
        if speedup is not None:
            answer["speedup"] = speedup.to_dict()
    # each with the rounds it was measured in (extra rounds race only some of them), its score
    # and its peak in each
    records = [
        FinalistRecord(
            number=f.number,
            tokens_per_s=throughput[f.number],
            rounds=list(by_round[f.number]),
            scores=list(by_round[f.number].values()),
            peaks=peaks[f.number],
        )
        for f in ranked
    ]
    write_study(study, finalists=records, winner=Winner(**answer, verdict=text))


def _name(number: int) -> str:
    return "the baseline" if number in (BASELINE, BASELINE_AGAIN) else f"trial {number}"


def _aa(by_round: dict[int, dict[int, float]]) -> AA | None:
    """The instrument's figure of the rounds so far: the baseline against its second measurement,
    and the noise of one measurement pooled over every contestant (`instrument`)."""
    return instrument(by_round)


def _decided_out(by_round: dict[int, dict[int, float]], keeping: set[int]) -> list[int]:
    """The trials decided slower than the leader (by median) after the rounds so far: the paired
    interval of their ratio to the leader, widened by the A/A figure, lies wholly below 1. They
    leave the rounds: no further round could make them the answer. The baseline and its A/A pair
    stay (every answer is stated against them), and so does the fastest trial that keeps the
    training math (`keeping`) while the leader changes it."""
    ranked = [f.number for f in rank_finalists({n: list(v.values()) for n, v in by_round.items()})]
    trials = [n for n in ranked if n >= 0]
    if len(trials) < 2:
        return []
    leader, aa = trials[0], _aa(by_round)
    keeper = next((n for n in trials if n in keeping), None) if leader not in keeping else None
    out = []
    for number in trials[1:]:
        lead = paired_speedup(by_round[number], by_round[leader], aa)
        if number != keeper and lead is not None and lead.rounds >= 2 and lead.high < 1:
            out.append(number)
    return out


def round_order(contestants: Sequence[int], round_number: int) -> list[int]:
    """The order of round `round_number` (from 1): a row of a balanced Latin square (Williams
    design) over the contestants. Over n rounds each contestant is measured once in every position
    (for an odd n, the next n rounds mirror them, which balances who follows whom): an effect of
    position (the process before, the page cache, the allocator) falls on every contestant alike
    instead of entering the paired ratios as a speedup."""
    n = len(contestants)
    if n < 2:
        return list(contestants)
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        if len(first) % 2:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    r = round_number - 1
    row = [(j + r) % n for j in first]
    if n % 2 and (r // n) % 2:
        row.reverse()
    return [contestants[i] for i in row]


def choose_finalists(study: optuna.Study, count: int) -> list[TrialRecord]:
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


def _undecided(by_round: dict[int, dict[int, float]], max_rounds: int) -> tuple[list[int], str] | None:
    """Who the next round measures, and why: the leader (by median) and the baseline while the
    leader's speedup over it is not decided (`Speedup.decided`); the leader and the runner-up while
    their order is not (the paired interval of their ratio holds 1). Either only while
    `max_rounds` rounds could decide it (`Speedup.could_decide`). None when neither question is
    open and decidable, or cannot be judged yet (fewer than two paired rounds)."""
    ranked = [f.number for f in rank_finalists({n: list(v.values()) for n, v in by_round.items()})]
    trials = [number for number in ranked if number >= 0]
    if not trials:
        return None
    leader, racing, reasons = trials[0], [], []
    aa = _aa(by_round)
    speedup = paired_speedup(by_round[leader], by_round.get(BASELINE, {}), aa)
    if (
        speedup is not None
        and speedup.rounds >= 2
        and not speedup.decided
        and speedup.could_decide(max_rounds, 1 + MIN_GAIN)
    ):
        racing += [BASELINE, BASELINE_AGAIN] if BASELINE_AGAIN in by_round else [BASELINE]
        reasons.append(
            f"the speedup of trial {leader} over the baseline is not decided ({speedup.describe()})"
        )
    if len(trials) > 1:
        lead = paired_speedup(by_round[leader], by_round[trials[1]], aa)
        if (
            lead is not None
            and lead.rounds >= 2
            and lead.low <= 1 <= lead.high
            and lead.could_decide(max_rounds, 1.0)
        ):
            racing.append(trials[1])
            reasons.append(f"trial {leader}'s lead over trial {trials[1]} is not decided ({lead.describe()})")
    if not racing:
        return None
    return [leader, *racing], "; ".join(reasons)
