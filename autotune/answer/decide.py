"""The study's answer: which configuration to hand back, decided once from the stored records.

`decide` reads a study's records (its trials, its baseline, its finalists' rounds) and returns
the `Answer` that the search's end, ``autotune show``, ``autotune export``, ``autotune report``,
`SearchResult` and `tune` render. Its rules:

- The answer never contradicts its verdict. When nothing beat the defaults measurably (the
  paired interval of the best configuration's speedup over the baseline does not lie wholly above
  ``1 + MIN_GAIN``), the configuration handed back *is the defaults*; the best measured one is
  named beside it as the alternative, with its figures.
- A configuration that changes the training math (precision, optimizer family, effective batch,
  data order) is the answer only when it measurably beats the best measured configuration that
  keeps the math: their paired interval lies wholly above ``1 + MATH_GAIN``. Otherwise the
  math-keeping one is the answer and the other is named with its gain and what it changes.
- Every comparison of the rounds is read from one model of their noise
  (`autotune.measure.rounds.fit_rounds`), whose A/A check the answer states.
- The expected tokens/s is the rounds' geometric mean with an interval from the noise pooled over
  every contestant (`autotune.measure.rounds.level`), the peak their median; the search window's
  figures only where nothing was re-measured, and the answer says so.

Pure: reads records; no torch, no optuna.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from autotune.answer.choices import fits, measured_in_full, one_window, same_as_baseline, search_choice
from autotune.answer.instrument import aa_of, finalists_time, rounds_fit
from autotune.answer.model import (
    BEATS_DEFAULTS,
    DEFAULTS_OVER_CAP,
    KEEP_DEFAULTS,
    KEEPS_MATH,
    NO_TRIAL,
    NOT_REMEASURED,
    Answer,
    Choice,
    Interval,
)
from autotune.answer.verdict import unpaid_math_change, verdict_line
from autotune.measure.rounds import RoundsFit, level
from autotune.measure.stats import MATH_GAIN, MIN_GAIN, Speedup
from autotune.records import BASELINE, FinalistRecord, StudyRecord, TrialRecord, WholeRun, read_study
from autotune.space.mapping import trial_kwargs
from autotune.store.objective import score
from autotune.store.semantics import record_changes

if TYPE_CHECKING:
    from autotune.store.session import StudyStore


def decide(study: StudyRecord, trials: Sequence[TrialRecord], cap_bytes: int | None = None) -> Answer:
    """The answer of a study from its records (under `cap_bytes` when given: a re-selection under
    another memory cap, from the stored measurements alone)."""
    tokens = study.train_tokens
    objective = "tokens_per_s" if tokens is None else "run_time"
    candidates = [
        t
        for t in trials
        if measured_in_full(t, cap_bytes is not None)
        and fits(t.peak_memory_bytes, cap_bytes)
        and whole_run_fits(t.whole_run, cap_bytes)
    ]
    defaults = _defaults(study, cap_bytes)
    # A trial that ran the baseline's configuration is the baseline, never a contestant against it.
    itself = [t for t in candidates if same_as_baseline(study, t)] if defaults is not None else []
    candidates = [t for t in candidates if t not in itself]
    base_tokens = study.baseline.remeasured_median or study.baseline.tokens_per_s
    # what every answer of this study carries; each path fills in the rest
    common = Answer(
        NO_TRIAL, "", None, baseline_tokens_per_s=base_tokens, memory_cap_bytes=cap_bytes, objective=objective
    )
    finalists = {f.number: f for f in study.finalists}
    fit = rounds_fit(finalists, study.rounds_looks, study.rounds_look)
    common = replace(common, aa=aa_of(fit), finalists_time=finalists_time(study.time_breakdown))
    rounds = {t.number: finalists[t.number] for t in candidates if t.number in finalists}
    return _with_whole_run(
        study, _decide(study, candidates, itself, rounds, finalists, defaults, common, fit), cap_bytes
    )


def _decide(
    study: StudyRecord,
    candidates: list[TrialRecord],
    itself: list[TrialRecord],
    rounds: dict[int, FinalistRecord],
    finalists: dict[int, FinalistRecord],
    defaults: Choice | None,
    common: Answer,
    fit: RoundsFit | None,
) -> Answer:
    tokens = study.train_tokens
    if not candidates:
        if defaults is None:
            return replace(common, verdict="no measured configuration to hand back")
        if itself:
            return replace(common, rule=KEEP_DEFAULTS, verdict=_fastest_defaults(itself), choice=defaults)
        return replace(common, verdict="no trial was measured in full: keep the defaults", choice=defaults)
    if not rounds and itself and _search_leads(itself, candidates, tokens):
        return replace(common, rule=KEEP_DEFAULTS, verdict=_fastest_defaults(itself), choice=defaults)
    if rounds:
        return _from_rounds(study, candidates, rounds, finalists, defaults, common, fit)
    return _from_search(study, candidates, defaults, tokens, common)


def _from_rounds(
    study: StudyRecord,
    candidates: Sequence[TrialRecord],
    rounds: dict[int, FinalistRecord],
    finalists: dict[int, FinalistRecord],
    defaults: Choice | None,
    common: Answer,
    fit: RoundsFit | None,
) -> Answer:
    """The answer from the finalists' rounds: every comparison read from the rounds' model."""
    by_number = {t.number: t for t in candidates}
    baseline = finalists.get(BASELINE)
    if fit is not None:
        order = {n: i for i, n in enumerate(fit.ranked())}
        ranked = sorted(rounds.values(), key=lambda f: order.get(f.number, len(order)))
    else:
        ranked = sorted(rounds.values(), key=lambda f: -statistics.median(f.scores_by_round().values()))

    def choice(f: FinalistRecord) -> Choice:
        return _remeasured_choice(study, by_number[f.number], f, finalists, fit)

    def paired(a: FinalistRecord, over: FinalistRecord | None) -> Speedup | None:
        if fit is None or over is None:
            return None
        return fit.ratio(a.number, over.number)

    def level_of(f: FinalistRecord) -> float:
        if fit is not None:
            return fit.levels.get(f.number, -math.inf)
        return statistics.median(f.scores_by_round().values())

    leader = ranked[0]
    keeps = [f for f in ranked if not record_changes(study, by_number[f.number])]
    pick: FinalistRecord | None = leader
    alternative: FinalistRecord | None = None
    gain: Speedup | None = None
    rule = BEATS_DEFAULTS
    if record_changes(study, by_number[leader.number]):
        # The best measured configuration that keeps the math: a finalist, or the defaults
        # themselves (they keep it by definition) when they are faster and may be handed back.
        keeper = keeps[0] if keeps else None
        if (
            baseline is not None
            and defaults is not None
            and (keeper is None or level_of(baseline) > level_of(keeper))
        ):
            keeper = baseline
        if keeper is not None:
            gain = paired(leader, keeper)
            if gain is None or gain.low <= 1 + MATH_GAIN:
                alternative, rule = leader, KEEPS_MATH
                pick = None if keeper is baseline else keeper
            elif keeper is not baseline:
                alternative = keeper  # the leader's math change paid: the best that keeps it, named
    unpaid: tuple[Choice, Interval | None] | None = None  # a math change held back by a keeper
    if pick is not None and baseline is not None:
        speedup = paired(pick, baseline)
        if (speedup is None or not speedup.beats_baseline) and defaults is not None:
            if rule == KEEPS_MATH and pick is not leader:
                # the leader changes the math and did not measurably beat `pick` by `MATH_GAIN`,
                # which in turn did not beat the defaults: the verdict says both
                unpaid = (choice(pick), _interval(gain))
            alternative, pick, rule = leader, None, KEEP_DEFAULTS
    chosen = choice(pick) if pick is not None else defaults
    if chosen is None:  # the defaults do not fit the cap: the best that does
        chosen, alternative, rule = choice(leader), None, DEFAULTS_OVER_CAP
    elif chosen.is_defaults and (rule != KEEPS_MATH or not _beats(paired(leader, baseline))):
        rule = KEEP_DEFAULTS  # the leader did not even beat the defaults measurably
    elif defaults is None and rule == BEATS_DEFAULTS and baseline is not None:
        speedup = paired(pick, baseline) if pick is not None else None
        if speedup is None or not speedup.beats_baseline:
            rule = DEFAULTS_OVER_CAP  # kept over the defaults because they do not fit, not by speed
    named = choice(alternative) if alternative is not None and alternative is not pick else None
    if named is not None and alternative is not None:
        gain = paired(alternative, pick if pick is not None else baseline)
    verdict = verdict_line(rule, chosen, named, _interval(gain), baseline is not None)
    if rule == KEEP_DEFAULTS and unpaid is not None and named is not None:
        verdict = unpaid_math_change(named, *unpaid)
    return replace(
        common,
        rule=rule,
        verdict=verdict,
        choice=chosen,
        alternative=named,
        alternative_gain=_interval(gain) if named else None,
    )


def _fastest_defaults(itself: Sequence[TrialRecord]) -> str:
    numbers = ", ".join(str(t.number) for t in itself)
    return (
        f"the defaults are the fastest measured (trial {numbers} ran their configuration; "
        "not re-measured): keep them"
    )


def _search_leads(itself: Sequence[TrialRecord], others: Sequence[TrialRecord], tokens: float | None) -> bool:
    """Whether a trial of the baseline's configuration has the best search score of all."""
    best_self = max(score(t, tokens) or 0.0 for t in itself)
    return all(best_self >= (score(t, tokens) or 0.0) for t in others)


def _beats(speedup: Speedup | None) -> bool:
    """Whether a speedup over the baseline lies above 1 + `MIN_GAIN`."""
    return speedup is not None and speedup.beats_baseline


def _from_search(
    study: StudyRecord,
    candidates: Sequence[TrialRecord],
    defaults: Choice | None,
    tokens: float | None,
    common: Answer,
) -> Answer:
    """The answer from the search windows alone (no finalists' rounds): the same rules on single
    measurements, which the answer says are not re-measured."""

    def rate(t: TrialRecord) -> float:
        return score(t, tokens) or 0.0

    ranked = sorted(candidates, key=lambda t: (-rate(t), t.number))
    leader = ranked[0]
    pick: TrialRecord | None = leader
    alternative: TrialRecord | None = None
    rule = NOT_REMEASURED
    base = _baseline_rate(study, tokens) if defaults is not None else None
    if record_changes(study, leader):
        # the best that keeps the math: a trial, or the defaults when they are faster
        keeps = [t for t in ranked if not record_changes(study, t)]
        keeper: TrialRecord | None = keeps[0] if keeps and (not base or rate(keeps[0]) >= base) else None
        reference = rate(keeper) if keeper is not None else base
        if reference and rate(leader) / reference <= 1 + MATH_GAIN:
            pick, alternative, rule = keeper, leader, KEEPS_MATH
    if pick is not None and base and rate(pick) / base <= 1 + MIN_GAIN:
        pick, alternative, rule = None, leader, KEEP_DEFAULTS
    chosen = search_choice(study, pick) if pick is not None else defaults
    if chosen is None:
        chosen, alternative, rule = search_choice(study, leader), None, NOT_REMEASURED
    elif chosen.is_defaults and (rule != KEEPS_MATH or not base or rate(leader) / base <= 1 + MIN_GAIN):
        rule = KEEP_DEFAULTS  # the leader did not even beat the defaults
    named = search_choice(study, alternative) if alternative is not None and alternative is not pick else None
    text = verdict_line(rule, chosen, named, None, False)
    if rule != NOT_REMEASURED:
        text += " (search windows only: not re-measured)"
    return replace(common, rule=rule, verdict=text, choice=chosen, alternative=named)


# -- the configurations --------------------------------------------------------------------------


def _defaults(study: StudyRecord, cap_bytes: int | None) -> Choice | None:
    """The baseline's configuration as a choice, with its re-measured figures when it has them;
    None when it was not measured, or it or its whole run does not fit `cap_bytes`."""
    baseline = study.baseline
    if not baseline.measured or not fits(baseline.peak_memory_bytes, cap_bytes):
        return None
    if not whole_run_fits(study.whole_run_of(None), cap_bytes):
        return None
    training_args, model_kwargs = trial_kwargs(baseline.params)
    finalists = {f.number: f for f in study.finalists}
    finalist = finalists.get(BASELINE)
    fit = rounds_fit(finalists, study.rounds_looks, study.rounds_look)
    tokens = _throughput(BASELINE, finalists, fit) if finalist is not None else None
    peak = _median_peak(finalist) if finalist is not None else None
    return Choice(
        trial=None,
        params=dict(baseline.params),
        training_args=training_args,
        model_kwargs=model_kwargs,
        tokens_per_s=tokens or one_window(baseline.tokens_per_s, baseline.rel_ci_halfwidth),
        peak_memory_bytes=peak if peak is not None else baseline.peak_memory_bytes,
        remeasured=tokens is not None,
        speedup=Interval(1.0),
    )


def _remeasured_choice(
    study: StudyRecord,
    trial: TrialRecord,
    finalist: FinalistRecord,
    finalists: dict[int, FinalistRecord],
    fit: RoundsFit | None,
) -> Choice:
    speedup = fit.ratio(trial.number, BASELINE) if fit is not None and BASELINE in finalists else None
    peak = _median_peak(finalist)
    return Choice(
        trial=trial.number,
        params=dict(trial.params),
        training_args=dict(trial.training_args or {}),
        model_kwargs=dict(trial.model_kwargs or {}),
        tokens_per_s=_throughput(trial.number, finalists, fit),
        peak_memory_bytes=peak if peak is not None else trial.peak_memory_bytes,
        remeasured=True,
        speedup=_interval(speedup, fit.informed_by(trial.number, BASELINE) if fit is not None else None),
        changes=tuple(c.text() for c in record_changes(study, trial)),
    )


def _throughput(number: int, finalists: dict[int, FinalistRecord], fit: RoundsFit | None) -> Interval | None:
    """The re-measured throughput of contestant `number`: the geometric mean of its rounds with
    the 95% interval of that mean, the noise pooled over every contestant (`level`), the windows
    the rounds' model left out as disturbed left out here too."""
    values = {n: f.tokens_by_round() for n, f in finalists.items()}
    found = level(values, number, fit.excluded if fit is not None else ())
    if found is None:
        return None
    value, low, high, _ = found
    return Interval(value, low, high, len(finalists[number].rounds or finalists[number].tokens_per_s))


def _median_peak(finalist: FinalistRecord) -> int | None:
    peaks = [int(p) for p in finalist.peaks or () if p is not None]
    return int(statistics.median(peaks)) if peaks else None


def _interval(speedup: Speedup | None, rounds: int | None = None) -> Interval | None:
    """A speedup as the answer states it, over the rounds that inform it (`rounds`; default the
    rounds both were measured in)."""
    if speedup is None:
        return None
    high = speedup.high if math.isfinite(speedup.high) else None
    low = speedup.low if high is not None else None
    return Interval(speedup.ratio, low, high, max(speedup.rounds, rounds or 0))


# -- the whole run -------------------------------------------------------------------------------


def whole_run_fits(check: WholeRun | None, cap_bytes: int | None = None) -> bool:
    """Whether a configuration's whole-run check lets it be handed back (no check: it may be):
    not failed for memory; under another cap (`cap_bytes`: a re-selection) every step measured
    (none ran out of memory) and the whole run's peak under that cap."""
    if check is None or check.fits is None:  # a check that could not run decides nothing
        return True
    if cap_bytes is None:
        return check.fits is not False
    if check.reason is not None and check.fits is False:
        return False  # out of memory, or killed: no peak says how much it needed
    peak = check.peak_bytes
    return peak is not None and peak <= cap_bytes


def _with_whole_run(study: StudyRecord, answer: Answer, cap_bytes: int | None) -> Answer:
    """The answer with its choice's whole-run check (headroom under `cap_bytes` when given), and
    a note on the configurations that failed theirs, or on why the choice has none."""
    failed = [c for c in study.whole_run if c.fits is False and not whole_run_fits(c, cap_bytes)]
    notes = [
        f"{'the defaults failed their' if c.trial is None else f'trial {c.trial} failed its'} whole-run "
        f"check ({c.message}): not handed back"
        for c in {c.trial: c for c in failed}.values()
    ]
    choice = answer.choice
    check = study.whole_run_of(choice.trial) if choice is not None else None
    if check is not None and cap_bytes is not None:
        check = replace(check, cap_bytes=cap_bytes)
    if choice is not None and check is None:
        off = study.run_config.get("whole_run_check") is False
        notes.append("no whole-run check" + (" (--no-whole-run-check)" if off else ""))
    return replace(answer, whole_run=check, whole_run_note="; ".join(notes) or None)


# -- the baseline ------------------------------------------------------------------------------


def _baseline_rate(study: StudyRecord, tokens: float | None) -> float | None:
    return score(study.baseline.as_trial(), tokens) if study.baseline.measured else None


def study_answer(study: StudyStore, cap_bytes: int | None = None) -> Answer:
    """A stored study's answer: the one stored when its search ended, or (a re-selection under
    `cap_bytes`, or a store written before answers were stored) decided now from its records,
    without storing it."""
    from autotune.store.trials import read_trials

    record = read_study(study)
    if cap_bytes is None and record.answer is not None:
        return Answer.from_dict(record.answer)
    return decide(record, read_trials(study), cap_bytes)
