"""The measurement callback: warm-up, then a timed window of optimizer steps, then peak memory.

One `ThroughputCallback` lives for the whole search; `on_train_begin` starts a new trial's
measurement. Step times are taken between consecutive `on_step_end` events with the device
synchronized there, so they cover the whole optimizer step (data loading, forward, backward,
optimizer) and nothing of the set-up before the first step.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback

from autotune.config import MeasureSettings
from autotune.errors import AutotuneError
from autotune.measure.memory import PeakMemoryMeter
from autotune.measure.ranks import from_rank_zero
from autotune.measure.stats import summarize_window, warmup_done, window_done
from autotune.progress import Reporter


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

    def __init__(self, settings: MeasureSettings, tokens_per_sample: int, reporter: Reporter) -> None:
        self.settings = settings
        self.tokens_per_sample = tokens_per_sample
        self.reporter = reporter
        self.meter = PeakMemoryMeter("cuda" if torch.cuda.is_available() else "cpu")
        self._reset_trial()

    def _reset_trial(self) -> None:
        self.warmup_times_s: list[float] = []
        self.window_times_s: list[float] = []
        self.samples_per_step = 0
        self._last_edge = 0.0
        self._train_begin = 0.0
        self.setup_s = 0.0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._reset_trial()
        self.samples_per_step = (
            args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        )
        self.meter.reset()
        _sync()
        self._train_begin = self._last_edge = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _sync()
        now = time.perf_counter()
        step_s, self._last_edge = now - self._last_edge, now
        s = self.settings
        timed_out = now - self._train_begin > s.trial_timeout_s
        warming = not self.window_times_s and not warmup_done(
            self.warmup_times_s, s.warmup_steps, s.max_warmup_steps
        )
        window = [*self.window_times_s, step_s]
        done = not warming and window_done(window, s.min_steps, s.max_steps, s.max_seconds, s.target_rel_ci)
        # In a DDP group every rank must take the same decision at the same step, or the ranks
        # that go on wait in a collective for the ones that stopped: rank 0's decision stands.
        timed_out, warming, done = from_rank_zero((timed_out, warming, done))
        if timed_out:
            raise TrialTimeout(
                f"still training after {now - self._train_begin:.0f} s (limit {s.trial_timeout_s:.0f} s)"
            )
        if warming:
            self.warmup_times_s.append(step_s)
            self.reporter.on_step("warmup", len(self.warmup_times_s), step_s)
            return
        self.window_times_s.append(step_s)
        self.reporter.on_step("measure", len(self.window_times_s), step_s)
        if done:
            control.should_training_stop = True

    def result(self) -> dict[str, Any]:
        """The trial's measurements as flat user attrs.

        Raises:
            MeasurementError: training stopped before any step was measured.
        """
        if not self.window_times_s:
            raise MeasurementError(
                f"training stopped after {len(self.warmup_times_s)} warm-up steps, before the measured window"
            )
        steps, per_step = len(self.window_times_s), self.samples_per_step
        if self.count_tokens is not None:
            # Trials read the data in order from sample 0: the window holds the samples after
            # the warm-up's. Total tokens over total time, as with equal-length samples.
            window_tokens = self.count_tokens(len(self.warmup_times_s) * per_step, steps * per_step)
        else:
            window_tokens = steps * per_step * self.tokens_per_sample
        tokens_per_step = window_tokens / steps
        stats = summarize_window(self.window_times_s, tokens_per_step, self.samples_per_step)
        steady_s = statistics.median(self.window_times_s)
        warmup_s = math.fsum(self.warmup_times_s)
        return {
            **stats.to_dict(),
            "tokens_per_step": tokens_per_step,
            "window_tokens": window_tokens,
            "samples_per_step": self.samples_per_step,
            "warmup_steps": len(self.warmup_times_s),
            "warmup_s": warmup_s,
            # Time the warm-up took beyond steady-state steps: compilation, autotuning, allocator growth.
            "warmup_excess_s": max(0.0, warmup_s - steady_s * len(self.warmup_times_s)),
            "first_step_s": self.warmup_times_s[0] if self.warmup_times_s else None,
            **self.meter.read(),
        }
