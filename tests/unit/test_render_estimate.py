"""How a trial's memory estimate is shown: on its line (and where it came from) and summarised."""

from __future__ import annotations

from typing import Any

from autotune.records import TrialRecord, trial_record
from autotune.view import _estimate_text, estimate_summary

MiB = 2**20


def trial(
    number: int, error: float | None, from_trials: list[int] | None = None, **attrs: Any
) -> TrialRecord:
    parts = {"total_bytes": 500 * MiB} | ({"activations_from_trials": from_trials} if from_trials else {})
    stored = {"memory_estimate_bytes": 500 * MiB, "memory_estimate_error": error, "memory_estimate": parts}
    return trial_record(number, {}, "COMPLETE", stored | attrs)


def test_a_trials_line_names_the_trials_its_estimate_came_from() -> None:
    assert _estimate_text(trial(0, 0.1)) == " (est. 500 MiB, +10%)"
    assert _estimate_text(trial(3, -0.05, [1])) == " (est. 500 MiB from trial 1, -5%)"
    assert _estimate_text(trial(4, 0.02, [1, 3])) == " (est. 500 MiB from trials 1, 3, +2%)"
    assert _estimate_text(trial(5, None)) == ""


def test_the_summary_gives_the_trials_estimated_from_peaks_apart() -> None:
    trials = [trial(0, -0.30), trial(1, 0.10), trial(2, 0.04, [1]), trial(3, -0.02, [1, 2])]
    trials.append(trial(4, 0.9, [1], duplicate_of=1))  # a reused result is not a second estimate
    assert estimate_summary(trials) == (
        "memory estimate vs measured peak over 4 trials: mean |error| 11.5%, worst 30.0% "
        "(2 from earlier trials' peaks: mean 3.0%, worst 4.0%)"
    )
    assert estimate_summary(trials[:2]) == (
        "memory estimate vs measured peak over 2 trials: mean |error| 20.0%, worst 30.0%"
    )
    assert estimate_summary([trial(0, None)]) is None
