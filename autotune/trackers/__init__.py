"""Trackers: a search logged to TensorBoard, MLflow or Weights & Biases, as the Trainer's
``report_to`` names them (the ``report_to`` run option, `autotune.options.checks.TRACKERS`).

A tracker observes the search as a reporter does (`autotune.progress.Reporter`): it opens its run
when the search is set up (the study is known), logs each finished trial (its knobs, tokens/s,
samples/s, peak memory, state and reason) and, at the end, the answer (verdict, chosen
configuration, speedup and its interval). `tracking` puts the trackers beside the caller's
reporter for the length of a search and closes their runs however it ends. The trials' own
training stays untracked (``report_to="none"`` in every trial's arguments): a tracker's logging
inside a measured window would be measured with it.

Each tracker's library is imported when its run opens; `check_installed` says, before anything
is created, which one is missing and the pip extra that brings it. Only the process of rank 0
logs (a search launched with torchrun runs on every rank).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from typing import Any

from autotune.errors import UsageError
from autotune.options.checks import TRACKERS
from autotune.progress import Reporter, SearchHeader, TrialSummary

# The modules a tracker needs (any one of them, first preferred), and the pip extra that installs them.
MODULES = {
    "tensorboard": ("tensorboard", "tensorboardX"),
    "mlflow": ("mlflow",),
    "wandb": ("wandb",),
}
EXTRAS = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}
DISTRIBUTION = "hf-autotune"


def check_installed(names: tuple[str, ...]) -> None:
    """Fail in one line when a tracker of `names` lacks its library here. Imports nothing.

    Raises:
        UsageError: naming the tracker and the pip extra that installs it.
    """
    for name in names:
        if not any(importlib.util.find_spec(module) is not None for module in MODULES[name]):
            raise UsageError(
                f"report_to={name} needs the {name} library, which is not installed",
                f"pip install '{DISTRIBUTION}[{EXTRAS[name]}]', or drop {name} from report_to",
                field="report_to",
            )


class Tracker:
    """One tracker's run for one search: `open` when the study is known, `trial` for each finished
    trial, `answer` once the answer is decided, `close` however the search ends (`failed`: it
    raised). Subclasses write to their tracker's library."""

    name = "tracker"

    def open(self, header: SearchHeader) -> None:
        """Start the run; `header` is what the reporter's ``on_search_start`` receives."""

    def trial(self, trial: TrialSummary) -> None:
        """Log a finished trial."""

    def answer(self, result: Any) -> None:
        """Log the search's answer (`result`: its `SearchResult`)."""

    def close(self, failed: bool) -> None:
        """End the run, failed or finished."""


def trial_metrics(trial: TrialSummary) -> dict[str, float]:
    """A trial's measured figures, those it has: tokens/s, samples/s, peak memory in bytes, the
    relative 95% half-width of tokens/s, the measured steps."""
    figures = {
        "tokens_per_s": trial.tokens_per_s,
        "samples_per_s": trial.samples_per_s,
        "peak_memory_bytes": trial.peak_memory_bytes,
        "rel_ci_halfwidth": trial.rel_ci_halfwidth,
        "measured_steps": trial.measurement.measured_steps,
    }
    return {key: float(value) for key, value in figures.items() if value is not None}


def trial_outcome(trial: TrialSummary) -> dict[str, str]:
    """A trial's state (``COMPLETE``, ``PRUNED``, ``FAIL``) and why it ended (empty when it
    completed without a reason)."""
    return {"state": trial.state, "reason": trial.reason or "", "message": trial.message or ""}


def param_value(value: Any) -> Any:
    """A knob's value as trackers take a parameter: a bool, number or text (None: ``"none"``)."""
    if value is None:
        return "none"
    return value if isinstance(value, (bool, int, float, str)) else str(value)


def answer_metrics(result: Any) -> dict[str, float]:
    """The answer's figures, those it has: the speedup of the chosen configuration over the
    baseline and its 95% interval, its tokens/s and peak memory, the baseline's tokens/s."""
    answer = result.answer
    choice = answer.choice
    figures: dict[str, Any] = {"baseline_tokens_per_s": answer.baseline_tokens_per_s}
    if choice is not None:
        if choice.speedup is not None:
            figures |= {
                "speedup": choice.speedup.value,
                "speedup_low": choice.speedup.low,
                "speedup_high": choice.speedup.high,
            }
        figures["tokens_per_s"] = choice.tokens_per_s.value if choice.tokens_per_s else None
        figures["peak_memory_bytes"] = choice.peak_memory_bytes
    return {key: float(value) for key, value in figures.items() if value is not None}


def answer_text(result: Any) -> dict[str, str]:
    """The answer in words: its verdict, its rule, and which configuration it chose (``trial 3``,
    ``the defaults``, ``none``)."""
    answer = result.answer
    chosen = answer.choice.label if answer.choice is not None else "none"
    return {"verdict": answer.verdict, "rule": answer.rule, "chosen": chosen}


def answer_params(result: Any) -> dict[str, Any]:
    """The chosen configuration's knob values (empty: nothing chosen)."""
    choice = result.answer.choice
    return {} if choice is None else {k: param_value(v) for k, v in choice.params.items()}


def make_tracker(name: str, config: Any) -> Tracker:
    """The tracker `name` for a search of `config` (its library is imported when its run opens)."""
    if name == "tensorboard":
        from autotune.trackers.tensorboard import TensorBoardTracker

        return TensorBoardTracker(config.tracker_dir)
    if name == "mlflow":
        from autotune.trackers.mlflow import MLflowTracker

        return MLflowTracker()
    from autotune.trackers.wandb import WandbTracker

    return WandbTracker()


class TrackedReporter(Reporter):
    """The caller's reporter, with trackers beside it: every event reaches the reporter, and the
    trackers see the search's start, each finished trial and the answer. A tracker that fails is
    said once, as a note, and left out for the rest of the search: the search goes on."""

    def __init__(self, inner: Reporter, trackers: list[Tracker]) -> None:
        self.inner = inner
        self.trackers = trackers
        self.opened: list[Tracker] = []

    def _each(self, trackers: list[Tracker], what: str, call: Any, *, closing: bool = False) -> None:
        for tracker in list(trackers):
            try:
                call(tracker)
            except Exception as exc:
                self.forget(tracker, close=not closing)
                text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                self.inner.on_note(
                    f"the {tracker.name} tracker failed to {what} ({text}): the search goes on without it"
                )

    def forget(self, tracker: Tracker, close: bool = True) -> None:
        """Leave `tracker` out from now on, its run ended as failed (`close`) where it has one."""
        opened = tracker in self.opened
        for kept in (self.trackers, self.opened):
            if tracker in kept:
                kept.remove(tracker)
        if close and opened:
            with contextlib.suppress(Exception):
                tracker.close(failed=True)

    def on_search_start(self, header: SearchHeader) -> None:
        self.inner.on_search_start(header)
        for tracker in list(self.trackers):
            if tracker not in self.opened:
                self.opened.append(tracker)
                self._each([tracker], "open its run", lambda t: t.open(header))

    def on_trial_start(self, number: int, params: dict[str, Any]) -> None:
        self.inner.on_trial_start(number, params)

    def on_step(self, phase: str, step: int, step_s: float) -> None:
        self.inner.on_step(phase, step, step_s)

    def on_trial_end(self, trial: TrialSummary) -> None:
        self.inner.on_trial_end(trial)
        self._each(self.opened, "log a trial", lambda t: t.trial(trial))

    def on_remeasure(
        self, number: int, round_number: int, tokens_per_s: float | None, error: str | None
    ) -> None:
        self.inner.on_remeasure(number, round_number, tokens_per_s, error)

    def on_note(self, text: str) -> None:
        self.inner.on_note(text)

    def on_search_end(self, result: Any) -> None:
        self.inner.on_search_end(result)
        self._each(self.opened, "log the answer", lambda t: t.answer(result))

    def close(self, failed: bool) -> None:
        """End every open tracker's run."""
        self._each(self.opened, "end its run", lambda t: t.close(failed), closing=True)
        self.opened.clear()


def rank_zero() -> bool:
    """Whether this process logs: it is not one of a launched group's other ranks."""
    return int(os.environ.get("RANK", "0")) == 0


@contextlib.contextmanager
def tracking(config: Any, reporter: Reporter) -> Iterator[Reporter]:
    """`reporter` with the trackers `config.report_to` asks for beside it, for one search; their
    runs are closed at the end, marked failed when the search raised. Without trackers (or on a
    rank other than 0), `reporter` itself."""
    if not config.report_to or not rank_zero():
        yield reporter
        return
    check_installed(config.report_to)
    tracked = TrackedReporter(reporter, [make_tracker(name, config) for name in config.report_to])
    failed = True
    try:
        yield tracked
        failed = False
    finally:
        tracked.close(failed)


__all__ = ["TRACKERS", "TrackedReporter", "Tracker", "check_installed", "tracking"]
