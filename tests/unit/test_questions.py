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
from autotune.measure.stats import MIN_GAIN, Speedup, t_quantile


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


def _question(fit: RoundsFit, margin_in_se: float, extra: int, racing: int) -> Question:
    """A question whose margin is `margin_in_se` standard errors of what `extra` more rounds give."""
    se = 0.02
    rounds = 3
    after = se * math.sqrt(rounds / (rounds + extra))
    ratio = (1 + MIN_GAIN) * math.exp(
        margin_in_se * min(after, fit.scale * fit.sigma * math.sqrt(2 / (rounds + extra)))
    )
    speedup = Speedup(ratio, ratio * 0.9, ratio * 1.1, rounds, fit.df, se)
    return Question((0, BASELINE, BASELINE_AGAIN), speedup, 1 + MIN_GAIN, "open")


def test_a_question_is_judged_at_the_level_it_is_given() -> None:
    fit = _fit()
    extra, racing = 2, 3
    df = fit.df + extra * (racing - 1)
    first, later = look_level(4, 1), look_level(4, 3)
    assert later > first
    # a margin between the two levels' quantiles: decidable at the first look's, not at the later one's
    between = (t_quantile(0.5 + first / 2, df) + t_quantile(0.5 + later / 2, df)) / 2
    question = _question(fit, between, extra, racing)
    assert could_decide(question, fit, extra, racing)  # the fit's own level: the first look's
    assert could_decide(question, fit, extra, racing, level=first)
    assert not could_decide(question, fit, extra, racing, level=later)


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
