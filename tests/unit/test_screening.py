"""Screening: a trial whose fastest step is under the screening line (a fraction of the study's best
tokens/s) stops there; a trial that can still compete, a measurement, or no reference goes on. The
promotion line: a window that measures its trial clearly under a larger fraction of the best ends
after its minimum steps, the trial measured; one that may still be close gets its whole window."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.errors import UsageError
from autotune.measure import callback as callback_module
from autotune.measure import deadline as deadline_module
from autotune.measure.callback import ThroughputCallback
from autotune.measure.deadline import StepDeadline, step_deadlines
from autotune.measure.screen import ScreenedOut, ScreenReference
from autotune.options import MeasureSettings
from autotune.progress import Reporter
from autotune.store import outcomes
from autotune.trial.errors import AGREED_ENDS, failure_reason

SETTINGS = MeasureSettings(
    settle_steps=3,
    max_settle_steps=6,
    min_measure_steps=3,
    measure_steps=10,
    screen_ratio=0.5,
    promote_ratio=0.0,
)
PROMOTING = MeasureSettings(
    **{**SETTINGS.__dict__, "promote_ratio": 0.8, "min_measure_steps": 5, "measure_steps": 30}
)
ARGS = SimpleNamespace(
    per_device_train_batch_size=4, gradient_accumulation_steps=1, world_size=1, torch_compile=False
)
COMPILED = SimpleNamespace(**{**ARGS.__dict__, "torch_compile": True})
TOKENS_PER_SAMPLE = 25  # 100 tokens per step


def _drive(
    step_times: list[float], reference: float | None, settings: MeasureSettings, args: SimpleNamespace
) -> tuple[ThroughputCallback, int, ScreenedOut | None]:
    """Drive the callback through steps of the given seconds (a fake clock) until it ends the
    window or screens the trial out: the callback, the steps it ran, the `ScreenedOut` (or None)."""
    clock = [100.0]
    original = callback_module.time.perf_counter
    callback_module.time.perf_counter = lambda: clock[0]  # type: ignore[assignment]
    try:
        measured = ThroughputCallback(settings, TOKENS_PER_SAMPLE, Reporter())
        measured.screen_against = None if reference is None else ScreenReference(reference)
        control = SimpleNamespace(should_training_stop=False)
        measured.on_train_begin(args, None, control)
        for number, seconds in enumerate(step_times, start=1):
            clock[0] += seconds
            try:
                measured.on_step_end(args, None, control)
            except ScreenedOut as screened:
                return measured, number, screened
            if control.should_training_stop:
                return measured, number, None
        return measured, len(step_times), None
    finally:
        callback_module.time.perf_counter = original  # type: ignore[assignment]


def _run(
    step_times: list[float],
    reference: float | None,
    settings: MeasureSettings = SETTINGS,
    args: SimpleNamespace = ARGS,
) -> Any:
    """The number of steps the callback ran, and the `ScreenedOut` it raised (None if it did not)."""
    _measured, steps, screened = _drive(step_times, reference, settings, args)
    return steps, screened


def _window(
    step_times: list[float], reference: float | None, settings: MeasureSettings
) -> ThroughputCallback:
    """The callback after steps of the given seconds, ended by its own rules (it raised nothing)."""
    measured, _steps, screened = _drive(step_times, reference, settings, ARGS)
    assert screened is None
    return measured


# Steps of 0.2 s with a little noise: 100 tokens per step, about 500 tok/s.
NOISY = [0.2, 0.21, 0.19, 0.205, 0.195] * 8


def test_a_window_clearly_under_the_promotion_line_ends_after_its_minimum_steps() -> None:
    # About 500 tok/s against a best of 900: above the screening line (450), clearly under the
    # promotion line (720). Without the line the window would go on
    # (its 3% target is not reached in 5 steps of this noise).
    measured = _window(NOISY, reference=900.0, settings=PROMOTING)
    assert len(measured.window_times_s) == PROMOTING.min_measure_steps
    result = measured.result()
    assert result["tokens_per_s"] == pytest.approx(500.0, rel=0.03)  # measured, not discarded
    assert result["not_promoted"] == {
        "upper_tokens_per_s": pytest.approx(500.0, rel=0.1),
        "reference_tokens_per_s": 900.0,
        "promote_ratio": 0.8,
        "steps": PROMOTING.min_measure_steps,
    }
    assert result["not_promoted"]["upper_tokens_per_s"] < 800.0
    full = _window(
        NOISY, reference=900.0, settings=MeasureSettings(**{**PROMOTING.__dict__, "promote_ratio": 0})
    )
    assert len(full.window_times_s) > PROMOTING.min_measure_steps and "not_promoted" not in full.result()


@pytest.mark.parametrize(
    "reference",
    [590.0, None],
    ids=["its interval reaches the line (0.8 x 590 = 472)", "a measurement: nothing to race"],
)
def test_a_window_that_may_still_be_close_gets_its_whole_window(reference: float | None) -> None:
    measured = _window(NOISY, reference=reference, settings=PROMOTING)
    assert len(measured.window_times_s) > PROMOTING.min_measure_steps
    assert "not_promoted" not in measured.result()


def test_the_promotion_line_judges_a_noisy_window_by_its_interval_not_its_mean() -> None:
    # After a steady warm-up (3 steps), a window of about 685 tok/s over its first 5 steps (under
    # 800) but so noisy that its interval reaches about 960: it goes on.
    wild = [0.14] * 3 + [0.1, 0.2, 0.1, 0.2, 0.13] + [0.14] * 30
    measured = _window(wild, reference=1000.0, settings=PROMOTING)
    assert len(measured.window_times_s) > PROMOTING.min_measure_steps


def test_an_eager_trial_ten_times_slower_than_the_best_stops_after_its_second_step() -> None:
    # 100 tokens per 1 s step: 100 tok/s against a best of 1000 tok/s. The first step's one-time
    # costs never decide alone; one steady step after it does, before the minimum warm-up (3).
    steps, screened = _run([5.0, 1.0, 1.0, 1.0, 1.0, 1.0], reference=1000.0)
    assert screened is not None and steps == 2 < SETTINGS.settle_steps
    assert screened.bound_tokens_per_s == pytest.approx(100.0)
    assert screened.attrs() == {
        "screen_tokens_per_s": pytest.approx(100.0),
        "screen_reference_tokens_per_s": 1000.0,
        "screen_ratio": 0.5,
        "screen_steps": 2,
        "screen_s": pytest.approx(6.0),
    }
    assert failure_reason(screened) == outcomes.SCREENED_OUT == "screened_out"
    assert "100 tok/s, under 0.5x the best measured 1,000 tok/s" in str(screened)
    assert isinstance(screened, AGREED_ENDS)  # every rank of a DDP group stops together


def test_a_compiled_trial_is_judged_only_after_its_minimum_warm_up() -> None:
    # CUDA graphs: a warm-up run, a recording run (both slow), then replays as fast as the best's.
    # Judged on its second step it would be stopped; it is judged from its third, and goes on.
    steps, screened = _run([5.0, 1.0] + [0.1] * 12, reference=1000.0, args=COMPILED)
    assert screened is None and steps > SETTINGS.settle_steps
    # A compiled trial that stays slow stops at the end of its minimum warm-up.
    steps, screened = _run([30.0, 1.0, 1.0, 1.0, 1.0], reference=1000.0, args=COMPILED)
    assert screened is not None and steps == SETTINGS.settle_steps == screened.steps


def test_a_trial_that_can_still_compete_gets_its_full_window() -> None:
    # Its fastest step (0.18 s: 556 tok/s) is over half the best (1000): it goes on to the window's end.
    steps, screened = _run(
        [0.2, 0.19, 0.18, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2], reference=1000.0
    )
    assert screened is None and steps > SETTINGS.settle_steps + SETTINGS.min_measure_steps - 1


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
    with pytest.raises(UsageError, match=f"^screen_ratio must be in \\[0, 1\\), got {ratio}"):
        MeasureSettings(screen_ratio=ratio)
    with pytest.raises(UsageError, match=f"^promote_ratio must be in \\[0, 1\\), got {ratio}"):
        MeasureSettings(promote_ratio=ratio)


def test_a_search_whose_every_trial_was_screened_out_says_to_keep_the_defaults() -> None:
    from autotune.records import trial_record
    from autotune.view import no_feasible_trial_line

    screened = {"trained": True, "screen_reference_tokens_per_s": 5200.0, "screen_ratio": 0.5}
    trials = [
        trial_record(0, {"precision": "bf16"}, "PRUNED", {**screened, "reason": "screened_out"}),
        trial_record(1, {"precision": "fp32"}, "PRUNED", {"reason": "duplicate", "trained": False}),
    ]
    line = no_feasible_trial_line(trials)
    assert "every trial was screened out, under 0.5x the 5.2k tok/s" in line and "keep the defaults" in line
    # A trial that failed otherwise: the reasons above say why, not screening.
    oom = trial_record(2, {"precision": "fp32"}, "PRUNED", {"reason": "oom", "trained": True})
    assert no_feasible_trial_line([*trials, oom]).endswith("see the reasons above")


# -- a judged step stopped at its deadline (real time: the deadline is a real signal) ----------


def _after_first_step(
    deadline: StepDeadline | None, first_s: float, args: SimpleNamespace
) -> ThroughputCallback:
    """A callback that stops steps at `deadline`, after a first step of `first_s` real seconds (100
    tokens per step: against a best of 1000 tok/s and a ratio of 0.5, a step at the line takes 0.2 s)."""
    measured = ThroughputCallback(SETTINGS, TOKENS_PER_SAMPLE, Reporter())
    measured.deadline = deadline
    measured.screen_against = ScreenReference(1000.0)
    control = SimpleNamespace(should_training_stop=False)
    measured.on_train_begin(args, None, control)
    time.sleep(first_s)
    measured.on_step_end(args, None, control)
    return measured


@pytest.mark.skipif(deadline_module.SIGNAL is None, reason="no real-time signals here")
def test_a_hopeless_eager_step_is_stopped_at_its_deadline_instead_of_finished() -> None:
    finished = False
    with step_deadlines() as deadline:
        measured = _after_first_step(deadline, 0.3, ARGS)  # slower than a step at the line (0.2 s)
        with pytest.raises(ScreenedOut) as stopped:
            time.sleep(5)  # the second step, ten times too slow: stopped at 0.2 s
            finished = True
    assert not finished
    screened = stopped.value
    assert screened.steps == 2 and 0.2 <= (screened.stopped_s or 0) < 5
    # Its fastest step so far: the stopped one, at most 100 tokens in 0.2 s.
    assert screened.bound_tokens_per_s <= 500.0 and screened.reference_tokens_per_s == 1000.0
    assert screened.steps_s == pytest.approx(measured.warmup_times_s[0] + (screened.stopped_s or 0))
    assert screened.attrs()["screen_step_stopped_s"] == screened.stopped_s
    assert str(screened).startswith("screened out in step 2, stopped after 0.")
    assert failure_reason(screened) == outcomes.SCREENED_OUT


@pytest.mark.skipif(deadline_module.SIGNAL is None, reason="no real-time signals here")
@pytest.mark.parametrize(
    ("first_s", "args"),
    [(0.05, ARGS), (0.3, COMPILED), (0.3, SimpleNamespace(**{**ARGS.__dict__, "world_size": 2}))],
    ids=["first step over the line", "compiled", "a DDP rank"],
)
def test_a_step_is_not_stopped_when_it_may_compete_or_must_not_be_cut(
    first_s: float, args: SimpleNamespace
) -> None:
    # A first step faster than a step at the line proves the trial over it: nothing to stop. A
    # compiled step may be compiling; the ranks of a DDP group must stop at the same step.
    with step_deadlines() as deadline:
        _after_first_step(deadline, first_s, args)
        time.sleep(0.5)  # the second step, slower than the line: runs to its end


def test_a_rounds_eager_configuration_warms_up_for_its_set_steps_a_compiled_one_until_it_settles() -> None:
    # Step times that do not settle (each over 1.25x the fastest so far): the settle rule warms up
    # through all six warm-up steps.
    falling = [1.0, 0.5, 0.8, 0.8, 0.8, 0.8] + [0.8] * 10
    plain = _window(falling, None, SETTINGS)
    assert len(plain.warmup_times_s) == SETTINGS.max_settle_steps
    # A finalists' round: two warm-up steps for a configuration that compiles nothing ...
    rounds = MeasureSettings(**{**SETTINGS.__dict__, "eager_settle_steps": 2})
    eager = _window(falling, None, rounds)
    assert eager.warmup_times_s == pytest.approx([1.0, 0.5])
    assert eager.window_times_s[0] == pytest.approx(0.8)
    # ... and a compiled one's warm-up still goes on until its step times settle.
    compiled, _steps, _screened = _drive(falling, None, rounds, COMPILED)
    assert len(compiled.warmup_times_s) == SETTINGS.max_settle_steps


def test_a_set_eager_warm_up_is_at_least_one_step() -> None:
    with pytest.raises(UsageError, match="eager_settle_steps must be >= 1, got 0"):
        MeasureSettings(eager_settle_steps=0)
