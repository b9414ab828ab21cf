"""Whether a measured trial completes, and if not, why: a verdict on its record alone.

A trial that trained through its window is judged on what it measured, against the memory cap and
the baseline's loss: its peak (the largest rank's) over the cap, or its loss diverged from the
baseline's at equal tokens, prunes it with a reason; anything else completes. A non-finite training
loss on any rank ends the trial before it is judged (`non_finite_loss` says which).

The loss guard is for numerics: precision and the optimizer's update rule, and a kernel that
computes something else. Every trial trains on the same inputs and labels at equal tokens, so a
loss is diverged only when it is worse than the tolerance and the difference stands out of the
noise the baseline shows against itself (`autotune.store.objective.compare_losses` gives the
model): a configuration whose knobs keep the math (attention kernel, checkpointing, compile, data
loading) differs from the baseline by that noise alone, and is not pruned for it. A trial that
changes the effective batch or the data order (`autotune.store.semantics.loss_compared`) is
compared on nothing: at equal tokens a larger batch has taken fewer optimizer steps at a learning
rate tuned for the baseline's batch, so its loss is higher by construction; its delta is still
stored for the answer, which names the change and how to scale the learning rate. Only a loss that
is not finite where the baseline's is still diverges such a trial.

Pure: no torch, no optuna; the trial's Trainer measures, this module judges.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from autotune.records import TrialRecord
from autotune.store.objective import LossComparison, compare_losses, loss_diverged
from autotune.store.outcomes import LOSS_DIVERGED, OVER_MEMORY_CAP, memory_violation


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
    record: TrialRecord,
    cap_bytes: int | None,
    baseline: TrialRecord | None,
    tolerance: float,
    compared: bool = True,
) -> Verdict:
    """The verdict on a measured trial.

    Args:
        record: what the trial measured (`autotune.records.measured_record`).
        cap_bytes: the memory cap (None: no cap).
        baseline: the baseline's measurement (`Baseline.as_trial`; None: no baseline), whose loss
            curve the trial's is compared with.
        tolerance: how much worse than the baseline's the loss may be, relative to it.
        compared: whether the trial's loss is judged at equal tokens at all (False: it changes the
            effective batch or the data order, see the module docstring).

    Returns:
        Over the cap first (a peak above the cap, not at it), then a loss worse than the tolerance
        beyond the noise (or not finite where the baseline's is); otherwise complete, with the
        loss delta to store.
    """
    peak = record.peak_memory_bytes
    if memory_violation(peak, cap_bytes) > 0:
        return Verdict(OVER_MEMORY_CAP, over_cap_message(peak, cap_bytes))
    theirs = baseline.measurement.loss_curve if baseline is not None else None
    comparison = compare_losses(record.measurement.loss_curve or [], theirs or [])
    delta = comparison.delta
    finite = delta if delta is not None and math.isfinite(delta) else None
    # Not compared: only a loss that is not finite where the baseline's is diverges.
    diverged = loss_diverged(comparison, tolerance) if compared else delta is not None and finite is None
    if diverged:
        return Verdict(LOSS_DIVERGED, diverged_message(comparison, tolerance), finite)
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


def diverged_message(comparison: LossComparison, tolerance: float) -> str:
    delta, interval = comparison.delta, comparison.interval
    if delta is None or not math.isfinite(delta) or interval is None:
        return "the loss is not finite where the baseline's is"
    low, high = (100 * bound for bound in interval)
    return (
        f"the loss is {100 * delta:.1f}% worse than the baseline's at equal tokens "
        f"(95% interval {low:.1f}% to {high:.1f}% over {comparison.paired_steps} paired steps; "
        f"tolerance {100 * tolerance:.0f}%)"
    )
