"""Screening: a trial whose fastest step is under the screening line (a fraction of the study's best
tokens/s) stops there; a trial that can still compete, a measurement, or no reference goes on."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from autotune.config import MeasureSettings
from autotune.errors import UsageError
from autotune.measure import callback as callback_module
from autotune.measure.callback import ScreenedOut, ThroughputCallback
from autotune.progress import Reporter
from autotune.study import outcomes
from autotune.trial.errors import AGREED_ENDS, failure_reason

SETTINGS = MeasureSettings(warmup_steps=3, max_warmup_steps=6, min_steps=3, max_steps=10, screen_ratio=0.5)
ARGS = SimpleNamespace(per_device_train_batch_size=4, gradient_accumulation_steps=1, world_size=1)
TOKENS_PER_SAMPLE = 25  # 100 tokens per step


def _run(step_times: list[float], reference: float | None, settings: MeasureSettings = SETTINGS) -> Any:
    """Drive the callback through steps of the given seconds (a fake clock): the number of steps it
    ran, and the `ScreenedOut` it raised (None if it did not)."""
    clock = [100.0]
    original = callback_module.time.perf_counter
    callback_module.time.perf_counter = lambda: clock[0]  # type: ignore[assignment]
    try:
        measured = ThroughputCallback(settings, TOKENS_PER_SAMPLE, Reporter())
        measured.screen_against = reference
        control = SimpleNamespace(should_training_stop=False)
        measured.on_train_begin(ARGS, None, control)
        for number, seconds in enumerate(step_times, start=1):
            clock[0] += seconds
            try:
                measured.on_step_end(ARGS, None, control)
            except ScreenedOut as screened:
                return number, screened
            if control.should_training_stop:
                return number, None
        return len(step_times), None
    finally:
        callback_module.time.perf_counter = original  # type: ignore[assignment]


def test_a_trial_ten_times_slower_than_the_best_stops_after_the_minimum_warm_up() -> None:
    # 100 tokens per 1 s step: 100 tok/s against a best of 1000 tok/s.
    steps, screened = _run([5.0, 1.0, 1.0, 1.0, 1.0, 1.0], reference=1000.0)
    assert screened is not None and steps == SETTINGS.warmup_steps
    assert screened.bound_tokens_per_s == pytest.approx(100.0)
    assert screened.attrs() == {
        "screen_tokens_per_s": pytest.approx(100.0),
        "screen_reference_tokens_per_s": 1000.0,
        "screen_ratio": 0.5,
        "screen_steps": 3,
        "screen_s": pytest.approx(7.0),
    }
    assert failure_reason(screened) == outcomes.SCREENED_OUT == "screened_out"
    assert "100 tok/s, under 0.5x the best measured 1,000 tok/s" in str(screened)
    assert isinstance(screened, AGREED_ENDS)  # every rank of a DDP group stops together


def test_a_trial_that_can_still_compete_gets_its_full_window() -> None:
    # Its fastest step (0.18 s: 556 tok/s) is over half the best (1000): it goes on to the window's end.
    steps, screened = _run(
        [0.2, 0.19, 0.18, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2], reference=1000.0
    )
    assert screened is None and steps > SETTINGS.warmup_steps + SETTINGS.min_steps - 1


def test_a_slow_first_step_alone_is_not_screened() -> None:
    # Compilation: a first step of 30 s, then steps as fast as the best's.
    _steps, screened = _run([30.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], reference=1000.0)
    assert screened is None


@pytest.mark.parametrize(
    ("reference", "ratio"),
    [(None, 0.5), (1000.0, 0.0)],
    ids=["nothing measured yet (or a measurement)", "screening off"],
)
def test_no_reference_or_ratio_zero_never_screens(reference: float | None, ratio: float) -> None:
    settings = MeasureSettings(**{**SETTINGS.__dict__, "screen_ratio": ratio})
    steps, screened = _run([1.0] * 12, reference=reference, settings=settings)
    assert screened is None and steps < 12  # the window ended on its own rule


@pytest.mark.parametrize("ratio", [-0.1, 1.0, 2.0])
def test_a_screen_ratio_outside_zero_to_one_is_a_usage_error(ratio: float) -> None:
    with pytest.raises(UsageError, match=f"--screen-ratio must be in \\[0, 1\\), got {ratio}"):
        MeasureSettings(screen_ratio=ratio)


def test_a_search_whose_every_trial_was_screened_out_says_to_keep_the_defaults() -> None:
    from autotune.cli._render import no_feasible_trial_line
    from autotune.progress import TrialSummary

    screened = {"trained": True, "screen_reference_tokens_per_s": 5200.0, "screen_ratio": 0.5}
    trials = [
        TrialSummary(0, {"precision": "bf16"}, "PRUNED", reason="screened_out", attrs=screened),
        TrialSummary(1, {"precision": "fp32"}, "PRUNED", reason="duplicate", attrs={"trained": False}),
    ]
    line = no_feasible_trial_line(trials)
    assert "every trial was screened out, under 0.5x the 5.2k tok/s" in line and "keep the defaults" in line
    # A trial that failed otherwise: the reasons above say why, not screening.
    oom = TrialSummary(2, {"precision": "fp32"}, "PRUNED", reason="oom", attrs={"trained": True})
    assert no_feasible_trial_line([*trials, oom]).endswith("see the reasons above")
