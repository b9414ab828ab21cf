"""The trial's score (throughput or the user's whole run), compile payoff and loss parity."""

from __future__ import annotations

import math

import pytest

from autotune.errors import UsageError
from autotune.options import RunConfig
from autotune.records import Baseline, TrialRecord, measured_record, study_record, trial_attrs
from autotune.store.objective import (
    LossComparison,
    compare_losses,
    loss_delta,
    loss_diverged,
    payoff_tokens,
    predicted_run_s,
    run_facts,
    run_lines,
    run_tokens,
    score,
)
from autotune.store.outcomes import LOSS_DIVERGED, constraint_values

PLAIN_ATTRS = {"tokens_per_s": 1000.0, "setup_s": 2.0, "warmup_excess_s": 0.5}
COMPILED_ATTRS = {
    "tokens_per_s": 2000.0,
    "setup_s": 2.0,
    "warmup_excess_s": 30.5,
    "training_args": {"torch_compile": True},
}
PLAIN = measured_record(PLAIN_ATTRS)
COMPILED = measured_record(COMPILED_ATTRS)


def _with(record: TrialRecord, **attrs: object) -> TrialRecord:
    return measured_record({**trial_attrs(record), **attrs})


def test_without_a_run_length_the_score_is_throughput() -> None:
    assert score(COMPILED, None) == 2000.0
    assert score(measured_record({}), None) is None


def test_with_a_run_length_the_score_is_the_runs_effective_rate() -> None:
    # 1e4 tokens: plain 2 + 0.5 + 10 s, compiled 2 + 30.5 + 5 s
    assert predicted_run_s(PLAIN, 1e4) == pytest.approx(12.5)
    assert score(PLAIN, 1e4) == pytest.approx(1e4 / 12.5)
    assert score(PLAIN, 1e4) > score(COMPILED, 1e4)  # the short run: compiling does not pay
    assert score(COMPILED, 1e6) > score(PLAIN, 1e6)  # the long one: it does


def test_the_one_off_time_is_the_larger_of_compile_seconds_and_warmup_excess() -> None:
    # dynamo's compile timer misses inductor's autotuning and the allocator's growth, which the
    # warm-up excess holds; a compile timer above the excess (a cache hit's tracing) counts whole.
    excess = float(COMPILED.measurement.warmup_excess_s or 0.0)
    assert predicted_run_s(_with(COMPILED, compile_s=10.0), 1e4) == pytest.approx(2 + max(10, excess) + 5)
    assert predicted_run_s(_with(COMPILED, compile_s=excess + 20), 1e4) == pytest.approx(2 + excess + 20 + 5)


def test_compilation_pays_for_itself_where_the_run_times_cross() -> None:
    payoff = payoff_tokens(COMPILED, PLAIN)
    assert payoff == pytest.approx(30 / (1 / 1000 - 1 / 2000))  # 60k tokens
    assert predicted_run_s(COMPILED, payoff) == pytest.approx(predicted_run_s(PLAIN, payoff))
    assert payoff_tokens(PLAIN, COMPILED) is None  # not faster per token: never
    assert payoff_tokens(_with(COMPILED, warmup_excess_s=0.0), PLAIN) == 0.0


def test_run_steps_are_counted_in_the_baselines_tokens_per_step() -> None:
    assert run_tokens(5000, None, None) == 5000
    assert run_tokens(None, 10, Baseline(tokens_per_step=512)) == 5120
    assert run_tokens(None, 10, Baseline()) is None
    assert run_tokens(None, 10, None) is None
    assert run_tokens(None, None, Baseline(tokens_per_step=512)) is None


def _curve(batch_tokens: int, losses: list[float]) -> list[list[float]]:
    return [[batch_tokens * (i + 1), loss] for i, loss in enumerate(losses)]


def test_equal_losses_at_equal_tokens_have_no_delta_whatever_the_batch() -> None:
    # The same samples at the same token counts: batch 8 sees in one step what batch 4 sees in two.
    small = _curve(64, [10.0, 10.0, 9.0, 9.0, 8.0, 8.0, 7.0, 7.0])
    large = _curve(128, [10.0, 9.0, 8.0, 7.0])
    assert loss_delta(small, large) == pytest.approx(0.0)
    assert loss_delta(large, small) == pytest.approx(0.0)


def test_the_delta_is_over_the_second_half_of_the_shared_tokens() -> None:
    baseline = _curve(100, [10.0] * 10)  # 1000 tokens
    trial = _curve(100, [10.0, 10.0, 10.0, 11.0, 11.0, 11.0, 11.0, 11.0, 11.0, 11.0])
    # only 600 tokens shared with a shorter trial: its loss over tokens 300..600 is 11
    assert loss_delta(trial[:6], baseline) == pytest.approx(0.1)
    # Every compared step is 10% worse, no spread: the difference stands out of the noise.
    comparison = compare_losses(trial[:6], baseline)
    assert comparison.paired_steps == 3 and comparison.interval == pytest.approx((0.1, 0.1))
    assert loss_diverged(comparison, 0.05)
    assert not loss_diverged(comparison, 0.2)


def test_a_non_finite_loss_diverges_and_no_overlap_gives_no_verdict() -> None:
    baseline = _curve(100, [10.0] * 4)
    assert loss_delta(_curve(100, [10.0, 10.0, 10.0, math.nan]), baseline) == math.inf
    assert loss_diverged(compare_losses(_curve(100, [10.0, 10.0, 10.0, math.nan]), baseline), 0.05)
    assert loss_diverged(LossComparison(math.inf), 0.05)
    assert loss_delta([], baseline) is None and loss_delta(baseline, []) is None
    assert compare_losses([], baseline) == LossComparison()
    assert not loss_diverged(LossComparison(), 0.05)


def test_loss_diverged_is_an_infeasible_constraint() -> None:
    assert constraint_values(LOSS_DIVERGED, None, None)["loss_parity"] == 1.0
    assert constraint_values(None, None, None)["loss_parity"] == 0.0


def test_the_answer_states_run_time_cost_and_loss_delta() -> None:
    user_attrs = {
        "run_config": {"train_tokens": 3_600_000, "price_per_hour": 2.0},
        "baseline": {"tokens_per_s": 500.0},
    }
    facts = run_facts(study_record("s", user_attrs), _with(PLAIN, loss_delta=0.012))
    assert facts["predicted_run_s"] == pytest.approx(3602.5)
    assert facts["baseline_predicted_run_s"] == pytest.approx(7200.0)
    assert facts["predicted_cost"] == pytest.approx(3602.5 / 3600 * 2.0)
    lines = run_lines(facts)
    assert lines[0] == "loss vs the baseline at equal tokens: +1.2%"
    assert (
        lines[1]
        == "predicted run of 3,600,000 tokens: 60.0 min (2.00 at the given price); the baseline: 2.0 h (4.00)"
    )


def test_without_a_run_length_a_compiled_answer_says_when_compiling_pays() -> None:
    study = study_record("s", {"run_config": {}})
    facts = run_facts(study, COMPILED, PLAIN)
    assert "predicted_run_s" not in facts
    assert run_lines(facts) == [
        "compilation pays for itself after 60,000 tokens (against the best uncompiled trial)"
    ]
    assert "compile_payoff_tokens" not in run_facts(study, PLAIN, PLAIN)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loss_tolerance": 0.0}, "^loss_tolerance must be positive"),
        ({"train_tokens": 10, "train_steps": 10}, "^give train_tokens or train_steps, not both"),
        ({"train_tokens": 0}, "^train_tokens must be at least 1"),
        ({"train_steps": 5, "measure_baseline": False}, "measure_baseline=False does not measure"),
        ({"price_per_hour": -1.0}, "^price_per_hour must be positive"),
    ],
)
def test_bad_run_settings_are_usage_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        RunConfig(**kwargs)


def test_run_settings_round_trip_through_the_stored_config() -> None:
    config = RunConfig(loss_tolerance=0.1, train_tokens=10**9, price_per_hour=3.5)
    again = RunConfig.from_dict(config.to_dict())
    assert (again.loss_tolerance, again.train_tokens, again.price_per_hour) == (0.1, 10**9, 3.5)
    assert (
        RunConfig.from_dict({k: v for k, v in config.to_dict().items() if k != "train_tokens"}).train_tokens
        is None
    )
