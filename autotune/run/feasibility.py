"""What makes a trial feasible, and which trials need not run at all. Pure: plain data in and out.

Feasible means: it trained, its loss stayed finite, and its measured peak memory is under the cap.
Each condition is an optuna constraint (``value <= 0`` is satisfied) set on the trial itself, so
TPE reads them from storage, also after a resume with a fresh sampler object.

Trials that need not run: the same parameters as a finished trial (its result is reused), or a
configuration that needs at least as much memory as one that already ran out of it. Memory is
monotone in the per-device batch, in turning activation checkpointing off, and in precision
(fp32 activations are larger than fp16/bf16 ones).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.measure.estimate import clearly_over

# Reasons of trials that did not train: they cost nothing and do not spend the budget.
# "duplicate_running": another worker is training the same parameters right now.
NOT_TRAINED = ("unavailable", "duplicate", "duplicate_running", "oom_predicted", "over_estimate")
OVER_MEMORY_CAP = "over_memory_cap"  # measured, but its peak is over the cap
# Reasons that mean "this configuration does not fit in memory".
OUT_OF_MEMORY = ("oom", OVER_MEMORY_CAP, "oom_predicted", "over_estimate")

# Larger number: more activation memory at the same batch.
_PRECISION_MEMORY_RANK = {"fp16": 0, "bf16": 0, "bf16+tf32": 0, "fp32": 1, "tf32": 1}


def memory_violation(peak_bytes: int | None, cap_bytes: int | None) -> float:
    """The memory constraint value: how far over the cap, as a fraction of it (0 when under)."""
    if cap_bytes is None or peak_bytes is None:
        return 0.0
    return max(0.0, (peak_bytes - cap_bytes) / cap_bytes)


def constraint_values(reason: str | None, peak_bytes: int | None, cap_bytes: int | None) -> dict[str, float]:
    """All constraint values of a trial that ended with `reason` (None: completed)."""
    memory = memory_violation(peak_bytes, cap_bytes)
    if reason in OUT_OF_MEMORY:
        memory = max(memory, 1.0)
    return {
        "runs_here": 1.0 if reason == "unavailable" else 0.0,
        "finite_loss": 1.0 if reason == "nan_loss" else 0.0,
        "memory": memory,
    }


@dataclass(frozen=True)
class PastTrial:
    """What the pre-checks need to know of a finished trial."""

    number: int
    params: Mapping[str, Any]
    reason: str | None


def find_duplicate(params: Mapping[str, Any], past: Iterable[PastTrial]) -> PastTrial | None:
    """A finished trial with exactly these parameters that itself ran (not a reuse), if any."""
    for trial in past:
        if dict(trial.params) == dict(params) and trial.reason not in ("duplicate", "interrupted"):
            return trial
    return None


def needs_at_least_as_much_memory(params: Mapping[str, Any], than: Mapping[str, Any]) -> bool:
    """Whether `params` needs at least the memory of `than`: equal but for a per-device batch that is
    not smaller, checkpointing that is not more on, and a precision that is not lower."""
    if set(params) != set(than):
        return False
    for key, value in params.items():
        other = than[key]
        if key == "per_device_train_batch_size":
            if int(value) < int(other):
                return False
        elif key == "activation_checkpointing":
            if bool(value) and not bool(other):
                return False
        elif key == "precision":
            if _PRECISION_MEMORY_RANK.get(str(value), 1) < _PRECISION_MEMORY_RANK.get(str(other), 1):
                return False
        elif key == "gradient_accumulation_steps":
            continue  # accumulation does not change the peak of one micro-step
        elif value != other:
            return False
    return True


def find_dominating_oom(params: Mapping[str, Any], past: Iterable[PastTrial]) -> PastTrial | None:
    """A trial that ran out of memory with a configuration `params` needs at least as much as."""
    for trial in past:
        if trial.reason in OUT_OF_MEMORY and needs_at_least_as_much_memory(params, trial.params):
            return trial
    return None


def precheck(
    params: Mapping[str, Any],
    past: Sequence[PastTrial],
    estimate_bytes: Callable[[], int | None],
    cap_bytes: int | None,
    running: Sequence[PastTrial] = (),
) -> tuple[str, PastTrial | None] | None:
    """Why a trial needs no training, cheapest check first: ``("duplicate", trial)`` (reuse its
    result), ``("duplicate_running", trial)`` (another process is training these parameters now),
    ``("oom_predicted", trial)`` (it needs at least the memory of that trial, which did not fit),
    ``("over_estimate", None)`` (its memory estimate is clearly over the cap, `clearly_over`), or
    None: train it. `estimate_bytes` is called only when the cheaper checks pass.

    A running twin makes this trial yield whichever of the two started first: two proposals racing
    may both yield (cheap), but never both train."""
    duplicate = find_duplicate(params, past)
    if duplicate is not None:
        return "duplicate", duplicate
    twin = next((t for t in running if dict(t.params) == dict(params)), None)
    if twin is not None:
        return "duplicate_running", twin
    dominating = find_dominating_oom(params, past)
    if dominating is not None:
        return "oom_predicted", dominating
    if cap_bytes is None:
        estimate_bytes()  # still made: it is stored with the trial and compared with its peak
        return None
    estimate = estimate_bytes()
    if estimate is not None and clearly_over(estimate, cap_bytes):
        return "over_estimate", None
    return None
