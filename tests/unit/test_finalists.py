"""The finalists' re-measurement rounds on scripted measurements and a fake clock: who is measured
in which round, when the rounds stop, and what the answer reads from them."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from autotune.answer.decide import decide
from autotune.answer.instrument import rounds_fit
from autotune.answer.model import BEATS_DEFAULTS, KEEP_DEFAULTS
from autotune.answer.race import race_of
from autotune.driver.finalists import BASELINE, BASELINE_AGAIN, remeasure_finalists
from autotune.driver.questions import CLAIM_HALF_WIDTH
from autotune.driver.sequential import (
    BUDGET_RESERVE,
    FINALISTS_SHARE,
    MAX_ROUNDS,
    ROUND_EAGER_WARMUP_STEPS,
    ROUND_MIN_STEPS,
    Pace,
    finalists_budget_s,
    pace_of,
    planned_rounds,
    round_window,
    sized_rounds,
    window_seconds,
)
from autotune.measure.looks import ERROR_RATE, FIRST_LOOK_SHARE, look_level
from autotune.measure.rounds import fit_rounds, round_order
from autotune.options import MeasureSettings
from autotune.progress import Reporter
from autotune.records import TrialRecord, measured_record, read_study, trial_record
from autotune.store.session import StudyStore
from autotune.store.trials import read_trials
from tests.helpers import rated_study


def _plan(finalists: int, rounds: int, settings: MeasureSettings | None = None) -> Any:
    return SimpleNamespace(
        config=SimpleNamespace(
            finalists=finalists, finalist_rounds=rounds, measure=settings or MeasureSettings()
        )
    )


class _Clock:
    """The rounds' clock: each measurement advances it by its script's seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Script:
    """A fake measurement: each contestant's tokens/s per measurement from a table (the
    baseline's second measurement, the A/A pair, as its first unless given; the last value
    repeats), who was measured, the window each took, and `seconds` on the clock for each (or
    for each in turn)."""

    def __init__(
        self, rates: dict[int, list[float]], clock: _Clock | None = None, seconds: float | list[float] = 1.0
    ) -> None:
        self.rates = rates
        if BASELINE in rates and BASELINE_AGAIN not in rates:
            self.rates[BASELINE_AGAIN] = rates[BASELINE]
        self.calls: list[int] = []
        self.windows: list[dict[str, Any] | None] = []
        self.clock, self.seconds = clock, seconds

    def rate(self, number: int) -> float:
        count = self.calls.count(number)
        return self.rates[number][min(count, len(self.rates[number])) - 1]

    def __call__(
        self,
        params: dict[str, Any],
        number: int,
        verbatim: bool = False,
        window: dict[str, Any] | None = None,
    ) -> TrialRecord:
        self.calls.append(number)
        self.windows.append(window)
        if self.clock is not None:  # seconds by measurement, where a list (its last repeats)
            each = self.seconds[: len(self.calls)][-1] if isinstance(self.seconds, list) else self.seconds
            self.clock.now += each
        rate = self.rate(number)
        return measured_record({"tokens_per_s": rate, "samples_per_s": rate / 10, "peak_memory_bytes": 1})


def _rates(logs: list[float], base: float = 100.0) -> list[float]:
    """Rates whose ratios to a constant `base` have these logarithms."""
    return [base * math.exp(x) for x in logs]


def _rounds_of(study: optuna.Study) -> dict[int, list[int]]:
    return {f["number"]: f["rounds"] for f in study.user_attrs["finalists"]}


def _answer(study: optuna.Study) -> Any:
    return decide(read_study(study), read_trials(StudyStore(study)))


# -- the first rounds ---------------------------------------------------------------------------------


def test_the_first_rounds_measure_everyone_the_baseline_twice_in_rotated_order() -> None:
    script = _Script({0: [200.0, 202.0], 1: [150.0, 149.0], BASELINE: [100.0, 101.0]})
    study = rated_study({0: 200.0, 1: 150.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=2), StudyStore(study), Reporter())
    contestants = [0, 1, BASELINE, BASELINE_AGAIN]
    assert script.calls[:4] == round_order(contestants, 1)
    assert script.calls[4:8] == round_order(contestants, 2)
    stored = {f["number"]: f for f in study.user_attrs["finalists"]}
    for number in contestants:  # each measurement keeps its place in its round's order
        assert stored[number]["positions"] == [round_order(contestants, r).index(number) for r in (1, 2)]
    assert study.user_attrs["rounds_looks"] == MAX_ROUNDS - 2 + 1  # no budget: every round it may take


def test_a_decided_answer_ends_after_the_rounds_asked_for() -> None:
    script = _Script({0: [200.0, 202.0, 199.0], 1: [150.0] * 3, BASELINE: [100.0, 101.0, 99.0]})
    study = rated_study({0: 200.0, 1: 150.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=2), StudyStore(study), Reporter())
    assert len(script.calls) == 4 * 2
    answer = _answer(study)
    assert answer.rule == BEATS_DEFAULTS and answer.choice is not None and answer.choice.trial == 0
    assert answer.choice.speedup is not None and answer.choice.speedup.low > 1.9


def test_a_trial_of_the_baselines_configuration_is_not_a_finalist() -> None:
    study = rated_study({0: 200.0, 1: 150.0, 2: 140.0})
    study.set_user_attr(
        "baseline", {"params": dict(study.trials[0].params), "tokens_per_s": 100.0, "peak_memory_bytes": 1}
    )
    script = _Script({1: [150.0] * 3, 2: [140.0] * 3, BASELINE: [100.0] * 3})
    remeasure_finalists(script, _plan(finalists=2, rounds=2), StudyStore(study), Reporter())
    assert 0 not in script.calls and sorted(set(script.calls)) == sorted([1, 2, BASELINE, BASELINE_AGAIN])


# -- sequential rounds ----------------------------------------------------------------------------


def test_an_undecided_speedup_races_the_leader_and_the_baseline_until_decided() -> None:
    # Trial 0 about 1.15x the baseline, spread 10% and more a round: undecided after the two rounds asked
    # for; the rounds go on for trial 0 and the baseline's pair alone (trial 1 is out, decided
    # slower), and stop once the speedup is decided (and its interval within CLAIM_HALF_WIDTH).
    logs = [0.03, 0.26, 0.13, 0.16, 0.12, 0.15, 0.14, 0.13, 0.15, 0.14, 0.14, 0.14]
    baseline = _rates([0.0, -0.02, 0.01, 0.0, 0.01, -0.01, 0.0, 0.01, -0.01, 0.0, 0.0, 0.0])
    script = _Script({0: _rates(logs), 1: [60.0] * 12, BASELINE: baseline})
    study = rated_study({0: 115.0, 1: 60.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=2), StudyStore(study), Reporter())
    rounds = _rounds_of(study)
    assert rounds[1] == [1, 2]
    extra = len(rounds[0]) - 2
    assert extra >= 1 and rounds[BASELINE] == rounds[BASELINE_AGAIN] == rounds[0]
    assert script.calls[8:] == [
        n for r in range(3, 3 + extra) for n in round_order([0, BASELINE, BASELINE_AGAIN], r)
    ]
    answer = _answer(study)
    assert answer.rule == BEATS_DEFAULTS and answer.choice is not None and answer.choice.speedup is not None
    speedup = answer.choice.speedup
    assert speedup.low is not None and speedup.high is not None
    assert speedup.low > 1.01 and math.log(speedup.high / speedup.value) <= CLAIM_HALF_WIDTH
    # one round fewer and it was not yet decided (or not yet that narrow)
    fit = rounds_fit({f.number: f for f in read_study(study).finalists}, study.user_attrs["rounds_looks"])
    assert fit is not None


def test_a_leader_no_faster_than_the_baseline_ends_the_rounds() -> None:
    # Measured at the baseline's speed: the answer keeps the defaults whether or not more rounds
    # would prove it, so none are run.
    script = _Script({0: [103.0, 97.0, 102.0], 1: [60.0] * 3, BASELINE: [100.0, 99.0, 101.0]})
    study = rated_study({0: 100.0, 1: 60.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=2), StudyStore(study), Reporter())
    assert len(script.calls) == 4 * 2
    answer = _answer(study)
    assert answer.rule == KEEP_DEFAULTS and answer.keeps_defaults
    assert "nothing beat the defaults measurably" in answer.verdict


def test_a_tie_between_two_trials_is_not_raced() -> None:
    # Two configurations alike, no baseline: their ratio sits at 1 and no round could order them.
    script = _Script({0: [120.0, 110.0, 121.0], 1: [112.0, 119.0, 114.0], 2: [60.0] * 3})
    study = rated_study({0: 120.0, 1: 118.0, 2: 100.0}, baseline=False)
    remeasure_finalists(script, _plan(finalists=3, rounds=2), StudyStore(study), Reporter())
    assert len(script.calls) == 3 * 2
    assert "either is as good" in _race(study)


def test_a_lead_more_rounds_can_decide_races_the_top_two_without_the_rest() -> None:
    # No baseline: trial 0 leads trial 1 by about 7%, trial 2 is far behind and leaves after two
    # rounds; the extra rounds measure 0 and 1 alone until their order is decided.
    script = _Script(
        {0: _rates([0.11, 0.03, 0.07, 0.07, 0.08, 0.06, 0.07, 0.07]), 1: [100.0] * 8, 2: [60.0] * 8}
    )
    study = rated_study({0: 120.0, 1: 118.0, 2: 100.0}, baseline=False)
    remeasure_finalists(script, _plan(finalists=3, rounds=2), StudyStore(study), Reporter())
    rounds = _rounds_of(study)
    assert rounds[2] == [1, 2] and len(rounds[0]) > 2 and rounds[0] == rounds[1]
    assert sorted(script.calls[6:]) == sorted([0, 1] * (len(rounds[0]) - 2))
    assert "either is as good" not in _race(study)


def _race(study: optuna.Study) -> str:
    """The finalists' race in words, as the stored rounds give it."""
    race = race_of(read_study(study))
    assert race is not None
    return race.describe(study.trials[race.leader].params)


def _precision_study(rows: dict[int, tuple[str, float]], timed: bool = False) -> optuna.Study:
    """A study of trials of `rows` (number -> precision, tok/s) beside an fp32 baseline at 95 tok/s:
    bf16 changes the training math, fp32 keeps it; `timed`: set-ups of 0.5 s and 0.1 s steps."""
    timing = {"setup_s": 0.5, "step_time_median_s": 0.1} if timed else {}
    study = optuna.create_study(direction="maximize")
    for number, (precision, rate) in rows.items():
        study.add_trial(
            optuna.trial.create_trial(
                params={"precision": precision, "dataloader_num_workers": number + 1},
                distributions={
                    "precision": optuna.distributions.CategoricalDistribution(["fp32", "bf16"]),
                    "dataloader_num_workers": optuna.distributions.IntDistribution(1, 64),
                },
                value=rate,
                user_attrs={"tokens_per_s": rate, "feasible": True, "peak_memory_bytes": 1, **timing},
            )
        )
    baseline = {"precision": "fp32", "dataloader_num_workers": 0}
    study.set_user_attr(
        "baseline", {"params": baseline, "tokens_per_s": 95.0, "peak_memory_bytes": 1, **timing}
    )
    return study


def test_the_fastest_math_keeping_trial_stays_while_the_leader_changes_the_math() -> None:
    # Trial 0 (bf16) leads both fp32 trials by 2x: both are slower, but trial 1, the fastest that
    # keeps the math, stays in the rounds: the answer compares the math change with it.
    study = _precision_study({0: ("bf16", 200.0), 1: ("fp32", 100.0), 2: ("fp32", 90.0)})
    script = _Script(
        {0: [200.0, 204.0, 198.0], 1: [100.0, 99.0, 101.0], 2: [90.0] * 3, BASELINE: [95.0, 96.0, 94.0]}
    )
    remeasure_finalists(script, _plan(finalists=3, rounds=3), StudyStore(study), Reporter())
    assert script.calls.count(2) == 2
    assert script.calls.count(1) == script.calls.count(0) == 3


def test_a_tight_budget_leaves_out_the_runner_up_before_the_best_math_keeping_trial() -> None:
    # Trial 0 (bf16) leads; trial 1 (bf16 too) is the runner-up; trial 2 is the fastest that keeps
    # the math (fp32). A budget that pays for the rounds of three contestants besides the
    # baseline's pair and one more round of the leader, not four (each predicted at 1.15 s), leaves
    # out trial 1: the answer's comparison needs trial 2.
    study = _precision_study({0: ("bf16", 200.0), 1: ("bf16", 190.0), 2: ("fp32", 100.0)}, timed=True)
    clock = _Clock()
    script = _Script({0: [200.0] * 4, 1: [190.0] * 4, 2: [100.0] * 4, BASELINE: [95.0] * 4}, clock, 1.0)
    plan = _plan(finalists=2, rounds=2)
    remeasure_finalists(script, plan, StudyStore(study), Reporter(), budget_s=10.0, clock=clock)
    assert 1 not in script.calls and script.calls.count(2) >= 2 and script.calls.count(0) >= 2
    answer = _answer(study)
    assert answer.alternative is not None and answer.alternative.trial == 2


# -- the model's safeguards ---------------------------------------------------------------------------


class _LastPaysMore(_Script):
    """Equal contestants, but each later position in a round runs 3% slower (the machine heating,
    a cache filling): a position effect."""

    def __init__(self, order: list[int]) -> None:
        super().__init__({})
        self.position = 0
        self.size = len(order)

    def __call__(
        self,
        params: dict[str, Any],
        number: int,
        verbatim: bool = False,
        window: dict[str, Any] | None = None,
    ) -> TrialRecord:
        self.calls.append(number)
        rate = 100.0 * 0.97 ** (self.position % self.size) * (1 + 0.002 * (len(self.calls) % 3))
        self.position += 1
        return measured_record({"tokens_per_s": rate, "samples_per_s": rate / 10, "peak_memory_bytes": 1})


def test_a_position_effect_is_not_claimed_as_a_speedup_between_equal_configurations() -> None:
    study = rated_study({0: 100.0, 1: 100.0})
    script = _LastPaysMore([0, 1, BASELINE, BASELINE_AGAIN])
    remeasure_finalists(script, _plan(finalists=2, rounds=4), StudyStore(study), Reporter())
    answer = _answer(study)
    assert answer.keeps_defaults and "beats the defaults" not in answer.verdict
    assert answer.aa is not None and answer.aa.slope == pytest.approx(math.log(0.97), abs=0.005)


def test_an_aa_pair_the_model_cannot_account_for_widens_every_interval() -> None:
    # The baseline's second measurement runs 4% slower every round, whatever its position; trial 0
    # is 1.04x the first. The A/A check fails, every interval widens until it holds, and a 4%
    # "speedup" such an instrument shows against itself is not claimed.
    script = _Script(
        {
            0: _rates([0.04, 0.041, 0.039, 0.04]),
            BASELINE: [100.0] * 4,
            BASELINE_AGAIN: [96.0, 96.1, 95.9, 96.0],
        }
    )
    study = rated_study({0: 104.0})
    remeasure_finalists(script, _plan(finalists=1, rounds=4), StudyStore(study), Reporter())
    answer = _answer(study)
    assert answer.keeps_defaults and answer.rule == KEEP_DEFAULTS
    assert answer.aa is not None and answer.aa.holds is False and answer.aa.scale > 1
    assert "does not hold 1: every interval is widened" in answer.aa.describe()


def test_a_disturbed_window_is_measured_again() -> None:
    # Trial 0's second window ran at 45% (another job on the machine): the fit leaves it out, and
    # the next round measures trial 0 again beside the baseline's pair.
    leader = [130.0, 58.0, 131.0, 129.0, 130.0]
    script = _Script(
        {
            0: leader,
            1: [100.0, 101.0, 99.0, 100.0],
            2: [90.0, 91.0, 89.0],
            BASELINE: [100.0, 99.0, 101.0, 100.0, 100.0],
        }
    )
    study = rated_study({0: 130.0, 1: 100.0, 2: 90.0})
    remeasure_finalists(script, _plan(finalists=3, rounds=2), StudyStore(study), Reporter())
    rounds = _rounds_of(study)
    assert len(rounds[0]) >= 3 and 3 in rounds[BASELINE]
    answer = _answer(study)
    assert answer.aa is not None and answer.aa.excluded >= 1
    assert answer.rule == BEATS_DEFAULTS and answer.choice is not None and answer.choice.trial == 0


# -- the budget -----------------------------------------------------------------------------------


def test_the_budget_is_a_share_of_the_whole_search_however_short() -> None:
    for spent in (70.0, 7.0, 0.5):  # no floor: a search of a few seconds gets its share only
        budget = finalists_budget_s(spent)
        assert budget / (spent + budget) == pytest.approx(FINALISTS_SHARE)


def test_a_tight_budget_keeps_fewer_finalists_and_fewer_rounds() -> None:
    # Each measurement costs 1.5 s on the fake clock. 12 s (past the reserve) pay for two rounds of
    # the two best trials and the baseline's pair: trial 2 is left out, and no round more is
    # affordable.
    clock = _Clock()
    script = _Script(
        {0: _rates([0.1, 0.3, 0.2, 0.25]), 1: [90.0] * 4, 2: [85.0] * 4, BASELINE: [100.0] * 4}, clock, 1.5
    )
    study = rated_study({0: 130.0, 1: 90.0, 2: 85.0})
    settings = MeasureSettings()
    costs = [
        pace_of(trial_record(n, {}, "COMPLETE", study.trials[n].user_attrs), settings).cost(settings)
        for n in range(3)
    ]
    assert all(
        c == pytest.approx(0.5 + (ROUND_EAGER_WARMUP_STEPS + ROUND_MIN_STEPS) * 0.1 + 0.15, abs=0.01)
        for c in costs
    )  # set-up, 2 + 2 steps, start
    plan = _plan(finalists=3, rounds=2)
    budget_s = 12.0 / (1 - BUDGET_RESERVE)
    remeasure_finalists(script, plan, StudyStore(study), Reporter(), budget_s=budget_s, clock=clock)
    assert sorted(set(script.calls)) == sorted({0, 1, BASELINE, BASELINE_AGAIN})
    assert len(script.calls) == 8 and study.user_attrs["rounds_looks"] == 1
    # a budget of 30 s keeps all three, and pays for more rounds than the two asked for
    predicted = {0: 1.15, 1: 1.15, 2: 1.15, -1: 1.15, -2: 1.15}
    assert planned_rounds(predicted, predicted, 2, 30.0) == 2 + int((30.0 - 2 * 5 * 1.15) // (3 * 1.15))


def test_a_budget_that_leaves_one_contestant_measures_no_rounds() -> None:
    # No baseline, two trials at 1.5 s a measurement: 2 rounds of both (6 s) do not fit in 4 s, the
    # runner-up is left out, and the lone leader has nothing to be compared with.
    clock = _Clock()
    script = _Script({0: [120.0] * 4, 1: [110.0] * 4}, clock, 1.5)
    study = rated_study({0: 120.0, 1: 110.0}, baseline=False)
    notes: list[str] = []
    reporter = Reporter()
    reporter.on_note = notes.append  # type: ignore[method-assign]
    remeasure_finalists(
        script, _plan(finalists=2, rounds=2), StudyStore(study), reporter, budget_s=4.0, clock=clock
    )
    assert any("trial 1 is left out of the rounds" in note for note in notes), notes
    assert script.calls == [] and "finalists" not in study.user_attrs


def test_the_rounds_stop_when_the_budget_is_spent() -> None:
    # An undecidable race (a wide spread): the rounds go on while the clock leaves a round's time.
    clock = _Clock()
    spread = _rates([0.3, -0.2, 0.25, -0.15, 0.3, -0.2, 0.25, -0.15, 0.3, -0.2, 0.25, -0.15])
    script = _Script({0: spread, BASELINE: [100.0] * 12}, clock, 1.0)
    study = rated_study({0: 110.0})
    remeasure_finalists(
        script, _plan(finalists=1, rounds=2), StudyStore(study), Reporter(), budget_s=10.0, clock=clock
    )
    assert clock.now <= 10.0 * (1 - BUDGET_RESERVE)
    # the rounds the budget pays for at what the first round's measurements cost (1 s each): the
    # wide interval is measured on past the two rounds asked for, up to them
    paid = planned_rounds({0: 0, -1: 0, -2: 0}, {0: 1.0, -1: 1.0, -2: 1.0}, 2, 10.0)
    assert paid == 3 and len(_rounds_of(study)[0]) == paid


def test_the_rounds_keep_a_reserve_of_their_budget() -> None:
    # 9.4 s would pay for three rounds of the leader and the baseline's pair at 1 s a measurement,
    # past the reserve (8.93 s) for two: what the rounds do not time (choosing the finalists,
    # storing the rounds) and a last measurement that costs more than the ones before it are paid
    # from the rest, not over the budget.
    clock = _Clock()
    spread = _rates([0.3, -0.2, 0.25, -0.15, 0.3, -0.2])
    script = _Script({0: spread, BASELINE: [100.0] * 6}, clock, 1.0)
    study = rated_study({0: 110.0})
    remeasure_finalists(
        script, _plan(finalists=1, rounds=2), StudyStore(study), Reporter(), budget_s=9.4, clock=clock
    )
    assert len(_rounds_of(study)[0]) == 2 and clock.now <= 9.4 * (1 - BUDGET_RESERVE)


def test_a_budget_that_pays_for_one_more_round_is_looked_at_once_after_it() -> None:
    # A clear speedup, decided after the two rounds asked for. At 1 s a measurement, 10 s pay for
    # a third round of the leader and the baseline's pair: the rounds run it and are looked at
    # once, after it, at one look's level. 13 s pay for two more: the first look is after round 2,
    # where the decided answer ends the rounds.
    for budget, calls, looks in ((10.0, 9, 1), (13.0, 6, 3)):
        clock = _Clock()
        script = _Script({0: _rates([0.3, 0.31, 0.29]), BASELINE: [100.0, 101.0, 99.0]}, clock, 1.0)
        study = rated_study({0: 130.0})
        notes: list[str] = []
        reporter = Reporter()
        reporter.on_note = notes.append  # type: ignore[method-assign]
        remeasure_finalists(
            script, _plan(finalists=1, rounds=2), StudyStore(study), reporter, budget_s=budget, clock=clock
        )
        assert len(script.calls) == calls and study.user_attrs["rounds_looks"] == looks, budget
        assert study.user_attrs["rounds_look"] == 1
        said = any("looked at once" in note for note in notes)
        assert said == (looks == 1), notes
        fit = rounds_fit({f.number: f for f in read_study(study).finalists}, looks, 1)
        assert fit is not None and fit.level == pytest.approx(look_level(looks, 1))
    assert look_level(1, 1) == pytest.approx(1 - ERROR_RATE)


def test_a_rounds_warm_up_is_predicted_from_the_searchs_first_step() -> None:
    # A first step of 2 s (a data-loader worker's start), then 0.1 s steps: a round's two warm-up
    # steps are predicted at 2.1 s, not at every settling step of the search's warm-up.
    study = rated_study({0: 120.0}, first_step_s=2.0)
    record = trial_record(0, {}, "COMPLETE", {**study.trials[0].user_attrs, "warmup_excess_s": 9.0})
    assert pace_of(record, MeasureSettings()).cost(MeasureSettings()) == pytest.approx(
        0.5 + 2.1 + ROUND_MIN_STEPS * 0.1 + 0.15
    )
    attrs = {**rated_study({0: 120.0}).trials[0].user_attrs, "warmup_excess_s": 9.0}
    without = trial_record(0, {}, "COMPLETE", attrs)
    assert pace_of(without, MeasureSettings()).cost(MeasureSettings()) == pytest.approx(
        0.5 + 9.2 + ROUND_MIN_STEPS * 0.1 + 0.15
    )


def test_the_rounds_looks_are_planned_from_what_the_rounds_asked_for_cost() -> None:
    # Each measurement is predicted at 3.05 s (a 2 s first step) but takes 1 s: the 20 s budget
    # pays, by the prediction, for the two rounds asked for only; by what they cost, for 4 more
    # rounds of the leader and the baseline's pair. The looks are set before round 2 is looked at.
    clock = _Clock()
    spread = _rates([0.3, -0.2, 0.25, -0.15, 0.3, -0.2])  # undecidable: the rounds go on
    script = _Script({0: spread, BASELINE: [100.0] * 6}, clock, 1.0)
    study = rated_study({0: 110.0}, first_step_s=2.0)
    predicted = {n: 3.05 for n in (0, BASELINE, BASELINE_AGAIN)}
    assert planned_rounds(predicted, predicted, 2, 20.0) == 2
    remeasure_finalists(
        script, _plan(finalists=1, rounds=2), StudyStore(study), Reporter(), budget_s=20.0, clock=clock
    )
    assert study.user_attrs["rounds_looks"] == 2 + (20 - 2 * 3) // 3 - 2 + 1
    assert clock.now <= 20.0


def test_the_looks_are_counted_from_round_2s_costs_where_its_windows_cost_more() -> None:
    # Round 1 costs 1 s a measurement, round 2 (its windows sized from round 1's noise) 2 s. By
    # round 1's costs, 13 s pay for 4 rounds (3 looks); after round 2, the 4 s left pay for none
    # more: one look, at 95%. With 16 s, the 7 s left pay for a third round: it runs, and the
    # rounds are looked at once, after it. The race stays open (a wide spread) throughout.
    spread = _rates([0.3, -0.2, 0.25, -0.15, 0.3, -0.2])
    for budget, calls in ((13.0, 6), (16.0, 9)):
        clock = _Clock()
        script = _Script({0: spread, BASELINE: [100.0] * 6}, clock, [1.0, 1.0, 1.0, 2.0])
        study = rated_study({0: 110.0})
        remeasure_finalists(
            script, _plan(finalists=1, rounds=2), StudyStore(study), Reporter(), budget_s=budget, clock=clock
        )
        assert len(script.calls) == calls and clock.now <= budget, budget
        assert study.user_attrs["rounds_looks"] == 1 and study.user_attrs["rounds_look"] == 1, budget
        fit = rounds_fit({f.number: f for f in read_study(study).finalists}, 1, 1)
        assert fit is not None and fit.level == pytest.approx(1 - ERROR_RATE)


def test_rounds_that_end_before_their_first_look_are_looked_at_once() -> None:
    # Three rounds asked for, predicted at 1.15 s a measurement: 16 s pay for 4 rounds (2 looks).
    # Round 1 costs 1 s a measurement, round 2 3 s: 12 s spent, and round 3 (9 s) does not fit.
    # The rounds end before the look they were asked for, so the look after round 2 is the only one.
    clock = _Clock()
    script = _Script({0: _rates([0.3, 0.28]), BASELINE: [100.0, 99.0]}, clock, [1.0, 1.0, 1.0, 3.0])
    study = rated_study({0: 130.0})
    predicted = {n: 1.15 for n in (0, BASELINE, BASELINE_AGAIN)}
    assert planned_rounds(predicted, predicted, 3, 16.0) == 4
    remeasure_finalists(
        script, _plan(finalists=1, rounds=3), StudyStore(study), Reporter(), budget_s=16.0, clock=clock
    )
    assert len(script.calls) == 6 and study.user_attrs["rounds_looks"] == 1
    assert study.user_attrs["rounds_look"] == 1


def test_a_round_the_time_left_cannot_pay_for_is_cut_to_the_leader_and_the_baseline() -> None:
    # Round 1 of three trials and the baseline's pair took 2 s a measurement (10 s), twice what
    # was predicted; 17 s pay for a second round of the leader and the baseline's pair only, and
    # nothing more after it.
    clock = _Clock()
    script = _Script(
        {0: _rates([0.3, 0.3, 0.3]), 1: [90.0] * 3, 2: [85.0] * 3, BASELINE: [100.0, 101.0, 99.0]}, clock, 2.0
    )
    study = rated_study({0: 130.0, 1: 90.0, 2: 85.0})
    remeasure_finalists(
        script, _plan(finalists=3, rounds=2), StudyStore(study), Reporter(), budget_s=17.0, clock=clock
    )
    assert script.calls[:5] == round_order([0, 1, 2, BASELINE, BASELINE_AGAIN], 1)
    assert sorted(script.calls[5:]) == sorted([0, BASELINE, BASELINE_AGAIN])
    assert clock.now <= 17.0


def test_the_looks_the_budget_allows_set_every_intervals_level() -> None:
    script = _Script({0: _rates([0.2, 0.22, 0.19]), BASELINE: [100.0, 101.0, 99.0]})
    study = rated_study({0: 120.0})
    remeasure_finalists(script, _plan(finalists=1, rounds=2), StudyStore(study), Reporter())
    looks, look = study.user_attrs["rounds_looks"], study.user_attrs["rounds_look"]
    fit = rounds_fit({f.number: f for f in read_study(study).finalists}, looks, look)
    # each look's level is the one the looks' joint bounds give it (`autotune.measure.looks`)
    assert looks > 1 and fit is not None and fit.level == look_level(looks, look)
    if look == 1:
        assert fit.level == pytest.approx(1 - ERROR_RATE * FIRST_LOOK_SHARE)
    else:  # stricter than the first look, looser than a Bonferroni share of the rest
        assert (
            1 - ERROR_RATE * FIRST_LOOK_SHARE
            < fit.level
            < 1 - ERROR_RATE * (1 - FIRST_LOOK_SHARE) / (looks - 1)
        )
    answer = _answer(study)
    assert answer.choice is not None and answer.choice.speedup is not None
    stated = answer.choice.speedup
    own = fit.ratio(0, BASELINE)
    assert own is not None and (stated.low, stated.high) == pytest.approx((own.low, own.high))


# -- a round's window ------------------------------------------------------------------------------


def test_a_rounds_window_buys_the_most_precision_per_second() -> None:
    settings = MeasureSettings()  # 30 steps, 60 s, 3%
    # 0.1 s steps whose throughput spreads 10% from step to step; 0.5 s of set-up and warm-up
    pace = Pace(step_s=0.1, spread=0.10, fixed_s=0.5)
    first = round_window(settings, pace, None)
    # a count fixed before the window starts (no stopping rule), bounded by the search's seconds:
    # before the rounds have a noise, one step's spread stands for it (sqrt(0.5 / 0.1), rounded up)
    assert first == {
        "min_measure_steps": 3,
        "measure_steps": 3,
        "max_seconds": 60.0,
        "eager_settle_steps": ROUND_EAGER_WARMUP_STEPS,
    }

    def fitted(noise: float) -> Any:
        return SimpleNamespace(noise=noise)

    def steps(window: dict[str, Any]) -> int:
        assert window["min_measure_steps"] == window["measure_steps"]
        return int(window["measure_steps"])

    def best(noise: float, most: int = 10) -> int:
        # the steps whose measurement variance times its cost is least, by brute force
        def loss(n: int) -> float:
            return (noise**2 + pace.spread**2 / n) * (pace.fixed_s + n * pace.step_s)  # type: ignore[operator]

        return min(range(ROUND_MIN_STEPS, most + 1), key=loss)

    # the quieter the rounds are between processes, the more a window's own noise counts
    for noise in (0.2, 0.08, 0.05, 0.03):
        assert abs(steps(round_window(settings, pace, fitted(noise))) - best(noise)) <= 1
    assert steps(round_window(settings, pace, fitted(0.05))) > steps(
        round_window(settings, pace, fitted(0.2))
    )
    # at most a third of the search's window; the least where the spread is not known
    assert steps(round_window(settings, pace, fitted(0.005))) == 10
    assert steps(round_window(settings, Pace(0.1, None, 0.5), fitted(0.01))) == ROUND_MIN_STEPS
    # the budget's seconds per measurement bound the steps, never under the least
    assert steps(round_window(settings, pace, fitted(0.01), seconds=0.55)) == 5
    assert steps(round_window(settings, pace, fitted(0.01), seconds=0.05)) == ROUND_MIN_STEPS
    # the rounds pass it to every measurement
    script = _Script({0: [200.0] * 3, BASELINE: [100.0, 104.0, 98.0]})
    remeasure_finalists(script, _plan(finalists=1, rounds=2), StudyStore(rated_study({0: 200.0})), Reporter())
    assert script.windows and all(w is not None and steps(w) >= ROUND_MIN_STEPS for w in script.windows)


def test_a_tight_budget_never_cuts_a_rounds_window_under_its_least_steps() -> None:
    # 10 s of budget for two contestants and the baseline's pair at 2.6 s a measurement: the
    # window seconds left per measurement are less than one step. Each window still holds the
    # least steps, fixed in advance (a window cut by seconds held a single step after the warm-up).
    clock = _Clock()
    script = _Script({0: _rates([0.3, -0.2, 0.25]), BASELINE: [100.0] * 3}, clock, 1.0)
    study = rated_study({0: 110.0}, first_step_s=2.0)
    remeasure_finalists(
        script, _plan(finalists=1, rounds=2), StudyStore(study), Reporter(), budget_s=10.0, clock=clock
    )
    assert script.windows
    for window in script.windows:
        assert window is not None
        assert window["min_measure_steps"] == window["measure_steps"] == ROUND_MIN_STEPS
        assert window["max_seconds"] == MeasureSettings().max_seconds


def test_a_study_without_rounds_looks_reads_as_one_look() -> None:
    fit = fit_rounds([], looks=None)
    assert fit is None and look_level(None) == 0.95


def test_a_rounds_prediction_pays_the_search_warm_up_excess_again() -> None:
    # A data-loader worker's start (4 s of the search's warm-up beyond its steady steps) is paid
    # again by every fresh process a round starts: a round's prediction carries it.
    settings = MeasureSettings()
    attrs = {"tokens_per_s": 100.0, "setup_s": 0.5, "step_time_median_s": 0.1}
    plain = pace_of(trial_record(0, {}, "COMPLETE", attrs), settings).cost(settings)
    slow = pace_of(trial_record(0, {}, "COMPLETE", {**attrs, "warmup_excess_s": 4.0}), settings).cost(
        settings
    )
    assert slow == pytest.approx(plain + 4.0)


def test_the_first_rounds_windows_leave_room_for_the_rounds_a_decision_needs() -> None:
    # 20 s of budget, two contestants and the baseline's pair: the first round's windows may take
    # a share of half the budget (two rounds), after every measurement's set-up and warm-up.
    clock = _Clock()
    script = _Script({0: _rates([0.3, -0.2, 0.25, -0.15, 0.3]), BASELINE: [100.0] * 5}, clock, 1.0)
    study = rated_study({0: 110.0})
    remeasure_finalists(
        script, _plan(finalists=1, rounds=2), StudyStore(study), Reporter(), budget_s=20.0, clock=clock
    )
    pace = pace_of(trial_record(0, {}, "COMPLETE", study.trials[0].user_attrs), MeasureSettings())
    paces = dict.fromkeys((0, BASELINE, BASELINE_AGAIN), pace)
    per = window_seconds(20.0 / 2, list(paces), paces)
    assert per == pytest.approx((20.0 / 2 - 3 * pace.fixed_s) / 3)
    first = script.windows[0]
    assert first is not None
    wanted = pace.steps(MeasureSettings())
    assert first["measure_steps"] == max(ROUND_MIN_STEPS, min(wanted, int(per / pace.step_s)))


_SPREAD = {"rel_ci_halfwidth": 0.05, "measured_steps": 10}  # steps that spread from one to the next


def _first_steps(budget_s: float) -> int:
    """The first round's window steps (the best trial and the baseline's pair, 0.1 s steps after a
    2 s first step: a measurement pays 2.75 s besides its window, whose best count is 6 steps)."""
    clock = _Clock()
    script = _Script({0: _rates([0.3, -0.2, 0.25]), BASELINE: [100.0] * 3}, clock, 1.0)
    study = rated_study({0: 110.0}, first_step_s=2.0, window=_SPREAD)
    remeasure_finalists(
        script, _plan(finalists=1, rounds=2), StudyStore(study), Reporter(), budget_s=budget_s, clock=clock
    )
    first = script.windows[0]
    assert first is not None and first["min_measure_steps"] == first["measure_steps"]
    return int(first["measure_steps"])


def test_the_first_windows_leave_room_for_a_third_round_where_the_least_windows_pay_for_it() -> None:
    # At the least windows a measurement costs 2.75 + 2 x 0.1 s, a round of three 8.85 s: 26.55 s pay
    # for two rounds and a third of the best trial and the baseline's pair.
    study = rated_study({0: 110.0}, first_step_s=2.0, window=_SPREAD)
    settings = MeasureSettings()
    record = trial_record(0, {}, "COMPLETE", study.trials[0].user_attrs)
    paces = {n: pace_of(record, settings) for n in (0, BASELINE, BASELINE_AGAIN)}
    assert paces[0].fixed_s == pytest.approx(2.75) and paces[0].steps(settings) == 6
    assert sized_rounds(2, paces, paces, settings, 26.6) == 3
    assert sized_rounds(2, paces, paces, settings, 26.5) == 2
    assert sized_rounds(2, paces, paces, settings, None) == 2
    assert sized_rounds(1, paces, paces, settings, 26.5) == 2  # two rounds at least
    # a third round's room cuts the first windows to the least steps; without it they hold the best
    assert _first_steps(27.0 / (1 - BUDGET_RESERVE)) == ROUND_MIN_STEPS  # past the reserve
    assert _first_steps(26.0 / (1 - BUDGET_RESERVE)) == 6


def test_a_rounds_warm_up_is_one_step_where_the_searchs_later_warm_up_steps_ran_steady() -> None:
    settings = MeasureSettings()
    attrs = {**rated_study({0: 120.0}).trials[0].user_attrs, "first_step_s": 0.5, "warmup_steps": 3}
    steady = pace_of(trial_record(0, {}, "COMPLETE", {**attrs, "warmup_s": 0.5 + 0.1 + 0.104}), settings)
    assert steady.warmup_steps == 1 and steady.fixed_s == pytest.approx(0.5 + 0.5 + 0.15)
    assert round_window(settings, steady, None)["eager_settle_steps"] == 1
    # a second step still slower than steady ones (allocations, a worker's first batches): two
    slow = pace_of(trial_record(0, {}, "COMPLETE", {**attrs, "warmup_s": 0.5 + 0.13 + 0.1}), settings)
    assert slow.warmup_steps == ROUND_EAGER_WARMUP_STEPS == 2
    assert slow.fixed_s == pytest.approx(0.5 + 0.5 + 0.1 + 0.15)
    assert round_window(settings, slow, None)["eager_settle_steps"] == 2
    # no warm-up on record, or one step of it: two
    for missing in ({}, {"warmup_steps": 1, "warmup_s": 0.5}):
        record = trial_record(0, {}, "COMPLETE", {**attrs, "warmup_steps": None, **missing})
        assert pace_of(record, settings).warmup_steps == 2
    # never more than the settings' own settling steps
    one = MeasureSettings(settle_steps=1)
    assert round_window(one, slow, None)["eager_settle_steps"] == 1


@pytest.mark.parametrize(
    ("logs", "rounds"),
    [
        # no faster than the defaults, and a wide interval after the two rounds asked for: measured
        # on (the budget pays for 6) until the stated interval is within 1.15x either side
        ([0.1, -0.12] * 6, 4),
        # no faster than the defaults, and already narrow: the two rounds asked for
        ([0.004, -0.006] * 6, 2),
    ],
)
def test_a_keep_the_defaults_answer_is_measured_on_while_its_interval_is_wide(
    logs: list[float], rounds: int
) -> None:
    clock = _Clock()
    script = _Script({0: _rates(logs), BASELINE: [100.0] * 12}, clock, 1.0)
    study = rated_study({0: 105.0})
    remeasure_finalists(
        script, _plan(finalists=1, rounds=2), StudyStore(study), Reporter(), budget_s=20.0, clock=clock
    )
    assert clock.now <= 20.0
    assert planned_rounds({0: 0, -1: 0, -2: 0}, {0: 1.0, -1: 1.0, -2: 1.0}, 2, 20.0) == 6
    assert len(_rounds_of(study)[0]) == rounds
    answer = _answer(study)
    assert answer.choice is not None and answer.choice.is_defaults
    stated = answer.alternative.speedup if answer.alternative is not None else None
    assert stated is not None and stated.low is not None and stated.high is not None
    assert stated.rounds == rounds and stated.high / stated.low <= 1.15**2
