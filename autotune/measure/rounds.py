"""The finalists' rounds as one model of their noise (`fit_rounds`).

Every measurement of the rounds is a cell: a contestant, the round it was measured in, its
position in that round's order, and its score. The log scores are fitted by least squares as

    log score = the contestant's level + the round's level + slope x position + noise,

the noise independent with one variance, pooled over every cell: the rounds are blocks (the
machine's speed while a round ran), the rotated order lets the model estimate a drift along a
round's positions instead of leaving it in the ratios, and the noise of one measurement is known
from every contestant at once, with many more degrees of freedom than one pair's rounds have. The
baseline's two measurements in a round (`BASELINE`, `BASELINE_AGAIN`) are one contestant measured
twice.

The A/A pair checks the model instead of widening it again: fitted as two contestants, the
baseline's ratio to itself must lie inside its own 95% interval. Where it does not, the model
under-states the noise, and every interval is widened by the factor that brings that ratio back
inside (`AACheck.scale`).

Other jobs on a machine only slow a window down, so one disturbed measurement shows as a cell far
*below* its fit. Such a cell (its externally studentized residual under the one-sided Bonferroni
line of `OUTLIER_ALPHA` over the cells) is left out of the fit and named in `RoundsFit.excluded`;
the rounds measure its contestant again (`autotune.driver.finalists`). Pure: floats in, floats out
(numpy for the least squares).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from autotune.measure.looks import ERROR_RATE, look_level
from autotune.measure.stats import Speedup, speedup_of, t95, t_quantile

BASELINE = -1
BASELINE_AGAIN = -2

# The position slope is fitted only where it widens the contestants' comparisons by at most this
# factor in variance (`_fit`): where the rotation has placed them in enough positions.
SLOPE_INFLATION = 1.25
# The chance, under the model, that any cell of the rounds is wrongly taken for a disturbed one.
OUTLIER_ALPHA = 0.05
# ... and at least this far below the fit of the other cells: a window a few percent slow is noise.
MIN_DISTURBANCE = 0.10
# At most this share of the cells is left out as disturbed (at least one).
MAX_EXCLUDED_SHARE = 0.2


@dataclass(frozen=True)
class Cell:
    """One measurement of the rounds: who, in which round, at which position (0: first; None: not
    recorded, as in older stores), and its score (tokens/s, or the effective rate of the user's run)."""

    number: int
    round: int
    position: int | None
    value: float


@dataclass(frozen=True)
class AACheck:
    """The baseline against itself under the model: its ratio (first measurement over second) with
    the model's 95% interval, and whether that interval holds it (`holds`: the ratio of a
    configuration to itself is 1). `scale` (at least 1) is the widening every interval took
    because it did not."""

    ratio: float
    low: float
    high: float
    rounds: int
    largest: float  # the largest per-round |log ratio| of the two measurements
    se: float = math.inf  # the standard error of the log ratio
    scale: float = 1.0

    @property
    def holds(self) -> bool:
        return self.low <= 1 <= self.high


@dataclass(frozen=True)
class RoundsFit:
    """The fitted rounds (see the module docstring).

    Attributes:
        levels: contestant -> its fitted log level (only differences between contestants mean
            anything: `ratio`).
        sigma: the noise of one measurement (standard deviation of a log score), pooled.
        df: its degrees of freedom (cells less the effects fitted).
        slope: the fitted drift per position of a round (log terms); None: not fitted (positions
            not recorded, not estimable, or too few cells).
        excluded: the cells left out as disturbed.
        robust_sigma: the noise of one measurement judged robustly (`disturbed_cells`), which
            disturbed windows that were not left out do not inflate; None: not judged.
        aa: the A/A check; None without a round that measured the baseline twice.
        cells: the cells fitted.
    """

    levels: dict[int, float]
    sigma: float
    df: int
    slope: float | None
    excluded: tuple[Cell, ...]
    aa: AACheck | None
    cells: tuple[Cell, ...]
    robust_sigma: float | None = None
    level: float = 1 - ERROR_RATE  # each interval's confidence level (`look_level`)
    folded: bool = True  # the baseline's two measurements fitted as one contestant
    _columns: dict[int, int] = field(repr=False, default_factory=dict)
    _unscaled: np.ndarray | None = field(repr=False, default=None)
    _row_space: np.ndarray | None = field(repr=False, default=None)

    @property
    def scale(self) -> float:
        return self.aa.scale if self.aa is not None else 1.0

    @property
    def noise(self) -> float:
        """One measurement's noise as a fraction (0.05: 5%), widened as the A/A check asked."""
        return math.exp(self.scale * self.sigma) - 1

    def _key(self, number: int) -> int:
        return _folded(number) if self.folded else number

    def rounds_of(self, number: int) -> list[int]:
        number = self._key(number)
        return sorted({c.round for c in self.cells if self._key(c.number) == number})

    def informed_by(self, a: int, b: int) -> int:
        """The rounds that inform the comparison of `a` and `b` (either measured in them): a
        window of one left out as disturbed still leaves its round's other cells in the model."""
        return len(set(self.rounds_of(a)) | set(self.rounds_of(b)))

    def ratio(self, a: int, b: int, level: float | None = None) -> Speedup | None:
        """Contestant `a`'s score over `b`'s with its interval at `level` (default the fit's own:
        95% over the looks the rounds allowed); None where the rounds cannot compare them (one of
        them not fitted, or the contrast not estimable)."""
        level = self.level if level is None else level
        a, b = self._key(a), self._key(b)
        if a not in self._columns or b not in self._columns or self._unscaled is None:
            return None
        contrast = np.zeros(self._unscaled.shape[0])
        contrast[self._columns[a]], contrast[self._columns[b]] = 1.0, -1.0
        if self._row_space is not None and not _estimable(contrast, self._row_space):
            return None
        variance = float(contrast @ self._unscaled @ contrast) * (self.scale * self.sigma) ** 2
        shared = len(set(self.rounds_of(a)) & set(self.rounds_of(b)))
        se = math.sqrt(max(variance, 0.0))
        return speedup_of(self.levels[a] - self.levels[b], se, self.df, shared, level)

    def ranked(self) -> list[int]:
        """The contestants, highest fitted level first (the baseline once)."""
        return sorted(self.levels, key=lambda n: (-self.levels[n], n))


def _folded(number: int) -> int:
    return BASELINE if number == BASELINE_AGAIN else number


def cells_of(
    scores: Mapping[int, Mapping[int, float]], positions: Mapping[int, Mapping[int, int]] | None = None
) -> list[Cell]:
    """Cells from contestant -> round -> score (and contestant -> round -> position)."""
    positions = positions or {}
    return [
        Cell(number, round_number, (positions.get(number) or {}).get(round_number), value)
        for number, by_round in scores.items()
        for round_number, value in by_round.items()
        if value and value > 0
    ]


def fit_rounds(
    cells: Iterable[Cell], robust: bool = True, looks: int | None = None, look: int | None = None
) -> RoundsFit | None:
    """The rounds' model fitted to `cells` (the A/A check and, with `robust`, disturbed cells left
    out), its intervals at the level of look `look` of `looks` (`look_level`); None without a
    degree of freedom left for the noise."""
    cells = [c for c in cells if c.value > 0]
    fitted = _fit(cells, fold=True)
    if fitted is None:
        return None
    excluded: list[Cell] = []
    robust_sigma = None
    if robust:
        excluded, robust_sigma = disturbed_cells(fitted)
        refit = _fit([c for c in cells if c not in excluded], fold=True) if excluded else fitted
        if refit is None:
            excluded = []
        else:
            fitted = refit
    aa = _aa_check(list(fitted.cells), fitted.slope is not None)
    return replace(
        fitted, excluded=tuple(excluded), aa=aa, robust_sigma=robust_sigma, level=look_level(looks, look)
    )


def _fit(cells: Sequence[Cell], fold: bool, with_slope: bool | None = None) -> RoundsFit | None:
    """Least squares of the model on `cells` (`fold`: the baseline's two measurements as one
    contestant). The position slope where `with_slope` says, or (None) where the rotation
    estimates it: it leaves two degrees of freedom and widens the contestants' comparisons by at
    most `SLOPE_INFLATION` (a few rounds of many contestants do not yet hold each in every
    position, and a slope fitted then would take their differences for a drift)."""
    if not cells:
        return None
    number = _folded if fold else (lambda n: n)
    contestants = sorted({number(c.number) for c in cells})
    rounds = sorted({c.round for c in cells})
    positioned = all(c.position is not None for c in cells)
    columns = {n: i for i, n in enumerate(contestants)}
    width = len(contestants) + len(rounds) - 1
    x = np.zeros((len(cells), width + 1))
    y = np.array([math.log(c.value) for c in cells])
    for row, cell in enumerate(cells):
        x[row, columns[number(cell.number)]] = 1.0
        index = rounds.index(cell.round)
        if index:
            x[row, len(contestants) + index - 1] = 1.0
        if positioned:
            x[row, width] = float(cell.position or 0)
    base = x[:, :width]
    rank = np.linalg.matrix_rank(base)
    possible = positioned and np.linalg.matrix_rank(x) > rank and len(cells) - rank - 1 >= 2
    if possible and with_slope is None:
        with_slope = _inflation(x, base, len(contestants)) <= SLOPE_INFLATION
    if possible and with_slope:
        design, rank, slope_column = x, rank + 1, width
    else:
        design, slope_column = base, None
    df = int(len(cells) - rank)
    if df < 1:
        return None
    unscaled = np.linalg.pinv(design.T @ design)
    coefficients = unscaled @ design.T @ y
    residuals = y - design @ coefficients
    sigma = math.sqrt(float(residuals @ residuals) / df)
    levels = {n: float(coefficients[i]) for n, i in columns.items()}
    slope = float(coefficients[slope_column]) if slope_column is not None else None
    row_space = np.linalg.pinv(design) @ design
    return RoundsFit(
        levels,
        sigma,
        df,
        slope,
        excluded=(),
        aa=None,
        cells=tuple(cells),
        folded=fold,
        _columns=columns,
        _unscaled=unscaled,
        _row_space=row_space,
    )


def _inflation(with_slope: np.ndarray, without: np.ndarray, contestants: int) -> float:
    """How much the slope column widens the contestants' comparisons: the mean variance of every
    comparison of two contestants estimable without it, with it over without."""
    unscaled = [np.linalg.pinv(x.T @ x) for x in (with_slope, without)]
    rows = [np.linalg.pinv(x) @ x for x in (with_slope, without)]
    variances: list[list[float]] = [[], []]
    for a in range(contestants):
        for b in range(a + 1, contestants):
            for i, x in enumerate((with_slope, without)):
                contrast = np.zeros(x.shape[1])
                contrast[a], contrast[b] = 1.0, -1.0
                if _estimable(contrast, rows[i]):
                    variances[i].append(float(contrast @ unscaled[i] @ contrast))
    if not variances[1] or len(variances[0]) < len(variances[1]):
        return math.inf
    return statistics.fmean(variances[0]) / statistics.fmean(variances[1])


def _estimable(contrast: np.ndarray, row_space: np.ndarray) -> bool:
    return bool(np.allclose(contrast @ row_space, contrast, atol=1e-8))


def disturbed_cells(fitted: RoundsFit) -> tuple[list[Cell], float | None]:
    """The cells of `fitted` far below their fit, disturbed windows (another job on the machine
    only slows a window down), and the noise of one measurement judged robustly (None: no cell to
    judge it by).

    A cell is judged by its externally studentized residual: its distance below the fit of the
    other cells, in units of their noise. Without disturbances that lies under the one-sided
    Bonferroni line of `OUTLIER_ALPHA` over the cells with probability at most `OUTLIER_ALPHA`; it
    must lie `MIN_DISTURBANCE` below the others' fit besides (a few percent is noise, however
    quiet the rest). The
    most extreme cell under the line is left out and the rest judged again (a second disturbed
    cell hides behind the first). The robust noise is the median absolute residual, each scaled by
    its leverage: a disturbed cell the fit kept moves it little."""
    found: list[Cell] = []
    current: RoundsFit | None = fitted
    limit = max(1, int(MAX_EXCLUDED_SHARE * len(fitted.cells)))
    robust: float | None = None
    while current is not None and len(found) < limit:
        residuals, leverage = _residuals(current)
        judged = [
            (e, h, c) for e, h, c in zip(residuals, leverage, current.cells, strict=True) if h < 1 - 1e-6
        ]
        if robust is None and judged:
            robust = 1.4826 * statistics.median(abs(e) / math.sqrt(1 - h) for e, h, _ in judged)
        if current.df < 3 or not judged:
            break
        sse = float(residuals @ residuals)
        line = -t_quantile(1 - OUTLIER_ALPHA / len(fitted.cells), current.df - 1)
        worst, worst_t = None, line
        for e, h, cell in judged:
            rest = (sse - e * e / (1 - h)) / (current.df - 1)
            slow = e / (1 - h) < math.log(1 - MIN_DISTURBANCE)  # below the others' fit by that much
            if slow and rest > 0 and (studentized := e / math.sqrt(rest * (1 - h))) < worst_t:
                worst, worst_t = cell, studentized
        if worst is None:
            break
        found.append(worst)
        current = _fit([c for c in current.cells if c is not worst], fold=True)
    return found, robust


def _residuals(fitted: RoundsFit) -> tuple[np.ndarray, np.ndarray]:
    """The residuals of `fitted`'s cells and their leverages."""
    design = _design_of(fitted)
    assert fitted._unscaled is not None
    leverage = np.einsum("ij,jk,ik->i", design, fitted._unscaled, design)
    y = np.array([math.log(c.value) for c in fitted.cells])
    return y - design @ (fitted._unscaled @ design.T @ y), leverage


def _design_of(fitted: RoundsFit) -> np.ndarray:
    """The design matrix `fitted` was solved with (the same columns, rebuilt from its cells)."""
    cells = fitted.cells
    contestants = len(fitted._columns)
    rounds = sorted({c.round for c in cells})
    width = contestants + len(rounds) - 1
    x = np.zeros((len(cells), width + (fitted.slope is not None)))
    for row, cell in enumerate(cells):
        x[row, fitted._columns[_folded(cell.number)]] = 1.0
        index = rounds.index(cell.round)
        if index:
            x[row, contestants + index - 1] = 1.0
        if fitted.slope is not None:
            x[row, width] = float(cell.position or 0)
    return x


def _aa_check(cells: list[Cell], with_slope: bool) -> AACheck | None:
    """The baseline against itself (see `AACheck`), fitted as two contestants on the same cells."""
    first = {c.round: c.value for c in cells if c.number == BASELINE}
    second = {c.round: c.value for c in cells if c.number == BASELINE_AGAIN}
    both = sorted(set(first) & set(second))
    if not both:
        return None
    largest = max(abs(math.log(first[r] / second[r])) for r in both)
    separate = _fit(cells, fold=False, with_slope=with_slope)
    speedup = separate.ratio(BASELINE, BASELINE_AGAIN, level=0.95) if separate is not None else None
    if speedup is None or not math.isfinite(speedup.se) or speedup.se <= 0:
        ratio = math.exp(statistics.fmean(math.log(first[r] / second[r]) for r in both))
        return AACheck(ratio, 0.0, math.inf, len(both), largest)
    half = t95(speedup.df) * speedup.se
    distance = abs(math.log(speedup.ratio))
    # a fit that leaves (next to) nothing over cannot judge the pair: no widening from it
    scale = max(1.0, distance / half) if half > 1e-9 else 1.0
    return AACheck(speedup.ratio, speedup.low, speedup.high, len(both), largest, speedup.se, scale)


def level(
    values: Mapping[int, Mapping[int, float]], number: int, excluded: Iterable[Cell] = ()
) -> tuple[float, float | None, float | None, int] | None:
    """Contestant `number`'s expected throughput: the geometric mean of its rounds' values
    (contestant -> round -> value) with a 95% interval whose noise is pooled over every contestant:
    the spread of one measurement about its contestant's mean, round-to-round drift included (a
    user's run is another round). (value, low, high, measurements); None where it has no value.
    `excluded`: the cells the rounds' fit left out as disturbed."""
    out = {(_folded(c.number), c.round) for c in excluded}
    groups: dict[int, list[float]] = {}
    for contestant, by_round in values.items():
        for round_number, value in by_round.items():
            if value and value > 0 and (_folded(contestant), round_number) not in out:
                groups.setdefault(_folded(contestant), []).append(math.log(value))
    own = groups.get(_folded(number))
    if not own:
        return None
    mean = statistics.fmean(own)
    df = sum(len(g) - 1 for g in groups.values())
    if df < 1:
        return math.exp(mean), None, None, len(own)
    spread = math.sqrt(sum((y - statistics.fmean(g)) ** 2 for g in groups.values() for y in g) / df)
    half = t95(df) * spread / math.sqrt(len(own))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(own)


def round_order(contestants: Sequence[int], round_number: int) -> list[int]:
    """The order of round `round_number` (from 1): a row of a balanced Latin square (Williams
    design) over the contestants. Over n rounds each contestant is measured once in every position
    (for an odd n, the next n rounds mirror them, which balances who follows whom): an effect of
    position (the process before, the page cache, the allocator) falls on every contestant alike,
    and the model can estimate it (`RoundsFit.slope`) instead of reading it as a speedup."""
    n = len(contestants)
    if n < 2:
        return list(contestants)
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        if len(first) % 2:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    r = round_number - 1
    row = [(j + r) % n for j in first]
    if n % 2 and (r // n) % 2:
        row.reverse()
    return [contestants[i] for i in row]
