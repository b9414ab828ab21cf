"""Throughput arithmetic for one measured window. Pure: plain floats in, plain floats out."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from autotune.records import AA, BASELINE, BASELINE_AGAIN

# Two-sided 95% Student-t quantiles for 1..30 degrees of freedom; beyond that the normal 1.96.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t95(degrees_of_freedom: int) -> float:
    """The two-sided 95% Student-t quantile."""
    if degrees_of_freedom < 1:
        raise ValueError("need at least one degree of freedom")
    return _T95[degrees_of_freedom - 1] if degrees_of_freedom <= len(_T95) else 1.96


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


@dataclass(frozen=True)
class Finalist:
    """One finalist after the interleaved re-measurement."""

    number: int
    tokens_per_s: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.tokens_per_s)

    @property
    def spread(self) -> float:
        """Half the range of the re-measurements, relative to their median."""
        return (max(self.tokens_per_s) - min(self.tokens_per_s)) / 2 / self.median

    def to_dict(self) -> dict[str, object]:
        return {
            "number": self.number,
            "tokens_per_s": list(self.tokens_per_s),
            "median": self.median,
            "spread": self.spread,
        }


def rank_finalists(samples: dict[int, list[float]]) -> list[Finalist]:
    """Finalists with at least one re-measurement, fastest median first."""
    finalists = [Finalist(n, tuple(v)) for n, v in samples.items() if v]
    return sorted(finalists, key=lambda f: -f.median)


def verdict(ranked: Sequence[Finalist], label: str) -> str:
    """How sure the winner is, in one line: its median, spread and lead over the runner-up."""
    winner = ranked[0]
    text = f"{label}: {winner.median / 1000:.1f}k tok/s ±{100 * winner.spread:.1f}%"
    if len(ranked) < 2:
        return text
    runner_up = ranked[1]
    ratio = winner.median / runner_up.median
    text += f", {ratio:.2f}x the runner-up (trial {runner_up.number})"
    if ratio - 1 <= winner.spread + runner_up.spread:
        text += ": within the measurement spread, either is as good"
    return text


# A winner is said to beat the baseline only when the whole 95% interval of its speedup lies above
# 1 + MIN_GAIN: a gain smaller than this is not worth a change to someone's training config.
MIN_GAIN = 0.01


@dataclass(frozen=True)
class Speedup:
    """A speedup over the baseline from paired re-measurements (both measured in each round, next
    to each other, so the drift of the machine cancels): the geometric mean of the per-round
    ratios and a 95% t interval on their logarithms, widened by what the instrument shows against
    itself (`AA`: `offset` is the allowance added to each side, in log terms)."""

    ratio: float
    low: float
    high: float
    rounds: int
    offset: float = 0.0
    df: int | None = None  # of the spread's estimate; None: the pair's own (rounds - 1)

    @property
    def beats_baseline(self) -> bool:
        return self.low > 1 + MIN_GAIN

    @property
    def decided(self) -> bool:
        """The interval lies wholly on one side of 1 + MIN_GAIN: more rounds would not change the answer."""
        return self.low > 1 + MIN_GAIN or self.high < 1 + MIN_GAIN

    def could_decide(self, rounds: int, threshold: float) -> bool:
        """Whether `rounds` paired rounds in all could put the interval wholly on one side of
        `threshold`, were the ratio, the rounds' spread and the A/A allowance to stay as measured
        (the spread's part of the half-width shrinks with the t quantile and the square root of
        the rounds; the allowance does not). A race that could not end so is not run on: a ratio
        measured at the threshold (two configurations alike, or a leader no faster than the
        baseline) would spend every extra round to stay undecided."""
        if self.rounds < 2 or rounds <= self.rounds or not math.isfinite(self.high):
            return False
        df_now = self.df if self.df is not None else self.rounds - 1
        # a pooled estimate's degrees of freedom grow with the rounds as the pair's own do
        df_then = max(rounds - 1, df_now * (rounds - 1) // (self.rounds - 1))
        half_now = math.log(self.high / self.ratio) - self.offset
        spread = half_now * math.sqrt(self.rounds) / t95(df_now)
        half_then = t95(df_then) * spread / math.sqrt(rounds) + self.offset
        return abs(math.log(self.ratio / threshold)) > half_then

    def describe(self) -> str:
        return f"{self.ratio:.2f}x (95% interval {self.low:.2f}-{self.high:.2f}x over {self.rounds} rounds)"

    def to_dict(self) -> dict[str, object]:
        return {
            "ratio": self.ratio,
            "low": self.low,
            "high": self.high,
            "rounds": self.rounds,
            "beats_baseline": self.beats_baseline,
            "aa_offset": self.offset,
            "df": self.df if self.df is not None else self.rounds - 1,
        }


def aa_of(first: Mapping[int, float], second: Mapping[int, float]) -> AA | None:
    """The A/A figure of two measurements of one configuration by round (round -> score); None
    without a round both were measured in."""
    rounds = sorted(set(first) & set(second))
    logs = [math.log(first[r] / second[r]) for r in rounds if first[r] > 0 and second[r] > 0]
    if not logs:
        return None
    spread = statistics.stdev(logs) if len(logs) > 1 else 0.0
    return AA(statistics.fmean(logs), spread, len(logs), max(abs(x) for x in logs))


def instrument(by_round: Mapping[int, Mapping[int, float]]) -> AA | None:
    """The instrument's figure from every contestant's scores by round (number -> round -> score):
    the A/A pair of the baseline's two measurements (`BASELINE`, `BASELINE_AGAIN`) and the noise
    of one measurement pooled over all contestants (`pooled_noise`). None without a round in
    which the baseline was measured twice."""
    aa = aa_of(by_round.get(BASELINE, {}), by_round.get(BASELINE_AGAIN, {}))
    if aa is None:
        return None
    pooled = pooled_noise(by_round)
    if pooled is None:
        return aa
    return AA(aa.offset, aa.spread, aa.rounds, aa.largest, pooled[0], pooled[1])


def pooled_noise(by_round: Mapping[int, Mapping[int, float]]) -> tuple[float, int] | None:
    """The standard deviation of one measurement's log score, pooled over every contestant, and
    its degrees of freedom; None without a residual degree of freedom.

    The rounds are blocks: each measures the contestants under that round's conditions (the
    machine's speed then). The log scores are fitted as a contestant's effect plus a round's
    effect (least squares, by alternating means: the rounds need not hold every contestant, as
    when one left early or an extra round raced only some); what is left over is the noise of a
    measurement. Its degrees of freedom are the measurements less the effects fitted (contestants
    + rounds - 1), many more than one pair's rounds - 1: with six contestants in three rounds, 10
    against 2 (a 95% t quantile of 2.23 against 4.30)."""
    cells = [
        (number, round_number, math.log(value))
        for number, rounds in by_round.items()
        for round_number, value in rounds.items()
        if value > 0
    ]
    if not cells:
        return None
    numbers = {c[0] for c in cells}
    rounds_seen = {c[1] for c in cells}
    df = len(cells) - len(numbers) - len(rounds_seen) + 1
    if df < 1 or not _connected(cells):
        return None
    contestant = dict.fromkeys(numbers, 0.0)
    block = dict.fromkeys(rounds_seen, 0.0)
    for _ in range(1000):
        contestant = {n: statistics.fmean(y - block[r] for m, r, y in cells if m == n) for n in numbers}
        moved = block
        block = {r: statistics.fmean(y - contestant[m] for m, q, y in cells if q == r) for r in rounds_seen}
        if max(abs(block[r] - moved[r]) for r in rounds_seen) < 1e-12:
            break
    residual = math.fsum((y - contestant[m] - block[r]) ** 2 for m, r, y in cells)
    return math.sqrt(residual / df), df


def _connected(cells: Sequence[tuple[int, int, float]]) -> bool:
    """Whether every contestant and round are linked through shared measurements (the effects
    are then estimable, and the degrees of freedom are as counted)."""
    links: dict[tuple[str, int], set[tuple[str, int]]] = {}
    for number, round_number, _ in cells:
        a, b = ("c", number), ("r", round_number)
        links.setdefault(a, set()).add(b)
        links.setdefault(b, set()).add(a)
    start = next(iter(links))
    seen, todo = {start}, [start]
    while todo:
        for other in links[todo.pop()] - seen:
            seen.add(other)
            todo.append(other)
    return len(seen) == len(links)


def paired_speedup(
    trial: dict[int, float], baseline: dict[int, float], aa: AA | None = None
) -> Speedup | None:
    """The speedup of a trial over the baseline from the rounds both were measured in (round ->
    tokens/s); None without such a round. One round gives no interval (it spans everything).

    With the instrument's A/A figure (`aa`), the interval is widened twice: the spread of the
    pair's log ratios is taken as at least the A/A pairs' spread (a few rounds that happen to agree
    do not make the instrument more precise than it is), and the A/A offset's size is added to
    each side (a position effect the rotation did not cancel enters the ratio as a speedup would).
    A speedup is decided only when the interval so widened excludes the line."""
    rounds = sorted(set(trial) & set(baseline))
    logs = [math.log(trial[r] / baseline[r]) for r in rounds if trial[r] > 0 and baseline[r] > 0]
    if not logs:
        return None
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return Speedup(math.exp(mean), 0.0, math.inf, 1)
    spread, df = statistics.stdev(logs), len(logs) - 1
    offset = 0.0
    if aa is not None:
        spread, offset = max(spread, aa.spread), abs(aa.offset)
        if aa.pooled is not None and aa.pooled_df > df:
            # the noise of every contestant's measurements, not only this pair's few rounds: its
            # quantile is far smaller; the pair's own spread and the A/A pair's stay as floors
            spread, df = max(spread, math.sqrt(2) * aa.pooled), aa.pooled_df
    half = t95(df) * spread / math.sqrt(len(logs)) + offset
    return Speedup(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs), offset, df)
