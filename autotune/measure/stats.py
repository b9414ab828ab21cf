"""Throughput arithmetic for one measured window. Pure: plain floats in, plain floats out."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@functools.lru_cache(maxsize=256)
def t95(degrees_of_freedom: int) -> float:
    """The two-sided 95% Student-t quantile."""
    if degrees_of_freedom < 1:
        raise ValueError("need at least one degree of freedom")
    return t_quantile(0.975, degrees_of_freedom)


def t_cdf(x: float, degrees_of_freedom: float) -> float:
    """P(T <= x) for Student's t: the regularized incomplete beta function of df / (df + x^2)."""
    if degrees_of_freedom <= 0:
        raise ValueError("need a positive number of degrees of freedom")
    if x == 0:
        return 0.5
    tail = 0.5 * _incomplete_beta(
        degrees_of_freedom / 2, 0.5, degrees_of_freedom / (degrees_of_freedom + x * x)
    )
    return 1 - tail if x > 0 else tail


def t_quantile(p: float, degrees_of_freedom: float) -> float:
    """The `p` quantile of Student's t (0 < p < 1), by bisection on `t_cdf`."""
    if not 0 < p < 1:
        raise ValueError("p must lie strictly between 0 and 1")
    if p < 0.5:
        return -t_quantile(1 - p, degrees_of_freedom)
    low, high = 0.0, 1.0
    while t_cdf(high, degrees_of_freedom) < p:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, degrees_of_freedom) < p else (low, middle)
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast on this side only
        return 1 - _incomplete_beta(b, a, 1 - x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1) < 1e-15:
            break
    return math.exp(log_front) * fraction / a


def relative_ci_halfwidth(step_times_s: Sequence[float]) -> float:
    """The 95% confidence half-width of the mean throughput, relative to it.

    Each step's throughput is work/time with the same work per step, so its relative spread is
    estimated from 1/t per step. Infinite with fewer than two steps.
    """
    if len(step_times_s) < 2:
        return math.inf
    rates = [1.0 / t for t in step_times_s]
    mean = statistics.fmean(rates)
    return t95(len(rates) - 1) * statistics.stdev(rates) / math.sqrt(len(rates)) / mean


@dataclass(frozen=True)
class WindowStats:
    """What one measured window says. Rates are for the whole job (all ranks)."""

    tokens_per_s: float
    samples_per_s: float
    measured_steps: int
    window_s: float
    step_time_mean_s: float
    step_time_median_s: float
    step_time_min_s: float
    step_time_max_s: float
    step_time_std_s: float
    rel_ci_halfwidth: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def summarize_window(
    step_times_s: Sequence[float], tokens_per_step: float, samples_per_step: int
) -> WindowStats:
    """Summarise the optimizer-step times of a measured window.

    Throughput is total work over total time (not the mean of per-step rates), so one slow step
    counts for what it cost.

    Raises:
        ValueError: an empty window or a non-positive step time.
    """
    if not step_times_s:
        raise ValueError("empty measured window")
    if min(step_times_s) <= 0:
        raise ValueError("step times must be positive")
    window_s = math.fsum(step_times_s)
    steps = len(step_times_s)
    return WindowStats(
        tokens_per_s=tokens_per_step * steps / window_s,
        samples_per_s=samples_per_step * steps / window_s,
        measured_steps=steps,
        window_s=window_s,
        step_time_mean_s=window_s / steps,
        step_time_median_s=statistics.median(step_times_s),
        step_time_min_s=min(step_times_s),
        step_time_max_s=max(step_times_s),
        step_time_std_s=statistics.stdev(step_times_s) if steps > 1 else 0.0,
        rel_ci_halfwidth=relative_ci_halfwidth(step_times_s),
    )


def warmup_done(step_times_s: Sequence[float], min_steps: int, max_steps: int, settle: float = 1.25) -> bool:
    """Whether warm-up can end after these warm-up step times.

    At least `min_steps`; then as soon as the last step is within `settle` of the fastest warm-up
    step (compilation and allocator growth make early steps slow); at `max_steps` regardless.
    """
    steps = len(step_times_s)
    if steps < min_steps:
        return False
    if steps >= max_steps:
        return True
    return step_times_s[-1] <= settle * min(step_times_s)


def window_done(
    step_times_s: Sequence[float], min_steps: int, max_steps: int, max_seconds: float, target_rel_ci: float
) -> bool:
    """Whether the measured window can end: stable enough, or out of steps or time."""
    steps = len(step_times_s)
    if steps >= max_steps or math.fsum(step_times_s) >= max_seconds:
        return True
    return steps >= min_steps and relative_ci_halfwidth(step_times_s) <= target_rel_ci


# A winner is said to beat the baseline only when the whole 95% interval of its speedup lies above
# 1 + MIN_GAIN: a gain smaller than this is not worth a change to someone's training config.
MIN_GAIN = 0.01
# A change to the training math costs the user a retune (learning rate, schedule, a loss check):
# it is handed back only when it measurably gains more than this over keeping the math.
MATH_GAIN = 0.05


@dataclass(frozen=True)
class Speedup:
    """A ratio of two configurations' throughput with its 95% interval: `ratio` is the estimate,
    `se` the standard error of its logarithm and `df` the degrees of freedom of that error (the
    interval is ``ratio * exp(+-t95(df) * se)`` at 95%), `rounds` the rounds both were measured in."""

    ratio: float
    low: float
    high: float
    rounds: int
    df: int = 1
    se: float = math.inf

    @property
    def beats_baseline(self) -> bool:
        return self.low > 1 + MIN_GAIN

    def decided(self, threshold: float = 1 + MIN_GAIN) -> bool:
        """The interval lies wholly on one side of `threshold`: the question is answered."""
        return self.low > threshold or self.high < threshold

    @property
    def half_width(self) -> float:
        """The interval's half-width in log terms (infinite without one)."""
        return math.log(self.high / self.ratio) if math.isfinite(self.high) else math.inf

    def describe(self) -> str:
        return f"{self.ratio:.2f}x (95% interval {self.low:.2f}-{self.high:.2f}x over {self.rounds} rounds)"

    def to_dict(self) -> dict[str, object]:
        return {
            "ratio": self.ratio,
            "low": self.low,
            "high": self.high,
            "rounds": self.rounds,
            "beats_baseline": self.beats_baseline,
            "df": self.df,
            "se": self.se if math.isfinite(self.se) else None,
        }


def speedup_of(log_ratio: float, se: float, df: int, rounds: int, level: float = 0.95) -> Speedup:
    """The `Speedup` of a log ratio with its standard error and degrees of freedom, its interval
    at the two-sided confidence `level`."""
    if df < 1 or not math.isfinite(se):
        return Speedup(math.exp(log_ratio), 0.0, math.inf, rounds, max(df, 0), math.inf)
    half = (t95(df) if level == 0.95 else t_quantile(0.5 + level / 2, df)) * se
    return Speedup(
        math.exp(log_ratio), math.exp(log_ratio - half), math.exp(log_ratio + half), rounds, df, se
    )


def paired_speedup(trial: dict[int, float], baseline: dict[int, float]) -> Speedup | None:
    """The speedup of a trial over the baseline from the rounds both were measured in (round ->
    tokens/s), as a user states it from their own rotated rounds: the geometric mean of the
    per-round ratios with a paired t interval. None without such a round; one round gives no
    interval (it spans everything)."""
    rounds = sorted(set(trial) & set(baseline))
    logs = [math.log(trial[r] / baseline[r]) for r in rounds if trial[r] > 0 and baseline[r] > 0]
    if not logs:
        return None
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return speedup_of(mean, math.inf, 0, 1)
    return speedup_of(mean, statistics.stdev(logs) / math.sqrt(len(logs)), len(logs) - 1, len(logs))
