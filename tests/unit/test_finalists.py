"""The finalists' re-measurement rounds on a fake clock: who is measured in which round, who wins."""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from autotune.driver.answer import decide
from autotune.driver.finalists import BASELINE, remeasure_finalists, round_order
from autotune.progress import Reporter
from autotune.records import KEEP_DEFAULTS, read_study
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
    return SimpleNamespace(config=SimpleNamespace(finalists=finalists, finalist_rounds=rounds))


class _Script:
    """A fake measurement: each contestant's tokens/s per round from a table, and who was measured
    in each round."""

    def __init__(self, rates: dict[int, list[float]]) -> None:
        self.rates = rates
        self.calls: list[int] = []

    def __call__(self, params: dict[str, Any], number: int, verbatim: bool = False) -> dict[str, Any]:
        self.calls.append(number)
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
    # Trial 0 leads the others clearly, and the baseline by about 13%, but its three rounds spread
    # (log ratios 0.17, 0.07, 0.12): the interval still reaches below the gain worth a change,
    # while six rounds at that spread would settle it. One more round of trial 0 and the baseline
    # alone decides it; then the rounds stop.
    leader = _rates([0.17, 0.07, 0.12, 0.14, 0.13, 0.12])
    baseline = [100.0] * 6
    script = _Script({0: leader, 1: [60.0] * 6, 2: [50.0] * 6, BASELINE: baseline})
    study = _study({0: 120.0, 1: 110.0, 2: 100.0})
    remeasure_finalists(script, _plan(finalists=3, rounds=3), study, Reporter())
    first, extra = _split(script.calls, contestants=4, rounds=3)
    assert sorted(first) == sorted([0, 1, 2, BASELINE] * 3)
    assert sorted(extra) == sorted([0, BASELINE])
    winner = study.user_attrs["winner"]
    assert winner["number"] == 0 and winner["speedup"]["rounds"] == 4
    assert winner["speedup"]["beats_baseline"] is True
    finalists = {f["number"]: f for f in study.user_attrs["finalists"]}
    assert finalists[1]["rounds"] == [1, 2, 3] and finalists[0]["rounds"] == [1, 2, 3, 4]
    pairs = list(zip(leader[:4], baseline[:4], strict=True))
    expected = math.exp(statistics.fmean(math.log(t / b) for t, b in pairs))
    assert winner["speedup"]["ratio"] == pytest.approx(expected)


def test_a_decided_answer_ends_after_the_rounds() -> None:
    script = _Script({0: [200.0, 202.0, 199.0], 1: [150.0] * 3, BASELINE: [100.0, 101.0, 99.0]})
    study = _study({0: 200.0, 1: 150.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=3), study, Reporter())
    assert len(script.calls) == 3 * 3
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
    first, extra = _split(script.calls, contestants=3, rounds=3)
    assert sorted(first) == sorted([0, 1, 2] * 3)
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
    assert len(script.calls) == 3 * 3
    assert "either is as good" in study.user_attrs["winner"]["verdict"]


def test_a_leader_no_faster_than_the_baseline_is_not_raced_against_it() -> None:
    # The leader measures at the baseline's speed, round by round around it: its speedup is
    # undecided and stays so; the answer keeps the defaults after the rounds asked for.
    script = _Script({0: [103.0, 97.0, 102.0], 1: [60.0] * 3, BASELINE: [100.0, 100.0, 100.0]})
    study = _study({0: 100.0, 1: 60.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=3), study, Reporter())
    assert len(script.calls) == 3 * 3
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
    script = _Script({0: [200.0] * 3, 1: [150.0] * 3, BASELINE: [100.0] * 3})
    study = _study({0: 200.0, 1: 150.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=3), study, Reporter())
    rounds = [script.calls[i : i + 3] for i in range(0, 9, 3)]
    for position in range(3):
        assert sorted(r[position] for r in rounds) == sorted([0, 1, BASELINE])


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
    assert 0 not in script.calls and sorted(set(script.calls)) == sorted([1, 2, BASELINE])


class _LastPaysMore(_Script):
    """Equal contestants, but whichever is measured last in a round runs 5% slower (a position
    effect: the process before it, the page cache, the allocator)."""

    def __init__(self, contestants: int, rate: float = 100.0) -> None:
        super().__init__({})
        self.contestants, self.rate = contestants, rate
        self.in_round: list[int] = []

    def __call__(self, params: dict[str, Any], number: int, verbatim: bool = False) -> dict[str, Any]:
        self.calls.append(number)
        last = len(self.calls) % self.contestants == 0
        rate = self.rate * (0.95 if last else 1.0)
        return {"tokens_per_s": rate, "samples_per_s": rate / 10, "peak_memory_bytes": 1}


def test_a_position_effect_is_not_claimed_as_a_speedup_between_equal_configurations() -> None:
    # Two trials and the baseline, all equally fast. Measured in one fixed order, the baseline
    # (always last) paid the 5% every round and both trials "beat" it by 1.05x with a tight interval.
    script = _LastPaysMore(contestants=3)
    study = _study({0: 100.0, 1: 100.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=3), study, Reporter())
    winner = study.user_attrs["winner"]
    assert winner["speedup"]["beats_baseline"] is False
    answer = decide(read_study(study), read_trials(study))
    assert answer.keeps_defaults and "beats the defaults" not in answer.verdict
