"""The confidence level of the rounds' intervals at each look (`look_level`): repeated confidence
intervals that hold the truth together, with probability 1 - `ERROR_RATE`, however the looks end
the rounds.

The rounds are looked at after the rounds asked for, then after every further round, and stop once
their questions are decided. Each look's estimate is built from the rounds before it and more, so
successive looks are strongly correlated: under the rounds' model a contrast's estimate after `r`
rounds is a sum of `r` independent rounds, and ``corr(Z_j, Z_k) = sqrt(r_j / r_k)``. The error rate
is spent over the looks by that joint distribution (the recursion of Armitage, McPherson and Rowe
on a grid), not by a Bonferroni bound that treats the looks as unrelated: the first look spends
`FIRST_LOOK_SHARE` of it, each later one an equal part of the rest, and each look's bound is the
one at which the chance of crossing it there, not having crossed an earlier one, is that part.

The looks are taken one round apart from a first look after one round: the looks of rounds that
begin after more (the rounds asked for) are more correlated than that, and the same bounds then hold
them with an error rate below `ERROR_RATE`. Each bound is a normal quantile; the rounds' intervals
take the Student-t quantile of the same level at their own degrees of freedom. Pure: numpy.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

import numpy as np

# The chance that any interval the rounds state misses the truth, over all the looks taken at them.
ERROR_RATE = 0.05
# The share of it spent on the first look: most answers are decided there, after the rounds asked
# for; the later looks share the rest.
FIRST_LOOK_SHARE = 0.7
# erfc(z) = t exp(-z^2 + sum_i c_i t^i) with t = 1 / (1 + z / 2): the fit's c_0 ... c_9.
_ERFC_FIT = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)
# The grid's points across a look's region of going on (its density is smooth: a few hundred do).
_GRID = 601


def look_level(looks: int | None, look: int | None = None) -> float:
    """The confidence level of the intervals of look `look` (1: the first) where the rounds may be
    looked at `looks` times (see the module docstring); `look` None (a store that did not record
    it): a Bonferroni share, ``1 - ERROR_RATE / looks``, which holds whichever look it was.
    `looks` None: one look."""
    count = max(1, looks or 1)
    if count == 1:
        return 1 - ERROR_RATE
    if look is None:
        return 1 - ERROR_RATE / count
    return _levels(count)[min(max(look, 1), count) - 1]


def bounds(looks: int) -> tuple[float, ...]:
    """Each look's two-sided normal bound on the standardized estimate, for `looks` looks."""
    count = max(1, looks)
    if count == 1:
        return _bounds((ERROR_RATE,))
    later = (1 - FIRST_LOOK_SHARE) * ERROR_RATE / (count - 1)
    return _bounds((ERROR_RATE * FIRST_LOOK_SHARE, *[later] * (count - 1)))


@functools.lru_cache(maxsize=64)
def _levels(looks: int) -> tuple[float, ...]:
    return tuple(2 * NormalDist().cdf(bound) - 1 for bound in bounds(looks))


@functools.lru_cache(maxsize=64)
def _bounds(spent: tuple[float, ...]) -> tuple[float, ...]:
    """The bounds whose crossing first at look k has probability ``spent[k]`` (looks one round
    apart, the first after one round): on a grid of the sum of the rounds, the density of the
    paths that crossed no bound yet is carried from look to look."""
    first = NormalDist().inv_cdf(1 - spent[0] / 2)
    found = [first]
    grid = np.linspace(-first, first, _GRID)  # the sum after one round: the standardized estimate
    density = _density(grid) * _weights(grid)
    for k, part in enumerate(spent[1:], start=2):
        scale = math.sqrt(k)
        low, high = 0.0, 12.0
        for _ in range(60):
            middle = (low + high) / 2
            crossed = _crossing(middle * scale, grid, density)
            low, high = (middle, high) if crossed > part else (low, middle)
        bound = (low + high) / 2
        found.append(bound)
        edge = bound * scale
        following = np.linspace(-edge, edge, _GRID)
        density = (_density(following[:, None] - grid[None, :]) @ density) * _weights(following)
        grid = following
    return tuple(found)


def _crossing(edge: float, grid: np.ndarray, density: np.ndarray) -> float:
    """The chance that one more round (a unit-variance step) from the paths on `grid` (their
    density times the grid's weights) ends past `edge` on either side."""
    return float(density @ (_upper(edge - grid) + _upper(edge + grid)))


def _weights(grid: np.ndarray) -> np.ndarray:
    """The trapezoid rule's weights on an even grid."""
    weights = np.full(grid.shape, grid[1] - grid[0])
    weights[[0, -1]] /= 2
    return weights


def _density(x: np.ndarray) -> np.ndarray:
    return np.exp(-(x**2) / 2) / math.sqrt(2 * math.pi)


def _upper(x: np.ndarray) -> np.ndarray:
    """The standard normal's upper tail, P(Z > x), elementwise over a grid (`statistics.NormalDist`
    takes one value at a time): the complementary error function by its Chebyshev fit (Numerical
    Recipes' erfcc, relative error under 1.2e-7)."""
    z = np.abs(x) / math.sqrt(2)
    t = 1 / (1 + z / 2)
    poly = np.zeros_like(t)
    for coefficient in reversed(_ERFC_FIT):
        poly = poly * t + coefficient
    tail = t * np.exp(poly - z * z) / 2
    return np.where(x >= 0, tail, 1 - tail)
