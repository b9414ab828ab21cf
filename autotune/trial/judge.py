"""Whether a measured trial completes, and if not, why: a verdict on its record alone.

A trial that trained through its window is judged on what it measured, against the memory cap and
the baseline's loss: its peak (the largest rank's) over the cap, or its loss diverged from the
baseline's at equal tokens past the tolerance (`autotune.study.objective.loss_delta`), prunes it
with a reason; anything else completes. A non-finite training loss on any rank ends the trial
before it is judged (`non_finite_loss` says which).

Pure: no torch, no optuna; the trial's Trainer measures, this module judges.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from autotune.records import TrialRecord
from autotune.study.objective import loss_delta, loss_diverged
from autotune.study.outcomes import LOSS_DIVERGED, OVER_MEMORY_CAP, memory_violation


@dataclass(frozen=True)
class Verdict:
    """What a measured trial's record says about it.

    Attributes:
        reason: None when it completes; `OVER_MEMORY_CAP` or `LOSS_DIVERGED` when it is pruned.
        message: one human line about the reason ("" when it completes).
        loss_delta: its loss against the baseline's at equal tokens, relative to it (None: not
            compared, no overlap, or not finite); stored with the trial.
    """

    reason: str | None = None
    message: str = ""
    loss_delta: float | None = None

    @property
    def complete(self) -> bool:
        return self.reason is None

    @property
    def state(self) -> str:
        """The optuna state the trial ends in: ``"COMPLETE"`` or ``"PRUNED"``."""
        return "COMPLETE" if self.complete else "PRUNED"


def judge(
    record: TrialRecord, cap_bytes: int | None, baseline: TrialRecord | None, tolerance: float
) -> Verdict:
    """The verdict on a measured trial.

    Args:
        record: what the trial measured (`autotune.records.measured_record`).
        cap_bytes: the memory cap (None: no cap).
        baseline: the baseline's measurement (`Baseline.as_trial`; None: no baseline), whose loss
            curve the trial's is compared with.
        tolerance: how much worse than the baseline's the loss may be, relative to it.

    Returns:
        Over the cap first (a peak above the cap, not at it), then a loss past the tolerance (or
        not finite where the baseline's is); otherwise complete, with the loss delta to store.
    """
    peak = record.peak_memory_bytes
    if memory_violation(peak, cap_bytes) > 0:
        return Verdict(OVER_MEMORY_CAP, over_cap_message(peak, cap_bytes))
    theirs = baseline.measurement.loss_curve if baseline is not None else None
    delta = loss_delta(record.measurement.loss_curve or [], theirs or [])
    finite = delta if delta is not None and math.isfinite(delta) else None
    if loss_diverged(delta, tolerance):
        return Verdict(LOSS_DIVERGED, diverged_message(delta, tolerance), finite)
    return Verdict(loss_delta=finite)


def non_finite_loss(losses: Iterable[float]) -> str | None:
    """Why a trial whose ranks ended with training `losses` ends as ``nan_loss``: the first loss
    that is not finite, in words; None when every one is finite."""
    for loss in losses:
        if not math.isfinite(loss):
            return f"training loss became {loss}"
    return None


def over_cap_message(peak_bytes: int | None, cap_bytes: int | None) -> str:
    return (
        f"peak memory {(peak_bytes or 0) / 2**20:.0f} MiB is over the cap of "
        f"{(cap_bytes or 0) / 2**20:.0f} MiB"
    )


def diverged_message(delta: float | None, tolerance: float) -> str:
    if delta is None or not math.isfinite(delta):
        return "the loss is not finite where the baseline's is"
    return (
        f"the loss is {100 * delta:.1f}% worse than the baseline's at equal tokens "
        f"(tolerance {100 * tolerance:.0f}%)"
    )
