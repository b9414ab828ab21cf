"""The finalists' re-measurement rounds on a fake clock: who is measured in which round, who wins."""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from autotune.config import MeasureSettings
from autotune.driver.answer import decide
from autotune.driver.finalists import (
    BASELINE,
    BASELINE_AGAIN,
    FIRST_ROUND_CI,
    ROUND_CI_CAP,
    ROUND_EAGER_WARMUP_STEPS,
    ROUND_MIN_STEPS,
    remeasure_finalists,
    round_order,
    round_window,
)
from autotune.measure.stats import paired_speedup
from autotune.progress import Reporter
from autotune.records import AA, KEEP_DEFAULTS, read_study
from autotune.study.store import read_trials


def _study(rates: dict[int, float]) -> optuna.Study:
    """A study whose trials (data-loader workers as their numbers' tags: a knob that leaves the
    training math alone) measured `rates` (number -> tok/s)."""
    study = optuna.create_study(direction="maximize")
    for number, rate in rates.items():
        study.add_trial(
            optuna.trial.create_trial(
                params={"dataloader_num_workers": number + 1},
                distributions={"dataloader_num_workers": optuna.distributions.IntDistribution(1, 64)},
                value=rate,
                user_attrs={"tokens_per_s": rate, "feasible": True, "peak_memory_bytes": 1},
            )
        )
    study.set_user_attr(
        "baseline", {"params": {"dataloader_num_workers": 0}, "tokens_per_s": 100.0, "peak_memory_bytes": 1}
    )
    return study


def _plan(finalists: int, rounds: int) -> Any:
    return SimpleNamespace(
        config=SimpleNamespace(finalists=finalists, finalist_rounds=rounds, measure=MeasureSettings())
    )


class _Script:
    """A fake measurement: each contestant's tokens/s per round from a table (the baseline's second
    measurement, the A/A pair, as its first unless given), who was measured in each round, and the
    window each was measured with."""

    def __init__(self, rates: dict[int, list[float]]) -> None:
        self.rates = rates
        if BASELINE in rates and BASELINE_AGAIN not in rates:
            self.rates[BASELINE_AGAIN] = rates[BASELINE]
        self.calls: list[int] = []
        self.windows: list[dict[str, float] | None] = []

    def __call__(
        self,
        params: dict[str, Any],
        number: int,
        verbatim: bool = False,
        window: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        self.calls.append(number)
        self.windows.append(window)
        count = self.calls.count(number)
        rate = self.rates[number][min(count, len(self.rates[number])) - 1]
        return {"tokens_per_s": rate, "samples_per_s": rate / 10, "peak_memory_bytes": 1}


def _split(calls: list[int], contestants: int, rounds: int) -> tuple[list[int], list[int]]:
    """The measurements of the first `rounds` rounds, and those of the extra rounds."""
    return calls[: contestants * rounds], calls[contestants * rounds :]


def _rates(logs: list[float], base: float = 100.0) -> list[float]:
    """Rates whose ratios to a constant `base` have these logarithms."""
    return [base * math.exp(x) for x in logs]


def test_extra_rounds_race_only_the_leader_against_the_baseline() -> None:
    # Trial 0 leads the others clearly, and the baseline by about 11%, but its three rounds spread
    # (log ratios 0.20, 0.02, 0.12): the interval still reaches below the gain worth a change,
    # while six rounds at that spread would settle it. One more round of trial 0 and the baseline
    # alone decides it; then the rounds stop.
    leader = _rates([0.20, 0.02, 0.12, 0.14, 0.13, 0.12])
    baseline = [100.0] * 6
    script = _Script({0: leader, 1: [60.0] * 6, 2: [50.0] * 6, BASELINE: baseline})
    study = _study({0: 120.0, 1: 110.0, 2: 100.0})
    remeasure_finalists(script, _plan(finalists=3, rounds=3), study, Reporter())
    # Trials 1 and 2 are decided slower than trial 0 after two rounds (the noise pooled over every
    # contestant decides what one pair's two rounds could not): they leave the rounds then.
    first, rest = _split(script.calls, contestants=5, rounds=2)
    assert sorted(first) == sorted([0, 1, 2, BASELINE, BASELINE_AGAIN] * 2)
    third, extra = rest[:3], rest[3:]
    assert sorted(third) == sorted([0, BASELINE, BASELINE_AGAIN])
    assert sorted(extra) == sorted([0, BASELINE, BASELINE_AGAIN])
    winner = study.user_attrs["winner"]
    assert winner["number"] == 0 and winner["speedup"]["rounds"] == 4
    assert winner["speedup"]["beats_baseline"] is True
    finalists = {f["number"]: f for f in study.user_attrs["finalists"]}
    assert finalists[2]["rounds"] == [1, 2] and finalists[1]["rounds"] == [1, 2]
    assert finalists[0]["rounds"] == [1, 2, 3, 4]
    assert finalists[BASELINE_AGAIN]["rounds"] == [1, 2, 3, 4]
    pairs = list(zip(leader[:4], baseline[:4], strict=True))
    expected = math.exp(statistics.fmean(math.log(t / b) for t, b in pairs))
    assert winner["speedup"]["ratio"] == pytest.approx(expected)


def test_a_decided_answer_ends_after_the_rounds() -> None:
    script = _Script({0: [200.0, 202.0, 199.0], 1: [150.0] * 3, BASELINE: [100.0, 101.0, 99.0]})
    study = _study({0: 200.0, 1: 150.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=3), study, Reporter())
    # trial 1, decided slower than trial 0 after two rounds, is not measured in the third
    assert script.calls.count(1) == 2 and len(script.calls) == 4 * 2 + 3
    winner = study.user_attrs["winner"]
    assert winner["number"] == 0 and winner["speedup"]["beats_baseline"] is True


def test_a_lead_more_rounds_can_decide_races_the_top_two_without_the_rest() -> None:
    # No baseline (a --no-baseline search): trial 0 leads trial 1 by about 7% with some spread
    # (log ratios 0.11, 0.03, 0.07: the interval holds 1), trial 2 is far behind. The extra round
    # measures 0 and 1 alone, and decides the order.
    script = _Script({0: _rates([0.11, 0.03, 0.07, 0.07]), 1: [100.0] * 4, 2: [60.0] * 4})
    study = _study({0: 120.0, 1: 118.0, 2: 100.0})
    study.set_user_attr("baseline", {})
    remeasure_finalists(script, _plan(finalists=3, rounds=3), study, Reporter())
    first, extra = script.calls[:8], script.calls[8:]
    assert sorted(first) == sorted([0, 1, 2] * 2 + [0, 1])  # trial 2 is out after two rounds
    assert sorted(extra) == sorted([0, 1])
    winner = study.user_attrs["winner"]
    assert winner["number"] == 0 and "speedup" not in winner
    assert "either is as good" not in winner["verdict"]


def test_a_tie_is_not_raced() -> None:
    # Two configurations alike (what `make run` often meets): their ratio sits at 1 with a few
    # percent of spread, and no number of rounds up to twice as many could order them. The answer
    # comes after the rounds asked for, and says either is as good.
    script = _Script({0: [120.0, 110.0, 121.0], 1: [112.0, 119.0, 114.0], 2: [60.0] * 3})
    study = _study({0: 120.0, 1: 118.0, 2: 100.0})
    study.set_user_attr("baseline", {})
    remeasure_finalists(script, _plan(finalists=3, rounds=3), study, Reporter())
    assert len(script.calls) == 3 * 2 + 2  # trial 2 is out after two rounds
    assert "either is as good" in study.user_attrs["winner"]["verdict"]


def test_a_leader_no_faster_than_the_baseline_is_not_raced_against_it() -> None:
    # The leader measures at the baseline's speed, round by round around it: its speedup is
    # undecided and stays so; the answer keeps the defaults after the rounds asked for.
    script = _Script({0: [103.0, 97.0, 102.0], 1: [60.0] * 3, BASELINE: [100.0, 100.0, 100.0]})
    study = _study({0: 100.0, 1: 60.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=3), study, Reporter())
    assert len(script.calls) == 4 * 2 + 3  # trial 1 is out after two rounds
    winner = study.user_attrs["winner"]
    assert winner["speedup"]["beats_baseline"] is False
    answer = decide(read_study(study), read_trials(study))
    assert answer.rule == KEEP_DEFAULTS and answer.keeps_defaults
    assert "nothing beat the defaults measurably" in answer.verdict


def test_a_race_stops_when_a_round_leaves_it_undecidable() -> None:
    # Trial 0's lead looked decidable after three rounds, then a fourth round reversed it: at that
    # spread six rounds could not settle the order, so the race ends after round 4.
    script = _Script({0: _rates([0.14, 0.04, 0.09, -0.22, 0.1, 0.1]), 1: [100.0] * 6})
    study = _study({0: 120.0, 1: 118.0})
    study.set_user_attr("baseline", {})
    remeasure_finalists(script, _plan(finalists=2, rounds=3), study, Reporter())
    assert script.calls.count(0) == script.calls.count(1) == 4
    finalists = {f["number"]: f for f in study.user_attrs["finalists"]}
    assert finalists[0]["rounds"] == finalists[1]["rounds"] == [1, 2, 3, 4]


@pytest.mark.parametrize("count", [2, 3, 4, 5, 6])
def test_a_round_order_puts_every_contestant_in_every_position(count: int) -> None:
    contestants = [10 * i for i in range(count)]
    rows = [round_order(contestants, r) for r in range(1, count + 1)]
    for row in rows:
        assert sorted(row) == contestants
    for position in range(count):
        assert sorted(row[position] for row in rows) == contestants
    # Who follows whom is balanced too: over n rounds for an even n, over 2n for an odd n.
    span = count if count % 2 == 0 else 2 * count
    follows = [(row[i], row[i + 1]) for r in range(1, span + 1) for row in [round_order(contestants, r)]
               for i in range(count - 1)]  # fmt: skip
    assert len(set(follows)) == count * (count - 1)
    assert len(follows) == span // count * count * (count - 1)


def test_the_rounds_rotate_every_contestant_through_every_position() -> None:
    # Today's code measured trial 5, trial 0, trial 7, then the baseline in every round: a position
    # effect entered every paired ratio the same way.
    # Two trials alike (neither leaves early), the baseline and its A/A pair: four rounds of four.
    script = _Script(
        {0: [200.0, 190.0, 205.0, 196.0], 1: [195.0, 200.0, 190.0, 199.0], BASELINE: [100.0] * 4}
    )
    study = _study({0: 200.0, 1: 195.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=4), study, Reporter())
    rounds = [script.calls[i : i + 4] for i in range(0, 16, 4)]
    for position in range(4):
        assert sorted(r[position] for r in rounds) == sorted([0, 1, BASELINE, BASELINE_AGAIN])


def test_a_trial_of_the_baselines_configuration_is_not_a_finalist() -> None:
    # Trial 0 ran the baseline's own configuration (it sampled the baseline's values): it is the
    # baseline, measured beside the finalists anyway, never a contestant against it.
    study = _study({0: 200.0, 1: 150.0, 2: 140.0})
    stored = study.trials[0]
    study.set_user_attr(
        "baseline",
        {"params": dict(stored.params), "tokens_per_s": 100.0, "peak_memory_bytes": 1},
    )
    script = _Script({1: [150.0] * 3, 2: [140.0] * 3, BASELINE: [100.0] * 3})
    remeasure_finalists(script, _plan(finalists=2, rounds=3), study, Reporter())
    assert 0 not in script.calls and sorted(set(script.calls)) == sorted([1, 2, BASELINE, BASELINE_AGAIN])


class _LastPaysMore(_Script):
    """Equal contestants, but whichever is measured last in a round runs 5% slower (a position
    effect: the process before it, the page cache, the allocator)."""

    def __init__(self, contestants: int, rate: float = 100.0) -> None:
        super().__init__({})
        self.contestants, self.rate = contestants, rate
        self.in_round: list[int] = []

    def __call__(
        self,
        params: dict[str, Any],
        number: int,
        verbatim: bool = False,
        window: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        self.calls.append(number)
        last = len(self.calls) % self.contestants == 0
        rate = self.rate * (0.95 if last else 1.0)
        return {"tokens_per_s": rate, "samples_per_s": rate / 10, "peak_memory_bytes": 1}


def test_a_position_effect_is_not_claimed_as_a_speedup_between_equal_configurations() -> None:
    # Two trials and the baseline, all equally fast. Measured in one fixed order, the baseline
    # (always last) paid the 5% every round and both trials "beat" it by 1.05x with a tight interval.
    script = _LastPaysMore(contestants=4)  # two trials, the baseline and its A/A pair
    study = _study({0: 100.0, 1: 100.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=3), study, Reporter())
    winner = study.user_attrs["winner"]
    assert winner["speedup"]["beats_baseline"] is False
    answer = decide(read_study(study), read_trials(study))
    assert answer.keeps_defaults and "beats the defaults" not in answer.verdict


class _PositionalBaseline(_Script):
    """The baseline's first measurement of each round runs 4% faster than its second (a position
    effect); trial 0 is 1.04x the first, round after round, within a fraction of a percent."""

    def __call__(
        self,
        params: dict[str, Any],
        number: int,
        verbatim: bool = False,
        window: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        self.calls.append(number)
        self.windows.append(window)
        count = self.calls.count(number)
        rate = {0: 104.0 + 0.1 * (count % 2), BASELINE: 100.0, BASELINE_AGAIN: 96.0}[number]
        return {"tokens_per_s": rate, "samples_per_s": rate / 10, "peak_memory_bytes": 1}


def test_the_aa_pair_widens_every_interval_and_the_answer_states_it() -> None:
    # Paired with the baseline alone, trial 0's 1.04x has an interval far above 1.01: a decided
    # speedup. The baseline against itself differed by 4% every round: an instrument that does
    # that cannot vouch for a 4% speedup, and the answer says why it keeps the defaults.
    script = _PositionalBaseline({})
    study = _study({0: 104.0})
    remeasure_finalists(script, _plan(finalists=1, rounds=3), study, Reporter())
    assert sorted(script.calls) == sorted([0, BASELINE, BASELINE_AGAIN] * 3)
    winner = study.user_attrs["winner"]
    assert winner["speedup"]["beats_baseline"] is False
    assert winner["speedup"]["aa_offset"] == pytest.approx(math.log(100 / 96))
    answer = decide(read_study(study), read_trials(study))
    assert answer.keeps_defaults and answer.rule == KEEP_DEFAULTS
    assert answer.aa is not None and answer.aa.rounds == 3
    assert answer.aa.mean_difference == pytest.approx(100 / 96 - 1)
    assert "differed by 4.2% on average" in answer.aa.describe()
    assert answer.alternative is not None and answer.alternative.speedup is not None
    assert answer.alternative.speedup.low is not None and answer.alternative.speedup.low < 1.01
    # the same rounds without the widening would have claimed it
    unwidened = paired_speedup({r: 104.0 for r in (1, 2, 3)}, {r: 100.0 for r in (1, 2, 3)})
    assert unwidened is not None and unwidened.beats_baseline


def test_a_rounds_window_follows_the_aa_spread() -> None:
    settings = MeasureSettings()  # 30 steps, 60 s, 3%
    first = round_window(settings, None)
    assert first == {
        "min_steps": ROUND_MIN_STEPS,
        "max_steps": 10,
        "max_seconds": 20.0,
        "target_rel_ci": FIRST_ROUND_CI,
        "eager_warmup_steps": ROUND_EAGER_WARMUP_STEPS,
    }
    # A/A pairs 8% apart: a window needs no better than 4%; 1% apart: the run's own 3%;
    # 40% apart: no looser than the cap.
    assert round_window(settings, AA(0.0, 0.08, 2, 0.08))["target_rel_ci"] == pytest.approx(0.04)
    assert round_window(settings, AA(0.0, 0.01, 2, 0.01))["target_rel_ci"] == pytest.approx(0.03)
    assert round_window(settings, AA(0.0, 0.40, 2, 0.40))["target_rel_ci"] == ROUND_CI_CAP
    # one A/A round gives no spread yet
    assert round_window(settings, AA(0.02, 0.0, 1, 0.02))["target_rel_ci"] == FIRST_ROUND_CI
    # the rounds pass it to every measurement
    script = _Script({0: [200.0] * 3, BASELINE: [100.0, 104.0, 98.0]})
    remeasure_finalists(script, _plan(finalists=1, rounds=3), _study({0: 200.0}), Reporter())
    assert all(w is not None and w["max_steps"] == 10 for w in script.windows)


def _math_study(rates: dict[int, tuple[str, float]]) -> optuna.Study:
    """Trials of a precision (`rates`: number -> (precision, tok/s)), a baseline of fp32."""
    study = optuna.create_study(direction="maximize")
    for number, (precision, rate) in rates.items():
        study.add_trial(
            optuna.trial.create_trial(
                params={"precision": precision, "dataloader_num_workers": number + 1},
                distributions={
                    "precision": optuna.distributions.CategoricalDistribution(["fp32", "bf16"]),
                    "dataloader_num_workers": optuna.distributions.IntDistribution(1, 64),
                },
                value=rate,
                user_attrs={"tokens_per_s": rate, "feasible": True, "peak_memory_bytes": 1},
            )
        )
    study.set_user_attr(
        "baseline",
        {
            "params": {"precision": "fp32", "dataloader_num_workers": 0},
            "tokens_per_s": 100.0,
            "peak_memory_bytes": 1,
        },
    )
    return study


def test_the_fastest_math_keeping_trial_stays_while_the_leader_changes_the_math() -> None:
    # Trial 0 (bf16) leads both fp32 trials by 2x: both are decided slower after two rounds. Trial 1,
    # the fastest that keeps the math, stays: the answer compares the math change with it.
    study = _math_study({0: ("bf16", 200.0), 1: ("fp32", 100.0), 2: ("fp32", 90.0)})
    script = _Script({0: [200.0] * 3, 1: [100.0] * 3, 2: [90.0] * 3, BASELINE: [95.0] * 3})
    remeasure_finalists(script, _plan(finalists=3, rounds=3), study, Reporter())
    assert script.calls.count(2) == 2
    assert script.calls.count(1) == script.calls.count(0) == 3


def test_an_undecided_answer_gets_up_to_six_rounds_after_the_two_asked_for() -> None:
    # Trial 0 about 1.15x the baseline with a wide spread: undecided after two rounds, and after
    # four (where twice the two asked for would have stopped); the fifth decides it.
    logs = [0.03, 0.27, 0.15, 0.06, 0.18, 0.25]
    baseline = [-0.03, -0.03, -0.02, 0.01, -0.02, 0.01]
    script = _Script({0: _rates(logs), BASELINE: _rates(baseline)})
    study = _study({0: 115.0})
    remeasure_finalists(script, _plan(finalists=1, rounds=2), study, Reporter())
    assert script.calls.count(0) == 5
    winner = read_study(study).winner
    assert winner is not None and winner.speedup is not None
    assert winner.speedup["beats_baseline"] is True and winner.speedup["rounds"] == 5
