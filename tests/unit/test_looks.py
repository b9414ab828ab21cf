"""The rounds' repeated confidence intervals (`autotune.measure.looks`): the error rate spent over
the looks by their joint distribution, checked against simulated rounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.measure.looks import ERROR_RATE, FIRST_LOOK_SHARE, bounds, look_level

SIMULATED = 200_000


def _paths(looks: int, first_rounds: int, seed: int) -> np.ndarray:
    """Each simulated contrast's standardized estimate at every look: a sum of independent rounds,
    looked at after `first_rounds` rounds and then after every further round."""
    rounds = np.random.default_rng(seed).standard_normal((SIMULATED, first_rounds + looks - 1))
    sums = np.cumsum(rounds, axis=1)[:, first_rounds - 1 :]
    return sums / np.sqrt(np.arange(first_rounds, first_rounds + looks))


def _first_crossings(looks: int, first_rounds: int, seed: int) -> np.ndarray:
    """The share of paths that cross a look's bound first there, by look."""
    crossed = np.abs(_paths(looks, first_rounds, seed)) > np.array(bounds(looks))
    any_ = crossed.any(axis=1)
    first = np.argmax(crossed, axis=1)
    return np.bincount(first[any_], minlength=looks) / SIMULATED


def test_one_look_is_a_plain_95_percent_interval() -> None:
    assert look_level(1, 1) == look_level(1) == look_level(None) == pytest.approx(0.95)
    assert bounds(1) == pytest.approx((1.959964,), abs=1e-4)


def test_a_store_without_its_look_reads_every_look_at_a_bonferroni_share() -> None:
    for looks in (2, 3, 5, 11):
        assert look_level(looks) == pytest.approx(1 - ERROR_RATE / looks)


@pytest.mark.parametrize("looks", [2, 3, 5, 11])
def test_each_look_spends_its_part_of_the_error_rate(looks: int) -> None:
    # Rounds one apart from a first look after one round, as the bounds are computed: the first
    # look spends FIRST_LOOK_SHARE of the 5%, each later one an equal part of the rest, and all of
    # them together the 5% (a simulated path's chance to cross first at each look).
    parts = _first_crossings(looks, 1, seed=looks)
    expected = [ERROR_RATE * FIRST_LOOK_SHARE] + [ERROR_RATE * (1 - FIRST_LOOK_SHARE) / (looks - 1)] * (
        looks - 1
    )
    error = math.sqrt(ERROR_RATE / SIMULATED)
    assert parts == pytest.approx(expected, abs=4 * error)
    assert parts.sum() == pytest.approx(ERROR_RATE, abs=4 * error)
    assert look_level(looks, 1) == pytest.approx(1 - ERROR_RATE * FIRST_LOOK_SHARE)


@pytest.mark.parametrize("first_rounds", [2, 3, 5])
def test_looks_that_begin_after_more_rounds_are_held_at_least_as_surely(first_rounds: int) -> None:
    # The rounds asked for come before the first look: its later looks are more correlated with it
    # than the bounds assume, and the same bounds miss less often.
    for looks in (2, 5, 11):
        assert _first_crossings(looks, first_rounds, seed=100 + looks).sum() <= ERROR_RATE


def test_later_looks_are_narrower_than_a_bonferroni_share_would_make_them() -> None:
    # What the joint distribution buys: the later looks share the same error rate as a Bonferroni
    # bound would give them, at narrower bounds (the looks are correlated, not unrelated).
    for looks in (3, 5, 11):
        bonferroni = 1 - ERROR_RATE * (1 - FIRST_LOOK_SHARE) / (looks - 1)
        assert all(look_level(looks, look) < bonferroni for look in range(2, looks + 1))


def test_a_look_past_the_last_reads_as_the_last() -> None:
    assert look_level(3, 7) == look_level(3, 3)
    assert look_level(3, 0) == look_level(3, 1)


def test_the_normal_tail_agrees_with_the_error_function() -> None:
    from autotune.measure.looks import _upper

    points = np.linspace(-6, 6, 121)
    exact = np.array([math.erfc(x / math.sqrt(2)) / 2 for x in points])
    assert _upper(points) == pytest.approx(exact, rel=2e-7, abs=1e-12)
