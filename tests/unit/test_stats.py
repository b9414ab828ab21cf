"""Throughput arithmetic: window summaries, confidence intervals and the stopping rules."""

from __future__ import annotations

import math

import pytest

from autotune.measure.stats import (
    MIN_GAIN,
    WindowStats,
    paired_speedup,
    relative_ci_halfwidth,
    summarize_window,
    t95,
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
    assert stats.rel_ci_halfwidth == pytest.approx(4.303 / 5)


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
    assert relative_ci_halfwidth([0.5, 0.25, 1.0]) == pytest.approx(4.303 / math.sqrt(7))


def test_ci_shrinks_with_more_steps():
    few = relative_ci_halfwidth([1.0, 1.1] * 2)
    many = relative_ci_halfwidth([1.0, 1.1] * 20)
    assert 0 < many < few


def test_ci_is_scale_free():
    times = [0.5, 0.25, 1.0]
    assert relative_ci_halfwidth([10 * t for t in times]) == pytest.approx(relative_ci_halfwidth(times))


@pytest.mark.parametrize(
    ("df", "value"), [(1, 12.706), (2, 4.303), (10, 2.228), (30, 2.042), (31, 1.96), (1000, 1.96)]
)
def test_t95(df, value):
    assert t95(df) == value


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
    assert speedup is not None and speedup.rounds == 3
    assert speedup.ratio == pytest.approx(1.2)
    assert speedup.low == pytest.approx(1.2) and speedup.high == pytest.approx(1.2)
    assert speedup.beats_baseline and speedup.decided


def test_a_speedup_within_the_noise_does_not_beat_the_baseline() -> None:
    baseline = {1: 1000.0, 2: 1000.0, 3: 1000.0}
    trial = {1: 1030.0, 2: 985.0, 3: 1010.0}
    speedup = paired_speedup(trial, baseline)
    assert speedup is not None
    assert speedup.low < 1.0 < speedup.high  # the interval holds "no change"
    assert not speedup.beats_baseline and not speedup.decided
    # A clear loss is decided too: more rounds would not make it a win.
    slower = paired_speedup({1: 900.0, 2: 910.0, 3: 890.0}, baseline)
    assert slower is not None and slower.decided and not slower.beats_baseline


def test_a_gain_under_the_minimum_is_not_a_win_however_sure() -> None:
    baseline = {1: 1000.0, 2: 1000.0, 3: 1000.0}
    tiny = paired_speedup({r: 1000.0 * (1 + MIN_GAIN / 2) for r in baseline}, baseline)
    assert tiny is not None and tiny.decided and not tiny.beats_baseline


def test_paired_speedup_uses_only_rounds_both_were_measured_in() -> None:
    assert paired_speedup({1: 100.0}, {2: 100.0}) is None
    one = paired_speedup({1: 110.0, 2: 999.0}, {1: 100.0})
    assert one is not None and one.rounds == 1 and one.ratio == pytest.approx(1.1)
    assert one.low == 0.0 and math.isinf(one.high) and not one.decided


def test_could_decide_projects_the_interval_to_more_rounds() -> None:
    from autotune.measure.stats import paired_speedup, t95

    logs = [0.17, 0.07, 0.12]  # mean 0.12, standard deviation 0.05
    speedup = paired_speedup(
        {r: 100 * math.exp(x) for r, x in enumerate(logs)}, dict.fromkeys(range(3), 100.0)
    )
    assert speedup is not None and speedup.rounds == 3
    # at 6 rounds the half-width would be t95(5) * 0.05 / sqrt(6) = 0.0525 (now 0.124)
    half_then = t95(5) * 0.05 / math.sqrt(6)
    assert half_then == pytest.approx(0.0525, abs=1e-3)
    assert speedup.could_decide(6, 1.0)  # 0.12 from 1 in logs: more than 0.0525
    assert speedup.could_decide(6, math.exp(0.12 - 0.06))  # 0.06 away: still decidable
    assert not speedup.could_decide(6, math.exp(0.12 - 0.05))  # 0.05 away: not
    assert not speedup.could_decide(3, 1.0)  # no rounds left
    one_round = paired_speedup({0: 120.0}, {0: 100.0})
    assert one_round is not None and not one_round.could_decide(6, 1.0)  # no spread known yet


# --- the noise of one measurement, pooled over the rounds' contestants -----------------------------


def _lstsq_residual_sd(by_round: dict[int, dict[int, float]]) -> tuple[float, int]:
    """The additive model (contestant + round) fitted by a least-squares solver: what
    `pooled_noise` must agree with, balanced or not."""
    import numpy as np

    cells = [(n, r, math.log(v)) for n, rounds in by_round.items() for r, v in rounds.items()]
    numbers = sorted({c[0] for c in cells})
    rounds = sorted({c[1] for c in cells})
    design = np.zeros((len(cells), len(numbers) + len(rounds)))
    for row, (n, r, _) in enumerate(cells):
        design[row, numbers.index(n)] = 1
        design[row, len(numbers) + rounds.index(r)] = 1
    y = np.array([c[2] for c in cells])
    fit, *_ = np.linalg.lstsq(design, y, rcond=None)
    df = len(cells) - len(numbers) - len(rounds) + 1
    return math.sqrt(float(((y - design @ fit) ** 2).sum()) / df), df


def test_pooled_noise_is_the_residual_of_contestant_and_round_effects() -> None:
    from autotune.measure.stats import pooled_noise

    # each round's whole machine speed differs (drift), contestants differ, and a little noise
    drift = {1: 1.0, 2: 0.7, 3: 1.3}
    level = {0: 120.0, 1: 100.0, 2: 90.0, -1: 100.0, -2: 100.0}
    wobble = [0.02, -0.03, 0.01, 0.04, -0.02, 0.0, -0.01, 0.03, -0.04, 0.02, 0.01, -0.02, 0.03, 0.0, -0.01]
    it = iter(wobble)
    by_round = {n: {r: v * d * math.exp(next(it)) for r, d in drift.items()} for n, v in level.items()}
    pooled = pooled_noise(by_round)
    assert pooled is not None
    sd, df = pooled
    assert df == 15 - 5 - 3 + 1 == 8  # against 2 for one pair's three rounds
    assert (sd, df) == pytest.approx(_lstsq_residual_sd(by_round))
    assert sd < 0.04  # the drift of 30% between rounds is the rounds' effect, not noise
    # without noise, nothing is left over however large the drift
    exact = {n: {r: v * d for r, d in drift.items()} for n, v in level.items()}
    assert pooled_noise(exact) == pytest.approx((0.0, 8), abs=1e-9)


def test_pooled_noise_fits_rounds_that_do_not_hold_every_contestant() -> None:
    from autotune.measure.stats import pooled_noise

    # trial 2 left after two rounds; an extra fourth round raced only trial 0 and the baseline
    by_round = {
        0: {1: 130.0, 2: 118.0, 3: 125.0, 4: 121.0},
        2: {1: 80.0, 2: 84.0},
        -1: {1: 100.0, 2: 97.0, 3: 103.0, 4: 99.0},
        -2: {1: 104.0, 2: 95.0, 3: 100.0, 4: 98.0},
    }
    pooled = pooled_noise(by_round)
    assert pooled is not None
    assert pooled == pytest.approx(_lstsq_residual_sd(by_round))
    # nothing to pool yet (one round), or contestants never measured in a common round
    assert pooled_noise({0: {1: 100.0}, -1: {1: 90.0}}) is None
    assert pooled_noise({0: {1: 100.0, 2: 90.0}, 1: {1: 80.0, 2: 81.0}, 5: {3: 7.0, 4: 8.0}}) is None
    assert pooled_noise({}) is None


def test_a_pooled_noise_decides_with_its_degrees_of_freedom_and_keeps_the_floors() -> None:
    from autotune.records import AA

    # a steady 15% speedup over three rounds, whose own pair spread is 0.03 in logs
    logs = [0.17, 0.14, 0.11]
    trial = {r: 100 * math.exp(x) for r, x in enumerate(logs)}
    base = dict.fromkeys(range(3), 100.0)
    own = paired_speedup(trial, base, AA(0.0, 0.03, 3, 0.03))
    assert own is not None and own.df == 2
    pooled = paired_speedup(trial, base, AA(0.0, 0.03, 3, 0.03, pooled=0.02, pooled_df=10))
    assert pooled is not None and pooled.df == 10
    mean = math.log(pooled.ratio)
    # the pair's spread (0.03) is above sqrt(2) x 0.02: it stays; the quantile is 10 df's
    assert math.log(pooled.high) - mean == pytest.approx(t95(10) * 0.03 / math.sqrt(3))
    assert math.log(own.high) - mean == pytest.approx(t95(2) * 0.03 / math.sqrt(3))
    # a pooled noise above the pair's and the A/A's is the spread; the A/A offset is still added
    wide = paired_speedup(trial, base, AA(0.01, 0.03, 3, 0.03, pooled=0.05, pooled_df=10))
    assert wide is not None
    assert math.log(wide.high) - mean == pytest.approx(t95(10) * math.sqrt(2) * 0.05 / math.sqrt(3) + 0.01)
    # the A/A pair's own spread stays a floor too
    aa_wide = paired_speedup(trial, base, AA(0.0, 0.2, 3, 0.2, pooled=0.01, pooled_df=10))
    assert aa_wide is not None
    assert math.log(aa_wide.high) - mean == pytest.approx(t95(10) * 0.2 / math.sqrt(3))
    assert pooled.to_dict()["df"] == 10


def test_the_instrument_carries_its_pooled_noise_through_the_store_and_says_it() -> None:
    from autotune.measure.stats import instrument
    from autotune.records import AA, BASELINE, BASELINE_AGAIN

    by_round = {
        0: {1: 130.0, 2: 118.0, 3: 125.0},
        BASELINE: {1: 100.0, 2: 97.0, 3: 103.0},
        BASELINE_AGAIN: {1: 104.0, 2: 95.0, 3: 100.0},
    }
    aa = instrument(by_round)
    assert aa is not None and aa.rounds == 3 and aa.pooled_df == 4 and aa.pooled is not None
    assert AA.from_dict(aa.to_dict()) == aa
    assert "pooled over every contestant" in aa.describe() and "(4 degrees of freedom)" in aa.describe()
    # an answer stored before the pooled noise existed reads as the A/A pair alone
    old = {"offset": aa.offset, "spread": aa.spread, "rounds": 3, "largest": aa.largest}
    assert AA.from_dict(old) == AA(aa.offset, aa.spread, 3, aa.largest)
    assert instrument({0: {1: 1.0}, BASELINE: {1: 2.0}}) is None  # no A/A pair: no instrument
