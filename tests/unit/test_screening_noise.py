"""Screening that holds under noise, with a fake clock and a fake machine probe.

Drift: before a trial is screened out the probe runs again, and where the machine runs slower than
when the reference was measured the trial's steps are judged that much faster; a machine that
slowed down as a whole screens nothing out, a hopeless configuration is still stopped.

The user's run (``--train-tokens``/``--train-steps``): a trial is judged on the predicted time of
that run, its set-up at the least measured and no compilation, against the best predicted run."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

import optuna
import pytest

from autotune.measure import callback as callback_module
from autotune.measure.callback import REPROBE_S, ThroughputCallback
from autotune.measure.drift import MAX_SLOWDOWN
from autotune.measure.screen import ScreenedOut, ScreenReference
from autotune.options import MeasureSettings
from autotune.progress import Reporter
from autotune.records import Baseline, trial_attrs, trial_record, write_study
from autotune.store.session import StudyStore
from autotune.trial.measured import screen_reference

SETTINGS = MeasureSettings(
    settle_steps=3,
    max_settle_steps=6,
    min_measure_steps=3,
    measure_steps=10,
    screen_ratio=0.5,
    promote_ratio=0.0,
)
ARGS = SimpleNamespace(
    per_device_train_batch_size=4, gradient_accumulation_steps=1, world_size=1, torch_compile=False
)
TOKENS_PER_SAMPLE = 25  # 100 tokens per step


class FakeProbe:
    """A machine probe that reads `seconds` (a list: one reading per call, the last one repeated)
    and takes `takes_s` of the fake clock, counting calls."""

    def __init__(self, clock: list[float], seconds: float | list[float], takes_s: float = 0.0) -> None:
        self.readings = seconds if isinstance(seconds, list) else [seconds]
        self.clock, self.takes_s, self.calls = clock, takes_s, 0

    def __call__(self) -> float:
        self.calls += 1
        self.clock[0] += self.takes_s
        return self.readings[min(self.calls, len(self.readings)) - 1]


def _drive(
    step_times: list[float],
    reference: ScreenReference,
    probe: Callable[[list[float]], FakeProbe],
    setup_s: float | None = None,
) -> tuple[ThroughputCallback, FakeProbe, ScreenedOut | None]:
    """Drive the callback through steps of the given seconds on a fake clock until its window
    ends or it screens the trial out: the callback, its probe, and the `ScreenedOut` (or None).
    `setup_s`: the trial's own set-up, known before its first step (None: not measured)."""
    clock = [100.0]
    original = callback_module.time.perf_counter
    callback_module.time.perf_counter = lambda: clock[0]
    try:
        measured = ThroughputCallback(SETTINGS, TOKENS_PER_SAMPLE, Reporter())
        fake = probe(clock)
        measured.machine_probe = fake
        measured.screen_against = reference
        if setup_s is not None:
            measured.job_started_s = clock[0] - setup_s
        control = SimpleNamespace(should_training_stop=False)
        measured.on_train_begin(ARGS, None, control)
        for seconds in step_times:
            clock[0] += seconds
            try:
                measured.on_step_end(ARGS, None, control)
            except ScreenedOut as screened:
                return measured, fake, screened
            if control.should_training_stop:
                break
        return measured, fake, None
    finally:
        callback_module.time.perf_counter = original


def _probe(seconds: float | list[float], takes_s: float = 0.0) -> Callable[[list[float]], FakeProbe]:
    return lambda clock: FakeProbe(clock, seconds, takes_s)


# The best measured at 1000 tok/s, with a probe of 2 ms taken after it.
BEST = ScreenReference(1000.0, probe_s=0.002)


# -- drift ---------------------------------------------------------------------------------------


def test_a_machine_that_slowed_down_as_a_whole_screens_nothing_out() -> None:
    # Every step now takes 2.5x the best's (0.25 s for 100 tokens: 400 tok/s, under the line at
    # 500), and so does the probe: at the reference's speed the trial runs at 1000 tok/s.
    measured, probe, screened = _drive([0.25] * 20, BEST, _probe(0.005, takes_s=0.04))
    assert screened is None and measured.result()["measured_steps"] >= SETTINGS.min_measure_steps
    # Probed once when the verdict first said stop, that reading reused within REPROBE_S (steps of
    # 0.25 s), besides the probes before and after the trial (its record's probe_s).
    assert probe.calls == 1 + 2
    # The probe's time belongs to no step: every step measured its own 0.25 s.
    assert measured.window_times_s == pytest.approx([0.25] * len(measured.window_times_s))
    assert measured.warmup_times_s == pytest.approx([0.25] * len(measured.warmup_times_s))


def test_a_hopeless_configuration_is_screened_out_on_a_slowed_machine_too() -> None:
    # 100 tok/s on a machine 2x slower: 200 tok/s at the reference's speed, still under 500.
    _measured, probe, screened = _drive([1.0] * 10, BEST, _probe(0.004))
    assert screened is not None and screened.steps == 2 and probe.calls == 1 + 1  # and the one before
    assert screened.slowdown == pytest.approx(2.0)
    assert screened.attrs()["screen_slowdown"] == pytest.approx(2.0)
    assert str(screened) == (
        "screened out after 2 steps: its fastest step ran at 100 tok/s (200 tok/s at the machine's "
        "speed when the best was measured: its probe ran 2.00x slower now), under 0.5x the best "
        "measured 1,000 tok/s"
    )


@pytest.mark.parametrize("now_s", [0.002, 0.001], ids=["as fast as then", "faster than then"])
def test_a_machine_as_fast_as_then_or_faster_judges_as_the_plain_comparison(now_s: float) -> None:
    # 400 tok/s against a line at 500: screened; a faster machine now screens out no more.
    _measured, probe, screened = _drive([0.25] * 10, BEST, _probe(now_s))
    assert screened is not None and screened.slowdown == 1.0 and probe.calls == 1 + 1
    assert "screen_slowdown" not in screened.attrs() and "probe" not in str(screened)
    # Just over the line: no probe is taken to judge it (only the one before the trial).
    _measured, probe, screened = _drive([0.19] * 12, BEST, _probe(now_s))
    assert screened is None and probe.calls == 1


def test_a_configuration_more_than_8x_slower_is_stopped_whatever_the_probe_reads() -> None:
    # 100 tok/s on a machine the probe reads 10x slower: excused 4x at most (400 tok/s), under 500.
    _measured, _probe_used, screened = _drive([1.0] * 10, BEST, _probe(0.02))
    assert screened is not None and screened.slowdown == MAX_SLOWDOWN == 4.0
    # 7x slower than the best on that machine (143 tok/s): excused 4x (571 tok/s), it goes on.
    _measured, _probe_used, screened = _drive([0.7] * 12, BEST, _probe(0.02))
    assert screened is None


def test_a_load_that_came_while_the_trial_ran_corrects_nothing() -> None:
    # The probe before the trial's first step read the machine as fast as then: its fastest step
    # may have run at that speed. A load (or a burst) that came since does not excuse it.
    _measured, probe, screened = _drive([0.25] * 10, BEST, _probe([0.002, 0.01]))
    assert screened is not None and screened.slowdown == 1.0 and probe.calls == 2
    # A load there before the trial began, and still: the steps are judged at the reference's speed.
    _measured, probe, screened = _drive([0.25] * 10, BEST, _probe([0.006, 0.01]))
    assert screened is None


def test_a_reference_without_a_probe_is_judged_as_measured() -> None:
    # An older store: no probe with the best, so nothing to confirm against; screened as before.
    _measured, probe, screened = _drive([0.25] * 10, ScreenReference(1000.0), _probe(0.005))
    assert screened is not None and screened.slowdown == 1.0 and probe.calls == 1  # the one before


def test_the_probe_is_taken_again_once_the_last_is_stale() -> None:
    # Steps of 6 s (16.7 tok/s) on a machine 4x slower: 67 tok/s at the reference's speed, over
    # the line at 50.
    # The probe is taken at the second step (the first judged), its reading kept at the third (6 s
    # later) and taken again at the fourth (12 s later: over REPROBE_S).
    assert 6 < REPROBE_S < 12
    _measured, probe, screened = _drive([6.0] * 4, ScreenReference(100.0, probe_s=0.002), _probe(0.008))
    assert screened is None and probe.calls == 1 + 2  # and the one before the trial


def test_a_measured_window_records_the_faster_probe_around_it() -> None:
    # A load that came during the window (or went): the reference is the machine at its faster.
    for before, after in ((0.003, 0.009), (0.009, 0.003)):
        measured, probe, screened = _drive([0.1] * 12, BEST, _probe([before, after]))
        assert screened is None and measured.result()["probe_s"] == 0.003 and probe.calls == 2


# -- the user's run ------------------------------------------------------------------------------

# The best run: 10 s of set-up, 1000 tok/s, no compilation. A run of 100k tokens: 110 s at best.
LONG = ScreenReference(1000.0, probe_s=0.002, run_tokens=100_000, run_s=110.0, setup_s=10.0)


def test_the_run_line_is_the_speed_whose_optimistic_run_takes_the_best_run_over_the_ratio() -> None:
    # 110 s / 0.5 = 220 s; less 10 s of set-up: 210 s for 100k tokens, 476 tok/s.
    line = LONG.line_tokens_per_s(0.5, setup_s=10.0)
    assert line == pytest.approx(100_000 / 210)
    assert LONG.optimistic_run_s(line, setup_s=10.0) == pytest.approx(220.0)
    assert LONG.optimistic_run_s(400.0, setup_s=10.0) == pytest.approx(260.0)
    # Without the run's length: throughput against throughput, no run time.
    plain = ScreenReference(1000.0)
    assert plain.line_tokens_per_s(0.5, setup_s=10.0) == 500.0 and plain.optimistic_run_s(400, 10) is None
    # A set-up that alone takes longer than the allowed run leaves no speed fast enough.
    assert LONG.line_tokens_per_s(0.5, setup_s=300.0) == math.inf


def test_on_the_run_a_configuration_that_cannot_win_is_screened_out_with_both_figures() -> None:
    # 400 tok/s: its run takes at least 100k / 400 + 10 = 260 s, over 2 x 110 s.
    _measured, _probe_used, screened = _drive([0.25] * 10, LONG, _probe(0.002), setup_s=12.0)
    assert screened is not None
    assert screened.run_s == pytest.approx(260.0) and screened.reference_run_s == 110.0
    assert screened.attrs()["screen_run_s"] == pytest.approx(260.0)
    assert screened.attrs()["screen_reference_run_s"] == 110.0
    assert str(screened) == (
        "screened out after 2 steps: its fastest step ran at 400 tok/s: judged on the predicted run "
        "of 100,000 tokens, at least 260.0 s with it (its set-up at the least measured, no "
        "compilation), over 2x the best predicted run, 110.0 s"
    )


def test_on_the_run_a_configuration_over_the_run_line_goes_on_where_throughput_would_stop_it() -> None:
    # 480 tok/s, under half the best's throughput: its run takes at least 100k / 480 + 10 = 218 s,
    # under 220 s. It may still win (its compilation and set-up are not known yet): it goes on.
    _measured, _probe_used, screened = _drive([100 / 480] * 20, LONG, _probe(0.002))
    assert screened is None
    _measured, _probe_used, screened = _drive([100 / 480] * 20, ScreenReference(1000.0), _probe(0.002))
    assert screened is not None  # judged on throughput, the same steps are stopped


def test_a_short_run_where_set_up_dominates_screens_only_the_hopeless() -> None:
    # 10k tokens: the best run takes 10 + 10 = 20 s; allowed 40 s, less 10 s of set-up: 333 tok/s.
    short = ScreenReference(1000.0, probe_s=0.002, run_tokens=10_000, run_s=20.0, setup_s=10.0)
    _measured, _probe_used, screened = _drive([0.25] * 20, short, _probe(0.002))  # 400 tok/s
    assert screened is None
    _measured, _probe_used, screened = _drive([0.5] * 20, short, _probe(0.002))  # 200 tok/s: 60 s
    assert screened is not None and screened.run_s == pytest.approx(60.0)


def test_on_the_run_a_trial_whose_own_set_up_is_shorter_is_granted_it() -> None:
    # Its own set-up (2 s, known before its first step) is under the least measured (10 s): its
    # run at 460 tok/s takes 100k / 460 + 2 = 219 s, under 220 s. Granted 10 s it would be stopped.
    _measured, _probe_used, screened = _drive([100 / 460] * 20, LONG, _probe(0.002), setup_s=2.0)
    assert screened is None
    _measured, _probe_used, screened = _drive([100 / 460] * 20, LONG, _probe(0.002), setup_s=30.0)
    assert screened is not None and screened.run_s == pytest.approx(100_000 / 460 + 10.0)


def test_on_a_slowed_machine_the_run_is_judged_at_the_reference_speed() -> None:
    # 200 tok/s now, on a machine 2x slower: 400 tok/s then, a run of 260 s: screened, truthfully.
    _measured, _probe_used, screened = _drive([0.5] * 10, LONG, _probe(0.004))
    assert screened is not None and screened.slowdown == pytest.approx(2.0)
    assert screened.run_s == pytest.approx(260.0)
    assert "400 tok/s at the machine's speed when the best was measured" in str(screened)


# -- the reference a study gives ------------------------------------------------------------------


def _study(trials: list[dict[str, float]], baseline: dict[str, float]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for number, attrs in enumerate(trials):
        record = trial_record(number, {}, "COMPLETE", attrs)
        study.add_trial(
            optuna.trial.create_trial(params={}, distributions={}, value=1.0, user_attrs=trial_attrs(record))
        )
    write_study(study, baseline=Baseline.from_attrs(baseline))
    return study


def test_the_study_gives_its_best_throughput_and_its_shortest_run_each_with_its_probe() -> None:
    # Trial 0: fast, but compiles 60 s; trial 1: slower, no compilation; the baseline: slowest.
    fast = {"tokens_per_s": 2000.0, "setup_s": 5.0, "compile_s": 60.0, "probe_s": 0.004}
    plain = {"tokens_per_s": 1500.0, "setup_s": 8.0, "warmup_excess_s": 1.0, "probe_s": 0.003}
    baseline = {"tokens_per_s": 1000.0, "setup_s": 6.0, "probe_s": 0.002, "tokens_per_step": 100.0}
    study = _study([fast, plain], baseline)
    settings = MeasureSettings(screen_ratio=0.5)
    assert screen_reference(StudyStore(study), settings.screen_ratio, None, None) == ScreenReference(
        2000.0, probe_s=0.004
    )
    # 30k tokens: trial 0 takes 5 + 60 + 15 = 80 s, trial 1 8 + 1 + 20 = 29 s, the baseline 36 s.
    run = screen_reference(StudyStore(study), settings.screen_ratio, 30_000, None)
    assert run is not None and run.run_s == pytest.approx(29.0)
    assert run == ScreenReference(2000.0, probe_s=0.003, run_tokens=30_000, run_s=run.run_s, setup_s=5.0)
    # --train-steps: the baseline's tokens per step make the run's tokens (300 x 100 = 30k).
    steps = screen_reference(StudyStore(study), settings.screen_ratio, None, 300)
    assert steps is not None and steps.run_tokens == 30_000 and steps.run_s == pytest.approx(29.0)


def test_no_reference_without_a_measurement_or_with_screening_off() -> None:
    assert screen_reference(StudyStore(_study([], {})), 0.5, None, None) is None
    measured = _study([{"tokens_per_s": 1000.0}], {})
    assert screen_reference(StudyStore(measured), 0.0, None, None) is None
    assert screen_reference(None, MeasureSettings().screen_ratio, None, None) is None
