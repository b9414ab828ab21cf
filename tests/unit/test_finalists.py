"""The finalists' re-measurement rounds on a fake clock: who is measured in which round, who wins."""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from autotune.driver.finalists import BASELINE, remeasure_finalists
from autotune.progress import Reporter


def _study(rates: dict[int, float]) -> optuna.Study:
    """A study whose trials (batch sizes as their numbers' tags) measured `rates` (number -> tok/s)."""
    study = optuna.create_study(direction="maximize")
    for number, rate in rates.items():
        study.add_trial(
            optuna.trial.create_trial(
                params={"per_device_train_batch_size": number + 1},
                distributions={"per_device_train_batch_size": optuna.distributions.IntDistribution(1, 64)},
                value=rate,
                user_attrs={"tokens_per_s": rate, "feasible": True},
            )
        )
    study.set_user_attr("baseline", {"params": {"per_device_train_batch_size": 0}, "tokens_per_s": 100.0})
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


def test_extra_rounds_race_only_the_leader_against_the_baseline() -> None:
    # Trial 0 leads the others clearly, but by little over a noisy baseline: that speedup stays
    # undecided, so the extra rounds measure trial 0 and the baseline alone.
    noisy = [130.0, 95.0, 125.0, 100.0, 128.0, 99.0]
    baseline = [100.0, 104.0, 98.0, 101.0, 97.0, 103.0]
    script = _Script({0: noisy, 1: [60.0] * 6, 2: [50.0] * 6, BASELINE: baseline})
    study = _study({0: 120.0, 1: 110.0, 2: 100.0})
    remeasure_finalists(script, _plan(finalists=3, rounds=3), study, Reporter())
    first, extra = _split(script.calls, contestants=4, rounds=3)
    assert sorted(first) == sorted([0, 1, 2, BASELINE] * 3)
    assert sorted(extra) == sorted([0, BASELINE] * 3)  # up to twice the rounds in all
    winner = study.user_attrs["winner"]
    assert winner["number"] == 0 and winner["speedup"]["rounds"] == 6
    finalists = {f["number"]: f for f in study.user_attrs["finalists"]}
    assert finalists[1]["rounds"] == [1, 2, 3] and finalists[0]["rounds"] == [1, 2, 3, 4, 5, 6]
    pairs = list(zip(noisy, baseline, strict=True))
    expected = math.exp(statistics.fmean(math.log(t / b) for t, b in pairs))
    assert winner["speedup"]["ratio"] == pytest.approx(expected)


def test_a_decided_answer_ends_after_the_rounds() -> None:
    script = _Script({0: [200.0, 202.0, 199.0], 1: [150.0] * 3, BASELINE: [100.0, 101.0, 99.0]})
    study = _study({0: 200.0, 1: 150.0})
    remeasure_finalists(script, _plan(finalists=2, rounds=3), study, Reporter())
    assert len(script.calls) == 3 * 3
    winner = study.user_attrs["winner"]
    assert winner["number"] == 0 and winner["speedup"]["beats_baseline"] is True


def test_a_lead_too_close_to_call_races_the_top_two_without_the_rest() -> None:
    # No baseline (a --no-baseline search): trials 0 and 1 swap places round by round, trial 2 is
    # far behind. The extra rounds measure 0 and 1 alone, up to twice the rounds.
    script = _Script({0: [120.0, 110.0, 121.0] * 2, 1: [112.0, 119.0, 114.0] * 2, 2: [60.0] * 6})
    study = _study({0: 120.0, 1: 118.0, 2: 100.0})
    study.set_user_attr("baseline", {})
    remeasure_finalists(script, _plan(finalists=3, rounds=3), study, Reporter())
    first, extra = _split(script.calls, contestants=3, rounds=3)
    assert sorted(first) == sorted([0, 1, 2] * 3)
    assert sorted(extra) == sorted([0, 1] * 3)
    winner = study.user_attrs["winner"]
    assert "speedup" not in winner
    assert "either is as good" in winner["verdict"]


def test_a_leader_that_falls_back_hands_the_race_to_the_next() -> None:
    # Trial 0 leads on three rounds, then slows down; trial 1, raced beside it, overtakes it on the
    # medians of all their rounds and is the winner.
    script = _Script({0: [125.0, 100.0, 126.0, 90.0, 91.0, 89.0], 1: [118.0, 119.0, 117.0] * 2})
    study = _study({0: 120.0, 1: 118.0})
    study.set_user_attr("baseline", {})
    remeasure_finalists(script, _plan(finalists=2, rounds=3), study, Reporter())
    assert script.calls.count(0) > 3 and script.calls.count(1) == script.calls.count(0)
    assert study.user_attrs["winner"]["number"] == 1
