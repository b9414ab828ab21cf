"""Throughput arithmetic: window summaries, confidence intervals and the stopping rules."""

from __future__ import annotations

import math
import statistics

import pytest

from autotune.measure.stats import (
    MIN_GAIN,
    WindowStats,
    paired_speedup,
    relative_ci_halfwidth,
    speedup_of,
    summarize_window,
    t95,
    t_cdf,
    t_quantile,
    warmup_done,
    window_done,
)

# --- summarize_window ------------------------------------------------------------------------------


def test_summarize_known_window():
    stats = summarize_window([0.5, 0.5, 1.0], tokens_per_step=1000, samples_per_step=4)
    assert isinstance(stats, WindowStats)
    assert stats.tokens_per_s == 1500.0  # 3000 tokens / 2.0 s: total work over total time
    assert stats.samples_per_s == 6.0  # 12 samples / 2.0 s
    assert stats.measured_steps == 3
    assert stats.window_s == 2.0
    assert stats.step_time_mean_s == pytest.approx(2.0 / 3.0)
    assert stats.step_time_median_s == 0.5
    assert stats.step_time_min_s == 0.5
    assert stats.step_time_max_s == 1.0
    assert stats.step_time_std_s == pytest.approx(math.sqrt(1.0 / 12.0))
    # rates 2, 2, 1: mean 5/3, stdev 1/sqrt(3) -> 4.303 * (1/sqrt(3)) / sqrt(3) / (5/3) = 4.303 / 5
    assert stats.rel_ci_halfwidth == pytest.approx(t95(2) / 5)


def test_throughput_is_not_the_mean_of_per_step_rates():
    stats = summarize_window([1.0, 3.0], tokens_per_step=300, samples_per_step=1)
    assert stats.tokens_per_s == 150.0  # 600 / 4, not mean(300, 100) = 200
    assert stats.step_time_median_s == 2.0


def test_single_step_window():
    stats = summarize_window([0.25], tokens_per_step=100, samples_per_step=2)
    assert stats.tokens_per_s == 400.0
    assert stats.samples_per_s == 8.0
    assert stats.step_time_std_s == 0.0
    assert stats.rel_ci_halfwidth == math.inf


def test_to_dict_has_every_field():
    stats = summarize_window([0.5, 0.5], 10, 1)
    data = stats.to_dict()
    assert data["tokens_per_s"] == 20.0
    assert data["measured_steps"] == 2
    assert set(data) == {
        "tokens_per_s",
        "samples_per_s",
        "measured_steps",
        "window_s",
        "step_time_mean_s",
        "step_time_median_s",
        "step_time_min_s",
        "step_time_max_s",
        "step_time_std_s",
        "rel_ci_halfwidth",
    }


def test_empty_window_raises():
    with pytest.raises(ValueError, match="empty measured window"):
        summarize_window([], 1000, 4)


@pytest.mark.parametrize("times", [[0.5, 0.0], [-0.1], [0.5, 0.5, -1.0]])
def test_non_positive_step_time_raises(times):
    with pytest.raises(ValueError, match="step times must be positive"):
        summarize_window(times, 1000, 4)


# --- confidence interval and t quantiles -----------------------------------------------------------


@pytest.mark.parametrize("times", [[], [0.5]])
def test_ci_is_infinite_below_two_steps(times):
    assert relative_ci_halfwidth(times) == math.inf


def test_ci_is_zero_for_identical_steps():
    assert relative_ci_halfwidth([0.2, 0.2]) == 0.0
    assert relative_ci_halfwidth([0.3] * 10) == 0.0


def test_ci_hand_computation():
    # rates 2, 4, 1: mean 7/3, sample variance 7/3, n = 3, df = 2 (t = 4.303)
    # halfwidth = 4.303 * sqrt(7/3) / sqrt(3) / (7/3) = 4.303 / sqrt(7)
    assert relative_ci_halfwidth([0.5, 0.25, 1.0]) == pytest.approx(t95(2) / math.sqrt(7))


def test_ci_shrinks_with_more_steps():
    few = relative_ci_halfwidth([1.0, 1.1] * 2)
    many = relative_ci_halfwidth([1.0, 1.1] * 20)
    assert 0 < many < few


def test_ci_is_scale_free():
    times = [0.5, 0.25, 1.0]
    assert relative_ci_halfwidth([10 * t for t in times]) == pytest.approx(relative_ci_halfwidth(times))


@pytest.mark.parametrize(
    ("df", "value"), [(1, 12.706), (2, 4.303), (10, 2.228), (30, 2.042), (31, 2.040), (1000, 1.962)]
)
def test_t95(df, value):
    assert t95(df) == pytest.approx(value, abs=5e-4)


def test_t95_decreases():
    values = [t95(df) for df in range(1, 40)]
    assert values == sorted(values, reverse=True)


@pytest.mark.parametrize("df", [0, -1])
def test_t95_needs_a_degree_of_freedom(df):
    with pytest.raises(ValueError, match="at least one degree of freedom"):
        t95(df)


# --- warmup_done -----------------------------------------------------------------------------------


def test_warmup_needs_min_steps():
    assert not warmup_done([], min_steps=3, max_steps=20)
    assert not warmup_done([1.0, 1.0], min_steps=3, max_steps=20)
    assert warmup_done([1.0, 1.0, 1.0], min_steps=3, max_steps=20)


def test_warmup_settle_rule():
    # the last step must be within 1.25x of the fastest warm-up step
    assert warmup_done([5.0, 1.0, 1.2], min_steps=3, max_steps=20)
    assert warmup_done([5.0, 1.0, 1.25], min_steps=3, max_steps=20)
    assert not warmup_done([5.0, 1.0, 1.3], min_steps=3, max_steps=20)
    assert warmup_done([5.0, 1.0, 1.3], min_steps=3, max_steps=20, settle=1.5)
    assert not warmup_done([5.0, 1.0, 1.2], min_steps=3, max_steps=20, settle=1.1)


def test_warmup_ends_at_max_steps_regardless():
    unsettled = [1.0] + [5.0] * 9
    assert not warmup_done(unsettled[:9], min_steps=3, max_steps=10)
    assert warmup_done(unsettled, min_steps=3, max_steps=10)
    assert warmup_done([*unsettled, 5.0], min_steps=3, max_steps=10)


# --- window_done -----------------------------------------------------------------------------------

NOISY = [0.1, 0.3, 0.1, 0.3, 0.1, 0.3]


def test_window_ends_at_max_steps():
    assert not window_done(NOISY[:5], min_steps=2, max_steps=6, max_seconds=100, target_rel_ci=0.01)
    assert window_done(NOISY, min_steps=2, max_steps=6, max_seconds=100, target_rel_ci=0.01)


def test_window_ends_at_max_seconds():
    assert not window_done([0.1, 0.3], min_steps=5, max_steps=30, max_seconds=0.5, target_rel_ci=0.01)
    assert window_done([0.1, 0.3, 0.1], min_steps=5, max_steps=30, max_seconds=0.5, target_rel_ci=0.01)
    assert window_done([2.0], min_steps=5, max_steps=30, max_seconds=2.0, target_rel_ci=0.01)


def test_window_ends_once_stable_after_min_steps():
    steady = [0.2] * 5
    assert window_done(steady, min_steps=5, max_steps=30, max_seconds=100, target_rel_ci=0.03)
    assert not window_done(steady[:4], min_steps=5, max_steps=30, max_seconds=100, target_rel_ci=0.03)


def test_window_goes_on_while_noisy():
    ci = relative_ci_halfwidth(NOISY)
    assert not window_done(NOISY, min_steps=2, max_steps=30, max_seconds=100, target_rel_ci=ci * 0.99)
    assert window_done(NOISY, min_steps=2, max_steps=30, max_seconds=100, target_rel_ci=ci)


def test_a_paired_speedup_cancels_drift_and_carries_its_interval() -> None:
    # The machine slows down over the rounds; the trial is 20% faster in every round.
    baseline = {1: 1000.0, 2: 800.0, 3: 600.0}
    trial = {r: 1.2 * v for r, v in baseline.items()}
    speedup = paired_speedup(trial, baseline)
    assert speedup is not None and speedup.rounds == 3 and speedup.df == 2
    assert speedup.ratio == pytest.approx(1.2)
    assert speedup.low == pytest.approx(1.2) and speedup.high == pytest.approx(1.2)
    assert speedup.beats_baseline and speedup.decided()


def test_a_speedup_within_the_noise_does_not_beat_the_baseline() -> None:
    baseline = {1: 1000.0, 2: 1000.0, 3: 1000.0}
    trial = {1: 1030.0, 2: 985.0, 3: 1010.0}
    speedup = paired_speedup(trial, baseline)
    assert speedup is not None
    assert speedup.low < 1.0 < speedup.high  # the interval holds "no change"
    assert not speedup.beats_baseline and not speedup.decided()
    # the t interval of the per-round log ratios, by hand
    logs = [math.log(t / 1000.0) for t in trial.values()]
    half = t95(2) * statistics.stdev(logs) / math.sqrt(3)
    assert speedup.se == pytest.approx(statistics.stdev(logs) / math.sqrt(3))
    assert math.log(speedup.high / speedup.ratio) == pytest.approx(half)
    # A clear loss is decided too: more rounds would not make it a win.
    slower = paired_speedup({1: 900.0, 2: 910.0, 3: 890.0}, baseline)
    assert slower is not None and slower.decided() and not slower.beats_baseline


def test_a_gain_under_the_minimum_is_not_a_win_however_sure() -> None:
    baseline = {1: 1000.0, 2: 1000.0, 3: 1000.0}
    tiny = paired_speedup({r: 1000.0 * (1 + MIN_GAIN / 2) for r in baseline}, baseline)
    assert tiny is not None and tiny.decided() and not tiny.beats_baseline


def test_paired_speedup_uses_only_rounds_both_were_measured_in() -> None:
    assert paired_speedup({1: 100.0}, {2: 100.0}) is None
    one = paired_speedup({1: 110.0, 2: 999.0}, {1: 100.0})
    assert one is not None and one.rounds == 1 and one.ratio == pytest.approx(1.1)
    assert one.low == 0.0 and math.isinf(one.high) and not one.decided()


def test_a_speedup_at_another_level_widens_by_its_quantile() -> None:
    at95 = speedup_of(0.1, 0.02, 4, 5)
    at99 = speedup_of(0.1, 0.02, 4, 5, level=0.99)
    assert math.log(at95.high / at95.ratio) == pytest.approx(t95(4) * 0.02)
    assert math.log(at99.high / at99.ratio) == pytest.approx(t_quantile(0.995, 4) * 0.02)
    assert at99.low < at95.low and at99.high > at95.high
    assert speedup_of(0.1, 0.02, 4, 5).to_dict()["se"] == 0.02


@pytest.mark.parametrize(
    ("x", "df", "p"),
    [(0.0, 3, 0.5), (1.0, 1, 0.75), (2.0, 2, 0.9082482904638631), (-2.0, 2, 1 - 0.9082482904638631)],
)
def test_t_cdf_known_values(x: float, df: int, p: float) -> None:
    assert t_cdf(x, df) == pytest.approx(p, abs=1e-12)


@pytest.mark.parametrize("df", [1, 2, 3, 7, 30, 200])
@pytest.mark.parametrize("p", [0.6, 0.975, 0.995, 0.9995])
def test_t_quantile_inverts_the_cdf(df: int, p: float) -> None:
    q = t_quantile(p, df)
    assert t_cdf(q, df) == pytest.approx(p, abs=1e-10)
    assert t_quantile(1 - p, df) == pytest.approx(-q)


def test_t_quantile_refuses_a_probability_outside_zero_and_one() -> None:
    with pytest.raises(ValueError, match="strictly between"):
        t_quantile(1.0, 3)
