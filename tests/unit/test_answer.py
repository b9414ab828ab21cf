"""The study's answer (`autotune.answer.decide.decide`), decided from fake stored records.

The rules under test: the defaults are handed back when nothing beat them measurably (the best
one is named beside them); a configuration that changes the training math is handed back only
when it beats the best math-keeping finalist by more than `MATH_GAIN`; the figures are the
re-measured medians, the search window's only where nothing was re-measured (and the answer says
so); a cap re-selects among the configurations that fit it, the defaults included.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest

from autotune.answer import model
from autotune.answer.decide import MATH_GAIN, MIN_GAIN, decide
from autotune.answer.model import Answer
from autotune.answer.race import race_of
from autotune.records import FinalistRecord, StudyRecord, TrialRecord, study_attrs, study_record, trial_record
from autotune.schema import SCHEMA_VERSION
from autotune.space.mapping import trial_kwargs

MiB = 2**20
BASELINE_PARAMS: dict[str, Any] = {
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "precision": "fp32",
    "optim": "adamw_torch_fused",
    "attn_implementation": "eager",
}
# Three rounds of the baseline, next to each round of the finalists.
BASELINE_ROUNDS = [1000.0, 1010.0, 990.0]
# A round-to-round wobble shared by nothing: keeps the paired intervals finite but narrow.
WOBBLE = [1.0, 1.004, 0.997]


def params(**changes: Any) -> dict[str, Any]:
    return {**BASELINE_PARAMS, **changes}


def trial(
    number: int, knobs: dict[str, Any], tokens: float, peak_mib: float = 500, **attrs: Any
) -> TrialRecord:
    """A completed, feasible trial as the store holds it."""
    args, model = trial_kwargs(knobs)
    stored = {
        "training_args": args,
        "model_kwargs": model,
        "tokens_per_s": tokens,
        "rel_ci_halfwidth": 0.02,
        "peak_memory_bytes": int(peak_mib * MiB),
        "feasible": True,
        "trained": True,
        "train_loss": 7.0,
        **attrs,
    }
    return trial_record(number, knobs, "COMPLETE", stored)


def rounds(number: int, ratio: float, wobble: list[float] = WOBBLE, **extra: Any) -> dict[str, Any]:
    """A finalist's stored rounds: `ratio` times the baseline's, each round (version 1: scores)."""
    tokens = [b * ratio * w for b, w in zip(BASELINE_ROUNDS, wobble, strict=True)]
    return {"number": number, "tokens_per_s": tokens, "rounds": [1, 2, 3], "scores": tokens, **extra}


def study(
    finalists: list[dict[str, Any]] | None,
    *,
    baseline_peak_mib: float = 400,
    baseline_tokens: float = 1000.0,
    **attrs: Any,
) -> StudyRecord:
    """A study whose baseline ran `BASELINE_PARAMS`; with `finalists`, the baseline's rounds too."""
    stored: dict[str, Any] = {
        "schema_version": 1,
        "run_config": {"model": "tiny-gpt2", "space": "cpu"},
        "workload": {"model": "tiny-gpt2", "task": "causal-lm", "seq_len": 128},
        "device": {"device": "cpu", "memory_bytes": 2000 * MiB},
        "baseline": {
            "params": BASELINE_PARAMS,
            "tokens_per_s": baseline_tokens,
            "rel_ci_halfwidth": 0.02,
            "peak_memory_bytes": int(baseline_peak_mib * MiB),
        },
        **attrs,
    }
    if finalists is not None:
        base = {"number": -1, "tokens_per_s": BASELINE_ROUNDS, "rounds": [1, 2, 3], "scores": BASELINE_ROUNDS}
        if stored["schema_version"] == 0:  # version 0 stored no scores
            base.pop("scores")
        stored["finalists"] = [*finalists, base]
    return study_record("answer-test", stored)


# -- the defaults ------------------------------------------------------------------------------


def test_a_leader_whose_interval_holds_one_leaves_the_defaults_handed_back() -> None:
    # Trial 0 keeps the math and is 1.005x the baseline, round to round: 1.00 is in its interval.
    record = study([rounds(0, 1.005, [0.97, 1.03, 1.0]), rounds(1, 0.9)])
    trials = [trial(0, params(attn_implementation="sdpa"), 1100.0), trial(1, params(), 950.0)]
    answer = decide(record, trials)
    assert answer.rule == model.KEEP_DEFAULTS and answer.keeps_defaults
    assert answer.choice is not None and answer.choice.trial is None
    # What is handed back is the defaults' configuration, with their re-measured figures.
    assert answer.choice.params == BASELINE_PARAMS
    assert (answer.choice.training_args, answer.choice.model_kwargs) == trial_kwargs(BASELINE_PARAMS)
    assert answer.choice.remeasured and answer.choice.tokens_per_s is not None
    # the rounds' geometric mean, the baseline's own
    geometric = statistics.geometric_mean(BASELINE_ROUNDS)
    assert answer.choice.tokens_per_s.value == pytest.approx(geometric)
    assert answer.choice.tokens_per_s.low < geometric < answer.choice.tokens_per_s.high
    # The best measured is named beside them, with its paired speedup, never handed back.
    assert answer.alternative is not None and answer.alternative.trial == 0
    speedup = answer.alternative.speedup
    assert speedup is not None and speedup.low is not None and speedup.high is not None
    assert speedup.low < 1.0 < speedup.high
    assert answer.verdict.startswith("nothing beat the defaults measurably") and "trial 0" in answer.verdict
    assert answer.baseline_tokens_per_s == 1000.0


def test_a_leader_that_beats_the_defaults_measurably_is_the_answer() -> None:
    record = study([rounds(0, 1.2)])
    answer = decide(record, [trial(0, params(attn_implementation="sdpa"), 1200.0)])
    assert answer.rule == model.BEATS_DEFAULTS and answer.choice is not None and answer.choice.trial == 0
    assert answer.alternative is None and not answer.choice.changes
    assert answer.choice.speedup is not None and answer.choice.speedup.low is not None
    assert answer.choice.speedup.low > 1.01
    assert answer.choice.speedup.value == pytest.approx(1.2, rel=1e-3)
    assert answer.verdict.startswith("trial 0 beats the defaults: 1.20x")


# -- the training math -------------------------------------------------------------------------


def _math_race(gain: float) -> tuple[StudyRecord, list[TrialRecord]]:
    """Trial 1 keeps the math (1.2x the defaults); trial 2 swaps the optimizer for adafactor and is
    `gain` times faster than trial 1, round for round."""
    record = study([rounds(1, 1.2), rounds(2, 1.2 * gain, [1.0, 1.003, 0.999])])
    trials = [
        trial(1, params(optim="adamw_torch"), 1200.0),
        trial(2, params(optim="adafactor"), 1200.0 * gain),
    ]
    return record, trials


def test_a_math_change_three_percent_ahead_is_named_but_not_handed_back() -> None:
    answer = decide(*_math_race(1.03))
    assert answer.rule == model.KEEPS_MATH
    assert answer.choice is not None and answer.choice.trial == 1 and not answer.choice.changes
    assert answer.alternative is not None and answer.alternative.trial == 2
    assert any(change.startswith("optimizer") for change in answer.alternative.changes)
    gain = answer.alternative_gain
    assert gain is not None and gain.value == pytest.approx(1.03, rel=1e-2)
    assert gain.low is not None and gain.low <= 1 + MATH_GAIN
    assert "trial 1 keeps the training math" in answer.verdict
    assert "trial 2 is faster still" in answer.verdict and "named as the alternative" in answer.verdict


def test_a_math_change_that_beats_the_defaults_but_not_the_best_keeper_by_enough_is_said_so() -> None:
    # Trial 1 keeps the math and ties the defaults; trial 2 changes the optimizer and is 1.03x
    # trial 1: it beats the defaults measurably, but not the one that keeps the math by 1.05x.
    record = study([rounds(1, 1.0), rounds(2, 1.03, [1.0, 1.003, 0.999])])
    trials = [trial(1, params(optim="adamw_torch"), 1000.0), trial(2, params(optim="adafactor"), 1030.0)]
    answer = decide(record, trials)
    assert answer.rule == model.KEEP_DEFAULTS and answer.keeps_defaults
    assert answer.alternative is not None and answer.alternative.trial == 2
    beats = answer.alternative.speedup
    assert beats is not None and beats.low is not None and beats.low > 1 + MIN_GAIN
    assert answer.verdict.startswith("nothing that keeps the training math beat the defaults measurably")
    assert "(the best, trial 1," in answer.verdict
    assert "trial 2 is faster" in answer.verdict and "changes the training math" in answer.verdict
    assert f"not measurably the {1 + MATH_GAIN:.2f}x a math change must gain" in answer.verdict


def test_a_math_change_thirty_percent_ahead_is_the_answer_with_the_math_keeping_one_named() -> None:
    answer = decide(*_math_race(1.30))
    assert answer.rule == model.BEATS_DEFAULTS
    assert answer.choice is not None and answer.choice.trial == 2
    assert any(change.startswith("optimizer") for change in answer.choice.changes)
    assert answer.alternative is not None and answer.alternative.trial == 1
    assert not answer.alternative.changes
    # the gain stated is the alternative's over the answer: below one
    assert answer.alternative_gain is not None and answer.alternative_gain.value == pytest.approx(
        1 / 1.3, rel=1e-2
    )
    assert f"more than the {1 + MATH_GAIN:.2f}x a math change must gain" in answer.verdict


@pytest.mark.parametrize(("gain", "math_change_wins"), [(1.03, False), (1.30, True)])
def test_the_defaults_are_the_math_keeping_reference_when_they_are_the_fastest_that_keeps_it(
    gain: float, math_change_wins: bool
) -> None:
    # Trial 0 keeps the math but is slower than the defaults; trial 2 changes the optimizer and is
    # `gain` times the defaults: the defaults are the best measured configuration keeping the math.
    record = study([rounds(2, gain), rounds(0, 0.7)])
    trials = [
        trial(0, params(attn_implementation="sdpa"), 700.0),
        trial(2, params(optim="adafactor"), 1000.0 * gain),
    ]
    answer = decide(record, trials)
    assert answer.choice is not None
    if math_change_wins:
        # its gain is over the defaults, already stated as its speedup: no alternative to name
        assert answer.rule == model.BEATS_DEFAULTS and answer.choice.trial == 2 and answer.alternative is None
    else:
        assert answer.rule == model.KEEPS_MATH and answer.keeps_defaults
        assert answer.alternative is not None and answer.alternative.trial == 2
        assert answer.alternative_gain is not None and answer.alternative_gain.value == pytest.approx(
            gain, 1e-2
        )
        assert answer.verdict.startswith("keep the defaults: trial 2 is faster")
        assert "changes the training math" in answer.verdict


# -- a memory cap ------------------------------------------------------------------------------


def test_under_a_cap_the_defaults_are_not_handed_back_when_their_peak_is_over_it() -> None:
    # A tie with the defaults: without a cap, the defaults are the answer.
    record = study([rounds(0, 1.0)], baseline_peak_mib=900)
    trials = [trial(0, params(attn_implementation="sdpa"), 1000.0, peak_mib=700)]
    assert decide(record, trials).keeps_defaults
    # Under 800 MiB the defaults' 900 MiB peak does not fit: the best that fits is handed back.
    answer = decide(record, trials, cap_bytes=800 * MiB)
    assert answer.choice is not None and answer.choice.trial == 0 and not answer.keeps_defaults
    assert answer.memory_cap_bytes == 800 * MiB
    assert answer.choice.peak_memory_bytes is not None and answer.choice.peak_memory_bytes <= 800 * MiB
    # Under a cap the defaults fit, they are handed back again.
    assert decide(record, trials, cap_bytes=950 * MiB).keeps_defaults


def test_under_a_cap_that_excludes_the_defaults_a_tie_is_not_said_to_beat_them() -> None:
    record = study([rounds(0, 1.0)], baseline_peak_mib=900)
    trials = [trial(0, params(attn_implementation="sdpa"), 1000.0, peak_mib=700)]
    answer = decide(record, trials, cap_bytes=800 * MiB)
    assert answer.choice is not None and answer.choice.trial == 0
    assert answer.rule == model.DEFAULTS_OVER_CAP and "beats the defaults" not in answer.verdict
    assert "the defaults do not fit under the memory cap" in answer.verdict


def test_a_cap_nothing_fits_hands_back_nothing() -> None:
    record = study([rounds(0, 1.2)], baseline_peak_mib=900)
    answer = decide(record, [trial(0, params(attn_implementation="sdpa"), 1200.0, peak_mib=700)], 100 * MiB)
    assert answer.rule == model.NO_TRIAL and answer.choice is None


def test_a_cap_reselects_among_the_trials_that_fit_it() -> None:
    # Trial 0 is the re-measured leader, at 700 MiB; under 600 MiB trial 1 (500 MiB) is handed back.
    record = study([rounds(0, 1.3), rounds(1, 1.2)], baseline_peak_mib=900)
    trials = [
        trial(0, params(attn_implementation="sdpa"), 1300.0, peak_mib=700),
        trial(1, params(attn_implementation="sdpa", optim="adamw_torch"), 1200.0, peak_mib=500),
    ]
    assert decide(record, trials).choice.trial == 0  # type: ignore[union-attr]
    answer = decide(record, trials, cap_bytes=600 * MiB)
    assert answer.choice is not None and answer.choice.trial == 1 and answer.choice.remeasured


# -- without finalists -------------------------------------------------------------------------


def test_a_study_without_finalists_answers_from_the_search_windows_and_says_so() -> None:
    record = study(None)
    assert record.finalists == ()
    answer = decide(
        record, [trial(0, params(attn_implementation="sdpa"), 1500.0), trial(1, params(), 1100.0)]
    )
    assert answer.rule == model.NOT_REMEASURED
    assert answer.choice is not None and answer.choice.trial == 0 and not answer.choice.remeasured
    assert "not re-measured" in answer.verdict
    # the window's own figures: its throughput with its steps' interval, its speedup over the
    # baseline's window
    tokens = answer.choice.tokens_per_s
    assert tokens is not None and (tokens.value, tokens.low, tokens.high) == pytest.approx(
        (1500.0, 1470.0, 1530.0)
    )
    assert answer.choice.speedup is not None and answer.choice.speedup.value == pytest.approx(1.5)


def test_without_finalists_a_leader_no_faster_than_the_defaults_leaves_them_handed_back() -> None:
    answer = decide(study(None), [trial(0, params(attn_implementation="sdpa"), 1005.0)])
    assert answer.rule == model.KEEP_DEFAULTS and answer.keeps_defaults
    assert answer.alternative is not None and answer.alternative.trial == 0
    assert answer.verdict.endswith("(search windows only: not re-measured)")


# -- stores ------------------------------------------------------------------------------------


def test_a_version_0_stores_finalists_are_ranked_by_their_tokens_per_s() -> None:
    # Version 0 stored tokens/s per round with their median and spread, and no scores.
    v0_rounds = [
        {k: v for k, v in rounds(0, 1.2).items() if k != "scores"} | {"median": 1200.0, "spread": 0.01}
    ]
    v0_base = {"number": -1, "tokens_per_s": BASELINE_ROUNDS, "rounds": [1, 2, 3]}
    attrs = {
        "run_config": {"model": "tiny-gpt2", "space": "cpu"},
        "workload": {"model": "tiny-gpt2", "seq_len": 128},
        "baseline": {"params": BASELINE_PARAMS, "tokens_per_s": 1000.0, "peak_memory_bytes": 400 * MiB},
        "finalists": [*v0_rounds, v0_base],
        "winner": {"number": 0, "median_tokens_per_s": 1200.0, "verdict": "..."},
    }
    record = study_record("v0", attrs)  # its `winner` is not read: the rounds name their leader
    assert record.schema_version == 0 and record.answer is None
    race = race_of(record)
    assert race is not None and race.leader == 0
    assert race.median_tokens_per_s == pytest.approx(1200.0, rel=0.05)
    finalist = next(f for f in record.finalists if f.number == 0)
    assert finalist.scores is None
    assert finalist.scores_by_round() == dict(zip([1, 2, 3], finalist.tokens_per_s, strict=True))
    # without rounds stored, they are numbered from 1
    assert FinalistRecord(number=5, tokens_per_s=[1.0, 2.0]).scores_by_round() == {1: 1.0, 2: 2.0}
    answer = decide(record, [trial(0, params(attn_implementation="sdpa"), 1200.0)])
    assert answer.rule == model.BEATS_DEFAULTS and answer.choice is not None and answer.choice.trial == 0
    assert answer.choice.speedup is not None and answer.choice.speedup.value == pytest.approx(1.2, rel=1e-3)


@pytest.mark.parametrize("version", [0, 1])
def test_finalists_are_ranked_by_their_scores_or_in_a_version_0_store_their_tokens_per_s(
    version: int,
) -> None:
    # With the user's run length the rounds rank by the run's effective rate (scores): trial 1,
    # compiled, has the higher tokens/s but pays its compilation in a short run. A version 0 store
    # kept no scores: its finalists are ranked by tokens/s.
    compiled = rounds(1, 1.5, scores=[b * 1.1 for b in BASELINE_ROUNDS])
    plain = rounds(0, 1.2, scores=[b * 1.2 * w for b, w in zip(BASELINE_ROUNDS, WOBBLE, strict=True)])
    finalists = [compiled, plain]
    if version == 0:
        finalists = [{k: v for k, v in f.items() if k != "scores"} for f in finalists]
    run_config = {"model": "tiny-gpt2", "space": "cpu", "train_tokens": 10_000}
    record = study(finalists, run_config=run_config, schema_version=version)
    assert all((f.scores is None) == (version == 0) for f in record.finalists)
    trials = [
        trial(0, params(attn_implementation="sdpa"), 1200.0),
        trial(1, params(torch_compile="inductor"), 1500.0),
    ]
    answer = decide(record, trials)
    assert answer.objective == "run_time"
    assert answer.choice is not None and answer.choice.trial == (0 if version == 1 else 1), answer.verdict


def test_the_answer_is_stored_and_read_back_unchanged() -> None:
    record, trials = _math_race(1.03)
    answer = decide(record, trials)
    stored = json.loads(json.dumps(study_attrs(answer=answer)))  # as the store keeps it: JSON
    assert stored["schema_version"] == SCHEMA_VERSION
    assert Answer.from_dict(stored["answer"]) == answer
    assert Answer.from_dict(study_record("again", stored).answer or {}) == answer


def test_a_trial_of_the_baselines_configuration_is_the_baseline() -> None:
    # Without finalists, trial 0 (the baseline's own knobs) measured fastest in the search: the
    # answer is that the defaults are the fastest measured, with no speedup of them over themselves.
    record = study(None)
    trials = [trial(0, params(), 1100.0), trial(1, params(attn_implementation="sdpa"), 1050.0)]
    answer = decide(record, trials)
    assert answer.rule == model.KEEP_DEFAULTS and answer.keeps_defaults
    assert answer.verdict.startswith("the defaults are the fastest measured (trial 0 ran their configuration")
    # Slower than another trial, it is left out of the contest: trial 1 is judged on its own.
    slower = decide(record, [trial(0, params(), 900.0), trial(1, params(attn_implementation="sdpa"), 1050.0)])
    assert slower.choice is not None and slower.choice.trial == 1


def test_an_interval_of_one_round_is_stated_with_it() -> None:
    # one round of the rounds' model has an interval too (its noise from the A/A pair): a speedup
    # is never stated without the interval it carries
    assert model.Interval(1.5, 1.2, 1.9, 1).describe() == "1.50x (95% interval 1.20-1.90x over 1 round)"
    assert model.Interval(1.5, None, None, 1).describe() == "1.50x"
