"""The finalists' rounds as one model of their noise (`autotune.measure.rounds`)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from autotune.measure.looks import ERROR_RATE, look_level
from autotune.measure.rounds import (
    BASELINE,
    BASELINE_AGAIN,
    OUTLIER_ALPHA,
    Cell,
    cells_of,
    fit_rounds,
    level,
    round_order,
)
from autotune.measure.stats import t95, t_quantile

WOBBLE = [0.02, -0.03, 0.01, 0.04, -0.02, 0.0, -0.01, 0.03, -0.04, 0.02, 0.01, -0.02, 0.03, 0.0, -0.01, 0.02]


def _cells(levels: dict[int, float], rounds: int, drift: dict[int, float] | None = None, slope: float = 0.0):
    """Every contestant in every round, in the rounds' rotated order: level x the round's drift x
    the position's slope x a fixed wobble."""
    it = iter(WOBBLE * 4)
    out = []
    for r in range(1, rounds + 1):
        for position, number in enumerate(round_order(list(levels), r)):
            factor = (drift or {}).get(r, 1.0) * math.exp(slope * position + next(it))
            out.append(Cell(number, r, position, levels[number] * factor))
    return out


def _lstsq(cells: list[Cell], with_slope: bool) -> tuple[float, int, dict[int, float]]:
    """The model fitted by numpy's least-squares solver: what `fit_rounds` must agree with."""
    numbers = sorted({BASELINE if c.number == BASELINE_AGAIN else c.number for c in cells})
    rounds = sorted({c.round for c in cells})
    x = np.zeros((len(cells), len(numbers) + len(rounds) - 1 + with_slope))
    for row, c in enumerate(cells):
        x[row, numbers.index(BASELINE if c.number == BASELINE_AGAIN else c.number)] = 1
        if rounds.index(c.round):
            x[row, len(numbers) + rounds.index(c.round) - 1] = 1
        if with_slope:
            x[row, -1] = c.position
    y = np.array([math.log(c.value) for c in cells])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    df = len(cells) - np.linalg.matrix_rank(x)
    sigma = math.sqrt(float(((y - x @ coef) ** 2).sum()) / df)
    return sigma, df, {n: float(coef[i]) for i, n in enumerate(numbers)}


def test_the_fit_is_least_squares_of_contestant_round_and_position() -> None:
    levels = {0: 120.0, 1: 100.0, 2: 90.0, BASELINE: 100.0, BASELINE_AGAIN: 100.0}
    cells = _cells(levels, 3, drift={1: 1.0, 2: 0.7, 3: 1.3}, slope=0.01)
    fit = fit_rounds(cells, robust=False)
    assert fit is not None and fit.slope is not None
    sigma, df, coef = _lstsq(cells, with_slope=True)
    # 15 cells less 4 contestants (the baseline's pair is one), 2 rounds' offsets, 1 slope
    assert fit.df == df == 15 - 4 - 2 - 1
    assert fit.sigma == pytest.approx(sigma)
    assert fit.slope == pytest.approx(0.01, abs=0.02)
    speedup = fit.ratio(0, BASELINE, level=0.95)
    assert speedup is not None and speedup.rounds == 3
    assert math.log(speedup.ratio) == pytest.approx(coef[0] - coef[BASELINE])
    # the drift of 30% between rounds is the rounds' effect, not noise
    assert fit.sigma < 0.04 and 1.1 < speedup.ratio < 1.3
    # BASELINE_AGAIN is the baseline: a ratio against either is the same
    assert fit.ratio(0, BASELINE_AGAIN) == fit.ratio(0, BASELINE)


def test_without_positions_the_model_has_no_slope() -> None:
    cells = [Cell(c.number, c.round, None, c.value) for c in _cells({0: 1.0, 1: 2.0, BASELINE: 1.5}, 3)]
    fit = fit_rounds(cells, robust=False)
    assert fit is not None and fit.slope is None
    sigma, df, _ = _lstsq(cells, with_slope=False)
    assert (fit.sigma, fit.df) == pytest.approx((sigma, df))


def test_an_interval_is_the_t_quantile_of_its_level_times_the_contrasts_error() -> None:
    cells = _cells({0: 130.0, 1: 100.0, BASELINE: 100.0, BASELINE_AGAIN: 100.0}, 3)
    fit = fit_rounds(cells, robust=False, looks=4)
    assert fit is not None and fit.level == pytest.approx(1 - ERROR_RATE / 4) == look_level(4)
    speedup = fit.ratio(0, BASELINE)
    assert speedup is not None
    assert math.log(speedup.high / speedup.ratio) == pytest.approx(
        t_quantile(0.5 + fit.level / 2, fit.df) * speedup.se
    )
    narrower = fit.ratio(0, BASELINE, level=0.95)
    assert narrower is not None and narrower.high < speedup.high
    assert math.log(narrower.high / narrower.ratio) == pytest.approx(t95(fit.df) * speedup.se)


def test_a_position_effect_is_estimated_not_read_as_a_speedup() -> None:
    # Every contestant equally fast; each position in a round runs 5% slower than the one before
    # (the machine warming up, a cache filling). The rotation puts everyone in every position, and
    # the model takes the slope out instead of crediting whoever came first.
    levels = {0: 100.0, 1: 100.0, BASELINE: 100.0, BASELINE_AGAIN: 100.0}
    cells = _cells(levels, 4, slope=math.log(0.95))
    fit = fit_rounds(cells, robust=False)
    assert fit is not None and fit.slope == pytest.approx(math.log(0.95), abs=0.01)
    for number in (0, 1):
        speedup = fit.ratio(number, BASELINE)
        assert speedup is not None and speedup.low < 1.0 < speedup.high and not speedup.beats_baseline


def test_the_aa_pair_checks_the_model() -> None:
    levels = {0: 100.0, BASELINE: 100.0, BASELINE_AGAIN: 100.0}
    fit = fit_rounds(_cells(levels, 4))
    assert fit is not None and fit.aa is not None and fit.aa.holds and fit.aa.scale == 1.0
    assert fit.aa.rounds == 4
    # The baseline's second measurement runs 6% slower every round, whatever its position: the
    # model's noise cannot account for it, its interval misses 1, and every interval widens until
    # that one just holds 1.
    skewed = [
        Cell(c.number, c.round, c.position, c.value * (0.94 if c.number == BASELINE_AGAIN else 1.0))
        for c in _cells(levels, 4)
    ]
    fit = fit_rounds(skewed)
    assert fit is not None and fit.aa is not None and not fit.aa.holds and fit.aa.scale > 1
    half = math.log(fit.aa.high / fit.aa.ratio)
    assert fit.aa.scale == pytest.approx(abs(math.log(fit.aa.ratio)) / half)
    narrow = fit_rounds(skewed, robust=False)
    assert narrow is not None
    widened, plain = fit.ratio(0, BASELINE), None
    plain_fit = fit_rounds(skewed, robust=False)
    assert plain_fit is not None
    plain = plain_fit.ratio(0, BASELINE)
    assert widened is not None and plain is not None
    assert widened.se == pytest.approx(plain.se)  # the same cells: the widening is the check's
    assert fit.noise == pytest.approx(math.exp(fit.scale * fit.sigma) - 1)


def test_a_disturbed_window_is_left_out_and_the_interval_stays_narrow() -> None:
    # One window of trial 0 ran at 40% (another job on the machine): left in, it spreads the
    # noise over every interval; left out, the rounds read as they are.
    levels = {0: 130.0, 1: 100.0, 2: 90.0, BASELINE: 100.0, BASELINE_AGAIN: 100.0}
    cells = _cells(levels, 3)
    hit = next(c for c in cells if c.number == 0 and c.round == 2)
    cells = [Cell(c.number, c.round, c.position, c.value * 0.4) if c is hit else c for c in cells]
    robust = fit_rounds(cells)
    plain = fit_rounds(cells, robust=False)
    assert robust is not None and plain is not None
    assert [(c.number, c.round) for c in robust.excluded] == [(0, 2)]
    assert plain.excluded == ()
    kept, spread = robust.ratio(0, BASELINE), plain.ratio(0, BASELINE)
    assert kept is not None and spread is not None
    assert kept.beats_baseline and kept.low < 1.3 < kept.high and kept.high / kept.low < 1.3
    assert spread.high / spread.low > 2 and not spread.beats_baseline
    assert robust.robust_sigma is not None and robust.robust_sigma < plain.sigma


def test_undisturbed_rounds_leave_nothing_out() -> None:
    # 400 sets of rounds with noise alone (5% per measurement, 5% between rounds): a window is
    # taken for a disturbed one in about OUTLIER_ALPHA of them, no more
    rng = random.Random(7)
    flagged = 0
    levels = {0: 130.0, 1: 100.0, 2: 90.0, BASELINE: 100.0, BASELINE_AGAIN: 100.0}
    for _ in range(400):
        drift = {r: math.exp(rng.gauss(0, 0.05)) for r in (1, 2, 3)}
        cells = [
            Cell(c.number, c.round, c.position, c.value * drift[c.round] * math.exp(rng.gauss(0, 0.05)))
            for c in _cells(levels, 3)
        ]
        fit = fit_rounds(cells)
        assert fit is not None and fit.robust_sigma is not None
        flagged += bool(fit.excluded)
    assert flagged <= 400 * 1.5 * OUTLIER_ALPHA


def test_a_contestants_only_cell_is_not_judged() -> None:
    # trial 7's one window, far below everything else, is all the rounds know of it: nothing to
    # judge it against
    cells = [*_cells({0: 100.0, BASELINE: 100.0, BASELINE_AGAIN: 100.0}, 3), Cell(7, 3, 3, 1.0)]
    fit = fit_rounds(cells)
    assert fit is not None and all(c.number != 7 for c in fit.excluded)


def test_no_fit_without_a_degree_of_freedom() -> None:
    assert fit_rounds([Cell(0, 1, 0, 100.0), Cell(BASELINE, 1, 1, 90.0)]) is None
    assert fit_rounds([]) is None


def test_a_contrast_the_rounds_cannot_estimate_is_none() -> None:
    # trials 0 and 1 share no round with trial 5 and the baseline: nothing links them
    cells = [
        Cell(0, 1, 0, 100.0), Cell(1, 1, 1, 90.0), Cell(0, 2, 1, 101.0), Cell(1, 2, 0, 92.0),
        Cell(5, 3, 0, 70.0), Cell(BASELINE, 3, 1, 80.0), Cell(5, 4, 1, 71.0), Cell(BASELINE, 4, 0, 83.0),
    ]  # fmt: skip
    fit = fit_rounds(cells, robust=False)
    assert fit is not None
    assert fit.ratio(0, 1) is not None and fit.ratio(5, BASELINE) is not None
    assert fit.ratio(0, BASELINE) is None and fit.ratio(9, BASELINE) is None


def test_the_expected_throughput_pools_every_contestants_noise() -> None:
    values = {
        0: {1: 130.0, 2: 118.0, 3: 125.0},
        BASELINE: {1: 100.0, 2: 97.0, 3: 103.0},
        BASELINE_AGAIN: {1: 104.0, 2: 95.0, 3: 100.0},
    }
    found = level(values, 0)
    assert found is not None
    value, low, high, count = found
    logs = {n: [math.log(v) for v in r.values()] for n, r in values.items()}
    groups = {0: logs[0], BASELINE: logs[BASELINE] + logs[BASELINE_AGAIN]}
    df = sum(len(g) - 1 for g in groups.values())
    residual = sum((y - sum(g) / len(g)) ** 2 for g in groups.values() for y in g)
    half = t95(df) * math.sqrt(residual / df) / math.sqrt(3)
    assert df == 7 and count == 3
    assert value == pytest.approx(math.exp(sum(logs[0]) / 3))
    assert (low, high) == pytest.approx((value * math.exp(-half), value * math.exp(half)))
    # the baseline's two measurements a round are its cells
    assert level(values, BASELINE_AGAIN) == level(values, BASELINE)
    assert level(values, 99) is None
    # a cell the fit left out is left out here too
    dropped = level(values, 0, excluded=[Cell(0, 2, 0, 118.0)])
    assert dropped is not None and dropped[3] == 2


def test_cells_of_reads_scores_and_positions() -> None:
    cells = cells_of({0: {1: 100.0, 2: 0.0}}, {0: {1: 3}})
    assert cells == [Cell(0, 1, 3, 100.0)]


@pytest.mark.parametrize("count", [2, 3, 4, 5, 6])
def test_a_round_order_puts_every_contestant_in_every_position(count: int) -> None:
    contestants = list(range(count))
    rounds = [round_order(contestants, r) for r in range(1, count + 1)]
    for position in range(count):
        assert sorted(row[position] for row in rounds) == contestants
    for row in rounds:
        assert sorted(row) == contestants
