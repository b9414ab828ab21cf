"""Whether more rounds could decide an open question (`could_decide`) is judged at the confidence
level of the look those rounds end at, and the rounds' plan (`next_round`) asks it so."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from autotune.driver import sequential
from autotune.driver.questions import Question, could_decide
from autotune.driver.sequential import Rounds, next_round
from autotune.measure.looks import look_level
from autotune.measure.rounds import BASELINE, BASELINE_AGAIN, Cell, RoundsFit, fit_rounds
from autotune.measure.stats import MIN_GAIN, Speedup


def _fit(rounds: int = 3, speedup: float = 1.1, noise: float = 0.04, seed: int = 0) -> RoundsFit:
    rng = random.Random(seed)
    cells = [
        Cell(number, r, position, level * math.exp(rng.gauss(0, noise)))
        for r in range(1, rounds + 1)
        for position, (number, level) in enumerate(
            [(0, 100.0 * speedup), (BASELINE, 100.0), (BASELINE_AGAIN, 100.0)]
        )
    ]
    fit = fit_rounds(cells, robust=False, looks=4, look=1)
    assert fit is not None
    return fit


def _question(ratio: float, se: float = 0.02) -> Question:
    speedup = Speedup(ratio, ratio * 0.9, ratio * 1.1, 3, 5, se)
    return Question((0, BASELINE, BASELINE_AGAIN), speedup, 1 + MIN_GAIN, "open")


def test_a_question_is_judged_at_the_level_it_is_given() -> None:
    fit = _fit()
    extra, racing = 2, 3
    first, later = look_level(4, 1), look_level(4, 3)
    assert fit.level == first < later

    def decidable(ratio: float, level: float | None = None) -> bool:
        return could_decide(_question(ratio), fit, extra, racing, level)

    # the least ratio that the fit's own level (the first look's) would call decidable
    low, high = 1 + MIN_GAIN, 2.0
    assert not decidable(low) and decidable(high)
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (low, middle) if decidable(middle) else (middle, high)
    assert decidable(high, level=first)
    assert not decidable(high, level=later)  # a stricter look asks for a larger margin


def test_the_plan_judges_more_rounds_at_the_level_of_the_look_they_end_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fit = _fit(speedup=1.08, noise=0.1, seed=2)  # its speedup over the baseline: not decided
    rounds = Rounds({0: ({}, False), BASELINE: ({}, True), BASELINE_AGAIN: ({}, True)}, looks=5, look=1)
    for cell in fit.cells:
        rounds.scores.setdefault(cell.number, {})[cell.round] = cell.value
    levels: list[Any] = []

    def judged(
        question: Question, fit_: RoundsFit, extra: int, racing: int, level: float | None = None
    ) -> bool:
        levels.append((extra, level))
        return True

    monkeypatch.setattr(sequential, "could_decide", judged)
    planned = next_round(rounds, fit, keeping={0}, max_rounds=5, round_number=3, left_s=None, predicted={})
    assert planned is not None and levels
    assert all(extra == 2 and level == look_level(5, 3) for extra, level in levels)
