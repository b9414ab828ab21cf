"""The configurations an answer can hand back, built from stored records (`Choice`): which trials
count as measured in full, and a trial as its search window measured it.

Pure: reads records; no torch, no optuna.
"""

from __future__ import annotations

import math

from autotune.answer.model import Choice, Interval
from autotune.records import StudyRecord, TrialRecord
from autotune.space.mapping import trial_kwargs
from autotune.store.objective import score
from autotune.store.outcomes import OVER_MEMORY_CAP
from autotune.store.semantics import record_changes


def measured_in_full(trial: TrialRecord, recapped: bool = False) -> bool:
    """A trial with a full measurement that can be the answer: completed and feasible; under
    another cap (`recapped`) also a completed one judged infeasible, or one pruned only for being
    over the study's own cap. Never a reused duplicate or a non-finite loss."""
    if trial.reused or trial.tokens_per_s is None or trial.peak_memory_bytes is None:
        return False
    loss = trial.measurement.train_loss
    if loss is not None and not (isinstance(loss, (int, float)) and math.isfinite(loss)):
        return False
    if trial.state == "COMPLETE":
        return trial.is_feasible or recapped
    return recapped and trial.state == "PRUNED" and trial.reason == OVER_MEMORY_CAP


def same_as_baseline(study: StudyRecord, trial: TrialRecord) -> bool:
    """Whether a trial ran the baseline's configuration: its knobs over the baseline's (a knob it
    did not sample ran at the baseline's value) resolve to the same `TrainingArguments` and model
    kwargs, and it applied the same batch split. Such a trial *is* the baseline: never a
    contestant against it."""
    base = study.baseline.params
    if not base:
        return False
    if trial_kwargs({**base, **trial.params}) != trial_kwargs(base):
        return False
    applied, expected = trial.training_args or {}, trial_kwargs(base)[0]
    split = ("per_device_train_batch_size", "gradient_accumulation_steps")
    return all(applied.get(key, expected.get(key)) == expected.get(key) for key in split)


def fits(peak_bytes: int | None, cap_bytes: int | None) -> bool:
    """Whether a measured peak is under a cap (no cap: anything fits; no peak: nothing does)."""
    return cap_bytes is None or (peak_bytes is not None and peak_bytes <= cap_bytes)


def one_window(tokens_per_s: float | None, rel_ci: float | None) -> Interval | None:
    """One window's throughput with its own 95% interval (its steps' spread)."""
    if not tokens_per_s:
        return None
    if rel_ci is None or not math.isfinite(rel_ci):
        return Interval(tokens_per_s)
    return Interval(tokens_per_s, tokens_per_s * (1 - rel_ci), tokens_per_s * (1 + rel_ci))


def search_choice(study: StudyRecord, trial: TrialRecord) -> Choice:
    """A trial as its search window measured it (not re-measured): its throughput with the
    window's interval, its peak, its score over the baseline's first window."""
    tokens = study.train_tokens
    mine = score(trial, tokens)
    theirs = score(study.baseline.as_trial(), tokens) if study.baseline.measured else None
    return Choice(
        trial=trial.number,
        params=dict(trial.params),
        training_args=dict(trial.training_args or {}),
        model_kwargs=dict(trial.model_kwargs or {}),
        tokens_per_s=one_window(trial.tokens_per_s, trial.rel_ci_halfwidth),
        peak_memory_bytes=trial.peak_memory_bytes,
        remeasured=False,
        speedup=Interval(mine / theirs) if mine and theirs else None,
        changes=tuple(c.text() for c in record_changes(study, trial)),
    )
