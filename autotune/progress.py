"""How a search tells the outside world what it is doing. The library prints nothing itself."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from autotune.records import TrialRecord
from autotune.records.keys import ByName
from autotune.space.knobs import short_name

# One finished trial, as reporters and result tables show it: the trial's stored record.
TrialSummary = TrialRecord


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def describe_params(params: dict[str, Any]) -> str:
    """``bs=8 ga=1 prec=bf16 ...``: a trial's knob values in one short line."""
    return " ".join(f"{short_name(k)}={format_value(v)}" for k, v in params.items())


@dataclass(frozen=True)
class SearchHeader(ByName):
    """What a search is about to do, as `Reporter.on_search_start` receives it (trackers log its
    dict, `to_dict`: the keys they have always logged, in their order).

    Attributes:
        model, task, seq_len: the workload.
        space: the space in words (its name, knobs and combinations).
        space_notes: what the user should know about the space, its data and weights.
        not_searched: the knobs' values that cannot run here.
        storage, study: where the study is stored and its name.
        budget: the trials the study is to hold; finished: measured before this search;
            to_run: trials this search runs.
        device: the hardware (`Hardware.to_dict`).
        memory_cap: the cap as the user wrote it (None: none).
    """

    model: str | None = None
    task: str | None = None
    seq_len: int | None = None
    space: str | None = None
    space_notes: list[str] = field(default_factory=list)
    not_searched: list[Any] = field(default_factory=list)
    storage: str | None = None
    study: str | None = None
    budget: int | None = None
    finished: int | None = None
    to_run: int | None = None
    device: dict[str, Any] = field(default_factory=dict)
    memory_cap: str | None = None

    def scalars(self) -> dict[str, str | int | float]:
        """Its fields that are one string or number (what trackers and the log show)."""
        return {k: v for k, v in self.to_dict().items() if isinstance(v, (str, int, float))}


class Reporter:
    """Receives search events. This base class ignores them all; the CLI renders them with rich."""

    def on_search_start(self, header: SearchHeader) -> None:
        """The search is set up: `header` holds the model, space, store, budget and device."""

    def on_trial_start(self, number: int, params: dict[str, Any]) -> None:
        """A trial with these knob values is about to be trained."""

    def on_step(self, phase: str, step: int, step_s: float) -> None:
        """One optimizer step ended; `phase` is ``"warmup"`` or ``"measure"``."""

    def on_trial_end(self, trial: TrialSummary) -> None:
        """A trial ended, whatever its state."""

    def on_remeasure(
        self, number: int, round_number: int, tokens_per_s: float | None, error: str | None
    ) -> None:
        """A finalist was measured again (`error` set when that failed)."""

    def on_note(self, text: str) -> None:
        """Something the user should know that is not a trial (a search stopped early, ...)."""

    def on_search_end(self, result: Any) -> None:
        """The search is over (`result` is the `SearchResult`)."""


# The library's own logger: `search()` and `tune()` called without a reporter tell it what they do
# (`LoggingReporter`), at INFO, so that ``logging.basicConfig(level=logging.INFO)`` (or a notebook's
# handler on "autotune") shows a search's progress.
logger = logging.getLogger("autotune")


class LoggingReporter(Reporter):
    """A reporter that tells the ``autotune`` logger what a search does: its start, each trial's
    start and end, each re-measurement, every note and the answer (INFO; steps are not logged).
    `search()` and `tune()` use it when given no reporter."""

    def on_search_start(self, header: SearchHeader) -> None:
        what = ", ".join(f"{key} {value}" for key, value in header.scalars().items())
        logger.info("search: %s", what)

    def on_trial_start(self, number: int, params: dict[str, Any]) -> None:
        logger.info("trial %d: %s", number, describe_params(params))

    def on_trial_end(self, trial: TrialSummary) -> None:
        if trial.state == "COMPLETE" and trial.tokens_per_s is not None:
            logger.info(
                "trial %d: %s tok/s, peak %s",
                trial.number,
                format_rate(trial.tokens_per_s),
                format_bytes(trial.peak_memory_bytes),
            )
        else:
            logger.info(
                "trial %d: %s (%s): %s", trial.number, trial.state.lower(), trial.reason, trial.message
            )

    def on_remeasure(
        self, number: int, round_number: int, tokens_per_s: float | None, error: str | None
    ) -> None:
        who = "the baseline" if number < 0 else f"trial {number}"
        if error is not None:
            logger.info("round %d: %s failed: %s", round_number, who, error)
        else:
            logger.info("round %d: %s at %s tok/s", round_number, who, format_rate(tokens_per_s))

    def on_note(self, text: str) -> None:
        logger.info("%s", text)

    def on_search_end(self, result: Any) -> None:
        logger.info("answer: %s", result.verdict)


def format_bytes(n: float | None) -> str:
    """``653 MiB``, ``1.50 GiB``; ``-`` when unknown."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}" if unit == "GiB" else f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


def format_rate(x: float | None) -> str:
    """``24.7k`` (per second); ``-`` when unknown."""
    if x is None:
        return "-"
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.1f}"


# The names of a search's time phases and stages (`autotune.driver.accounting`), as shown.
PHASE_NAMES = {
    "setup_s": "set-up",
    "compile_s": "compile",
    "warmup_s": "warm-up",
    "window_s": "measured windows",
    "screening_s": "screened out",
    "between_s": "between trials",
}
STAGE_NAMES = {
    "baseline_s": "baseline",
    "search_s": "search",
    "finalists_s": "finalists",
    "whole_run_s": "whole-run check",
}


def describe_time_breakdown(breakdown: dict[str, Any] | None) -> str | None:
    """A study's ``time_breakdown`` (`autotune.driver.accounting`) in one line: the wall time, the
    share spent in measured windows, the phases and the stages. None without one."""
    if not breakdown or not breakdown.get("wall_s"):
        return None
    slots = int(breakdown.get("slots", 1))
    over = f" x {slots} slots" if slots > 1 else ""

    def listed(part: str, names: dict[str, str]) -> str:
        return ", ".join(f"{names.get(k, k)} {s:.1f} s" for k, s in (breakdown.get(part) or {}).items())

    phases, stages = listed("phases", PHASE_NAMES), listed("stages", STAGE_NAMES)
    text = (
        f"search time: {float(breakdown['wall_s']):.1f} s{over}, "
        f"{100 * float(breakdown.get('measured_share') or 0.0):.0f}% of it measured ({phases})"
    )
    return text + (f"; stages: {stages}" if stages else "")
