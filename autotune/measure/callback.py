"""The measurement callback: warm-up, then a timed window of optimizer steps, then peak memory.

One `ThroughputCallback` lives for the whole search; `on_train_begin` starts a new trial's
measurement. Step times are taken between consecutive `on_step_end` events with the device
synchronized there, so they cover the whole optimizer step (data loading, forward, backward,
optimizer) and nothing of the set-up before the first step.

Screening stops a search trial whose fastest step proves it cannot compete with the study's best
(`ScreenReference`): on throughput, or with the user's run length on that run's predicted time. A
trial is screened out only once its reference is confirmed under the same conditions: the machine
probe (`autotune.measure.drift`) runs again, and where the machine runs slower now than when the
reference was measured the trial's steps are judged at the reference's speed.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback

from autotune.errors import AutotuneError
from autotune.measure import drift
from autotune.measure.deadline import StepDeadline
from autotune.measure.peak import PeakMemoryMeter
from autotune.measure.ranks import from_rank_zero
from autotune.measure.screen import ScreenedOut, ScreenReference
from autotune.measure.stats import summarize_window, warmup_done, window_done
from autotune.options import MeasureSettings
from autotune.progress import Reporter

# A probe taken in a trial confirms its screening verdicts for this long; then the probe runs again.
REPROBE_S = 10.0


class MeasurementError(AutotuneError):
    """The trial ended before its measured window held a single step."""


class TrialTimeout(RuntimeError):
    """The trial ran past its time budget."""


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class ThroughputCallback(TrainerCallback):
    """Times the optimizer steps of each trial and stops training once the window is done.

    Args:
        settings: the measurement protocol.
        tokens_per_sample: real (non-padding) tokens in each sample.
        reporter: told about every step, for progress bars.

    Attributes:
        count_tokens: when set, ``count_tokens(first, count)`` is the number of real tokens in
            samples ``first .. first + count - 1`` of the (sequentially read) training data; it
            replaces `tokens_per_sample` for data whose samples differ in length. Counted after
            the window from the sample order, so nothing is added to the timed steps.
    """

    count_tokens: Callable[[int, int], int] | None = None
    # When this process started the job (`time.perf_counter`; set by whoever runs the job): the
    # trial's set-up is the time from there to its first step.
    job_started_s: float | None = None
    # Set by the Trainer for a trial whose sampler reorders the data (length grouping): the sample
    # order no longer says which samples a step trained, so each step's batches are counted as they
    # arrive (`add_step_tokens`) instead of by `count_tokens`.
    count_batches: bool = False
    # Screening (`MeasureSettings.screen_ratio`): the study's best when this trial began, set by
    # the Trainer for search trials (None: a measurement, no screening).
    screen_against: ScreenReference | None = None
    # Set by the Trainer while a trial trains where a step can be stopped at its deadline
    # (`autotune.measure.deadline`): screening then judges a step that runs past the line's
    # duration there instead of at its end (`_arm_deadline`).
    deadline: StepDeadline | None = None

    def __init__(self, settings: MeasureSettings, tokens_per_sample: int, reporter: Reporter) -> None:
        self.settings = settings
        self.tokens_per_sample = tokens_per_sample
        self.reporter = reporter
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.meter = PeakMemoryMeter(device)
        # The machine probe on this trial's device (`drift.probe_s`): taken before and after each
        # trial's window, and again before screening stops a trial. Tests give a fake one.
        self.machine_probe: Callable[[], float] = functools.partial(drift.probe_s, device)
        self._reset_trial()

    def _reset_trial(self) -> None:
        self.warmup_times_s: list[float] = []
        self.window_times_s: list[float] = []
        self.samples_per_step = 0
        self._last_edge = 0.0
        self._train_begin = 0.0
        self.setup_s = 0.0
        self._pending_losses: list[torch.Tensor] = []
        self._step_losses: list[torch.Tensor] = []
        self._step_tokens: list[Any] = []
        self._step_computed: list[Any] = []
        self._world_size = 1
        self._compiled = False
        self.not_promoted: dict[str, float] | None = None
        self._probed: tuple[float, float] | None = None  # this trial's last probe: (when, seconds)
        self._probe_before_s: float | None = None

    @property
    def train_begin_s(self) -> float:
        """When (``time.perf_counter``) the trial's first step began: its set-up ends there."""
        return self._train_begin

    def add_loss(self, loss: torch.Tensor) -> None:
        """One micro-batch's loss as `Trainer.training_step` returns it (already divided by the
        accumulation steps): the optimizer step's loss is their sum. Kept on the device until the
        trial ends, so no step waits for it."""
        self._pending_losses.append(loss.detach())

    def add_step_tokens(self, real: Any, computed: Any) -> None:
        """The real and the computed (padding included) tokens of one optimizer step's batches on
        this rank: ints or device tensors, read after the trial, so no step waits for them."""
        self._step_tokens.append(real)
        self._step_computed.append(computed)

    def padding_fraction(self, first: int, count: int) -> float | None:
        """The share of the tokens computed in steps ``first .. first + count - 1`` that were
        padding; None where the batches were not counted."""
        if len(self._step_computed) < first + count or count < 1:
            return None
        computed = sum(int(t) for t in self._step_computed[first : first + count])
        real = sum(int(t) for t in self._step_tokens[first : first + count])
        return 1.0 - real / computed if computed else None

    def tokens_of_steps(self, first: int, count: int) -> int:
        """Real tokens the whole job trained in optimizer steps ``first .. first + count - 1``."""
        per_step = self.samples_per_step
        if self.count_batches and len(self._step_tokens) >= first + count:
            # Counted on this rank: the other ranks' batches are taken to be alike.
            mine = sum(int(t) for t in self._step_tokens[first : first + count])
            return mine * self._world_size
        if self.count_tokens is not None:
            # Trials read the data in order from sample 0: step k holds samples k x per_step on.
            return self.count_tokens(first * per_step, count * per_step)
        return count * per_step * self.tokens_per_sample

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._reset_trial()
        self._world_size = int(args.world_size)
        self._compiled = bool(getattr(args, "torch_compile", False))
        self.samples_per_step = (
            args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        )
        # The machine's speed before the window, as `result` reads it after (before the meter's
        # reset: its matrices are no trial's; its seconds are no set-up a run pays).
        probe_start = time.perf_counter()
        self._probe_before_s = self.machine_probe()
        probe_took_s = time.perf_counter() - probe_start
        self.meter.reset()
        _sync()
        self._train_begin = self._last_edge = time.perf_counter()
        if self.job_started_s is not None:
            # Loading the study, building the model and the Trainer's own set-up (pre-checked
            # trials before it included: a job trains at most one trial).
            self.setup_s = max(0.0, self._train_begin - self.job_started_s - probe_took_s)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.deadline is not None:
            self.deadline.disarm()
        _sync()
        now = time.perf_counter()
        step_s, self._last_edge = now - self._last_edge, now
        if self._pending_losses:
            self._step_losses.append(torch.stack(self._pending_losses).sum())
            self._pending_losses = []
        s = self.settings
        timed_out = now - self._train_begin > s.trial_timeout_s
        warming = not self.window_times_s and self._warming(s)
        window = [*self.window_times_s, step_s]
        done = not warming and window_done(
            window, s.min_measure_steps, s.measure_steps, s.max_seconds, s.target_rel_ci
        )
        if not warming and not done:
            done = self._behind(window)
        screened = None if done else self._screen(step_s)
        # In a DDP group every rank must take the same decision at the same step, or the ranks
        # that go on wait in a collective for the ones that stopped: rank 0's decision stands.
        timed_out, warming, done, screened = from_rank_zero((timed_out, warming, done, screened))
        if timed_out:
            raise TrialTimeout(
                f"still training after {now - self._train_begin:.0f} s (limit {s.trial_timeout_s:.0f} s)"
            )
        if screened is not None:
            raise ScreenedOut(**screened)
        if warming:
            self.warmup_times_s.append(step_s)
            self.reporter.on_step("warmup", len(self.warmup_times_s), step_s)
        else:
            self.window_times_s.append(step_s)
            self.reporter.on_step("measure", len(self.window_times_s), step_s)
        if done:
            control.should_training_stop = True
        else:
            self._arm_deadline()  # disarmed at the next step's end, or when the trial's block ends

    def _warming(self, s: MeasureSettings) -> bool:
        """Whether the steps so far are still warm-up: a set number for a configuration that
        compiles nothing where the settings give one (`MeasureSettings.eager_settle_steps`), else
        until step times stop falling (`warmup_done`)."""
        if s.eager_settle_steps is not None and not self._compiled:
            return len(self.warmup_times_s) < s.eager_settle_steps
        return not warmup_done(self.warmup_times_s, s.settle_steps, s.max_settle_steps)

    def _screen_line_s(self) -> float | None:
        """The seconds a step takes at the screening line (each sample at its full length), on the
        machine as this trial's last probe found it; None without screening."""
        reference, ratio = self.screen_against, self.settings.screen_ratio
        if not reference or ratio <= 0:
            return None
        line = reference.line_tokens_per_s(ratio, self._best_setup_s(reference))
        slowdown = drift.slowdown(reference.probe_s, self._probed[1] if self._probed else None)
        return self.samples_per_step * self.tokens_per_sample * slowdown / line

    def _arm_deadline(self) -> None:
        """After a step, when screening judges the next one and every step so far was slower than
        a step at the line: the next step is judged at the moment its own duration passes the line's too
        (`_overdue`) instead of at its end, so a configuration ten times slower than the best does
        not finish a step screening has already decided. Eager single-process trials only: a
        compiled step may be compiling (an exception there is the compiler's to report), and the
        ranks of a DDP group must stop at the same step."""
        line_s = self._screen_line_s()
        steps = [*self.warmup_times_s, *self.window_times_s]
        if (
            self.deadline is None
            or line_s is None
            or self._compiled
            or self._world_size != 1
            or not steps
            or len(steps) + 1 < self.screen_from_step
            or min(steps) <= line_s
        ):
            return
        self.deadline.arm(line_s - (time.perf_counter() - self._last_edge), self._overdue)

    def _overdue(self) -> ScreenedOut | None:
        """Screening's verdict on the step under way, called at its deadline: `_screen`'s, with
        the step's duration so far as its duration (it can only grow), or None to go on."""
        running_s = time.perf_counter() - self._last_edge
        verdict = self._screen(running_s)
        return None if verdict is None else ScreenedOut(**verdict, stopped_s=running_s)

    def _screen(self, step_s: float) -> dict[str, Any] | None:
        """The verdict of screening after this step: stop (`ScreenedOut`'s arguments) or go on (None).

        The trial's optimistic throughput is its fastest step's, over every step since the first
        (compilation and allocator growth only make steps slower, and so does noise, mostly), with
        each sample counted at its full length: real throughput is never higher. It is judged from
        the second step on (`screen_from_step`), and every step after (it only rises), against the
        screening line (`ScreenReference.line_tokens_per_s`). Under the line, the verdict is
        confirmed against the machine's drift before it stands (`_slowdown_now`)."""
        reference, ratio = self.screen_against, self.settings.screen_ratio
        steps = len(self.warmup_times_s) + len(self.window_times_s) + 1
        if not reference or ratio <= 0 or steps < self.screen_from_step:
            return None
        fastest = min(step_s, *self.warmup_times_s, *self.window_times_s)
        bound = self.samples_per_step * self.tokens_per_sample / fastest if fastest > 0 else math.inf
        setup_s = self._best_setup_s(reference)
        line = reference.line_tokens_per_s(ratio, setup_s)
        if bound >= line:
            return None
        slowdown = self._slowdown_now(reference)
        if bound * slowdown >= line:
            return None
        return {
            "bound_tokens_per_s": bound,
            "reference_tokens_per_s": reference.tokens_per_s,
            "ratio": ratio,
            "steps": steps,
            "steps_s": math.fsum([*self.warmup_times_s, *self.window_times_s, step_s]),
            "slowdown": slowdown,
            "run_tokens": reference.run_tokens if reference.judges_run else None,
            "run_s": reference.optimistic_run_s(bound * slowdown, setup_s),
            "reference_run_s": reference.run_s if reference.judges_run else None,
        }

    def _best_setup_s(self, reference: ScreenReference) -> float:
        """The set-up a run of this trial's configuration pays at best: the least the study
        measured, or this trial's own where it was shorter (it is known before the first step)."""
        if self.job_started_s is None:
            return reference.setup_s
        return min(reference.setup_s, self.setup_s)

    def _slowdown_now(self, reference: ScreenReference) -> float:
        """How much slower the machine ran for this trial's steps than when the reference was
        measured (`drift.slowdown`). The trial's fastest step ran between its first probe (before
        its first step) and a probe taken now (or its last one, under `REPROBE_S` old), so at
        best at the faster of the two's speed: a load that came, or a burst that passed, while
        the trial ran leaves that step uncorrected; only one there all along corrects it. The
        probe's seconds are no step's: the step under way, or the next, starts that much later."""
        if reference.probe_s is None:
            return 1.0
        _sync()  # the step's queued work stays the step's (at a deadline, mid-step)
        start = time.perf_counter()
        if self._probed is None or start - self._probed[0] > REPROBE_S:
            probe_s = self.machine_probe()
            end = time.perf_counter()
            self._last_edge += end - start
            self._probed = (end, min(probe_s, self._probe_before_s or math.inf))
        return drift.slowdown(reference.probe_s, self._probed[1])

    def _behind(self, window: list[float]) -> bool:
        """Whether the window can end now because it measures the trial clearly under the promotion
        line (`MeasureSettings.promote_ratio` of the study's best, `screen_against`): after
        `min_measure_steps` steps, the upper end of its 95% interval, each sample counted at its full
        length, is under the line. The trial keeps what the window measured (its interval wider
        than the target); it only does not earn the rest of the window (`not_promoted`). Not where
        the trial is judged on the user's run: the line reads throughput, not the run's time."""
        reference, line = self.screen_against, self.settings.promote_ratio
        if (
            not reference
            or reference.judges_run
            or line <= 0
            or len(window) < self.settings.min_measure_steps
        ):
            return False
        full_length = self.samples_per_step * self.tokens_per_sample
        stats = summarize_window(window, full_length, self.samples_per_step)
        upper = stats.tokens_per_s * (1 + stats.rel_ci_halfwidth)
        if upper >= line * reference.tokens_per_s:
            return False
        self.not_promoted = {
            "upper_tokens_per_s": upper,
            "reference_tokens_per_s": reference.tokens_per_s,
            "promote_ratio": line,
            "steps": len(window),
        }
        return True

    @property
    def screen_from_step(self) -> int:
        """The first step screening judges. The first step carries one-time costs (lazy set-up,
        the optimizer's state, data-loader workers starting) and never alone stops a trial: an
        eager trial is judged from its second step, when one steady step bounds its speed. A
        compiled one waits for its minimum warm-up (`MeasureSettings.settle_steps`): dynamo
        recompiles on the second step when a shape changes (variable-length data), and CUDA
        graphs record on the second step and replay only from the third."""
        return max(2, self.settings.settle_steps) if self._compiled else 2

    def result(self) -> dict[str, Any]:
        """The trial's measurements as flat user attrs.

        Raises:
            MeasurementError: training stopped before any step was measured.
        """
        if not self.window_times_s:
            raise MeasurementError(
                f"training stopped after {len(self.warmup_times_s)} warm-up steps, before the measured window"
            )
        steps = len(self.window_times_s)
        # The window's steps follow the warm-up's. Total tokens over total time.
        window_tokens = self.tokens_of_steps(len(self.warmup_times_s), steps)
        padding = self.padding_fraction(len(self.warmup_times_s), steps)
        tokens_per_step = window_tokens / steps
        stats = summarize_window(self.window_times_s, tokens_per_step, self.samples_per_step)
        steady_s = statistics.median(self.window_times_s)
        warmup_s = math.fsum(self.warmup_times_s)
        memory = self.meter.read()  # before the probe, whose matrices are no trial's
        return {
            **stats.to_dict(),
            "tokens_per_step": tokens_per_step,
            "window_tokens": window_tokens,
            # the share of the window's computed tokens that were padding (padded data only)
            **({"padding_fraction": round(padding, 4)} if padding is not None else {}),
            "samples_per_step": self.samples_per_step,
            "warmup_steps": len(self.warmup_times_s),
            "warmup_s": warmup_s,
            # Time the warm-up took beyond steady-state steps: compilation, autotuning, allocator growth.
            "warmup_excess_s": max(0.0, warmup_s - steady_s * len(self.warmup_times_s)),
            "first_step_s": self.warmup_times_s[0] if self.warmup_times_s else None,
            "setup_s": self.setup_s,
            # A window ended at the promotion line: what it measured, and the line it was under.
            **({"not_promoted": dict(self.not_promoted)} if self.not_promoted else {}),
            "loss_curve": self.loss_curve(),
            # the machine's speed around the window, what a trial screened against this one is
            # confirmed with (`autotune.measure.drift`): the faster of the probes before and after
            # it, so that a load that came or went during the window screens out nothing
            "probe_s": min(self.machine_probe(), self._probe_before_s or math.inf),
            **memory,
        }

    def loss_curve(self) -> list[list[float]]:
        """``[tokens seen, loss]`` after each optimizer step of the trial (warm-up included), real
        tokens counted as the window counts them; the loss is this rank's."""
        if not self._step_losses:
            return []
        losses = torch.stack(self._step_losses).float().cpu().tolist()
        curve: list[list[float]] = []
        seen = 0
        for step, loss in enumerate(losses):
            seen += self.tokens_of_steps(step, 1)
            curve.append([seen, round(loss, 6) if math.isfinite(loss) else loss])
        return curve
