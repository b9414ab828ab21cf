"""What makes a trial feasible, and which trials need not run at all. Pure: plain data in and out.

Trials that need not run: the same parameters as a finished trial (its result is reused), or a
configuration that needs at least as much memory as one that already ran out of it. Memory is
monotone in the per-device batch, in turning activation checkpointing off, and in precision
(fp32 activations are larger than fp16/bf16 ones).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.measure.memory_model import clearly_over
from autotune.records import TrialRecord
from autotune.store.outcomes import (
    DUPLICATE,
    DUPLICATE_RUNNING,
    OOM_PREDICTED,
    OUT_OF_MEMORY,
    OVER_ESTIMATE,
    RUN_AGAIN,
    UNUSED_PARAMETERS,
    UNUSED_PARAMETERS_KNOWN,
)

# Larger number: more activation memory at the same batch.
_PRECISION_MEMORY_RANK = {"fp16": 0, "bf16": 0, "bf16+tf32": 0, "fp8": 0, "fp32": 1, "tf32": 1}


@dataclass(frozen=True)
class PastTrial:
    """What the pre-checks need to know of a finished trial."""

    number: int
    params: Mapping[str, Any]
    reason: str | None


def as_past(trial: TrialRecord) -> PastTrial:
    """A trial, its record read as `autotune.store.trials.summarize_trial` reads it, as the
    pre-checks of a new trial see it."""
    return PastTrial(trial.number, dict(trial.params), trial.reason)


def find_duplicate(params: Mapping[str, Any], past: Iterable[PastTrial]) -> PastTrial | None:
    """A finished trial with exactly these parameters that itself ran (not a reuse) and whose end
    says something about them (not `RUN_AGAIN`: interrupted, a full disk), if any."""
    for trial in past:
        if dict(trial.params) == dict(params) and trial.reason not in (DUPLICATE, *RUN_AGAIN):
            return trial
    return None


def needs_at_least_as_much_memory(params: Mapping[str, Any], than: Mapping[str, Any]) -> bool:
    """Whether `params` needs at least the memory of `than`: equal but for a per-device batch that is
    not smaller, checkpointing that is not more on (nor on more layers), and a precision that is
    not lower."""
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
        elif key == "checkpoint_every_n_layers":
            if int(value) < int(other):  # recomputing more layers than `than` does
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


def find_unused_parameters_failure(params: Mapping[str, Any], past: Iterable[PastTrial]) -> PastTrial | None:
    """A trial that failed because the model has parameters without gradients while DDP did not
    search for them, when `params` does not search for them either under the same graph setting
    (``ddp_static_graph`` lets DDP handle them itself, so it decides separately)."""
    if params.get("ddp_find_unused_parameters") is not False:
        return None
    for trial in past:
        same_graph = trial.params.get("ddp_static_graph") == params.get("ddp_static_graph")
        if trial.reason == UNUSED_PARAMETERS and same_graph:
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
    ``("unused_parameters_known", trial)`` (DDP without the unused-parameter search, on a model
    that failed that way in that trial), ``("oom_predicted", trial)`` (it needs at least the memory
    of that trial, which did not fit),
    ``("over_estimate", None)`` (its memory estimate is clearly over the cap, `clearly_over`), or
    None: train it. `estimate_bytes` is called only when the cheaper checks pass.

    A running twin makes this trial yield whichever of the two started first: two proposals racing
    may both yield (cheap), but never both train."""
    duplicate = find_duplicate(params, past)
    if duplicate is not None:
        return DUPLICATE, duplicate
    twin = next((t for t in running if dict(t.params) == dict(params)), None)
    if twin is not None:
        return DUPLICATE_RUNNING, twin
    unused = find_unused_parameters_failure(params, past)
    if unused is not None:
        return UNUSED_PARAMETERS_KNOWN, unused
    dominating = find_dominating_oom(params, past)
    if dominating is not None:
        return OOM_PREDICTED, dominating
    if cap_bytes is None:
        estimate_bytes()  # still made: it is stored with the trial and compared with its peak
        return None
    estimate = estimate_bytes()
    if estimate is not None and clearly_over(estimate, cap_bytes):
        return OVER_ESTIMATE, None
    return None
