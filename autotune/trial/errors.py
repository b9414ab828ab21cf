"""Why a trial ended early: the exceptions a trial raises on purpose, and the reason of any
exception that ended one (the reasons themselves are spelled in `autotune.store.outcomes`)."""

from __future__ import annotations

from dataclasses import replace

import torch

from autotune.disk import is_disk_full
from autotune.errors import AutotuneError, StoreError
from autotune.measure.callback import TrialTimeout
from autotune.measure.memory_model import SAFETY_MARGIN
from autotune.measure.screen import ScreenedOut
from autotune.records import TrialRecord, measured_record
from autotune.store import outcomes


class NonFiniteLoss(RuntimeError):
    """The trial's training loss became NaN or infinite."""


class NotTrained(Exception):
    """A pre-check decided the trial needs no training. `reason`: one of `outcomes.NOT_TRAINED`."""

    reason = outcomes.NOT_TRAINED_YET


class SkippedOnRankZero(NotTrained):
    """Rank 0 of a DDP trial skipped it (its reason is recorded there)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Unavailable(NotTrained):
    """A knob value of the trial cannot run on this machine."""

    reason = outcomes.UNAVAILABLE

    def __init__(self, knob: str, why: str) -> None:
        super().__init__(f"{knob}: {why}")
        self.knob = knob


class Reused(NotTrained):
    """A finished trial has the same parameters: its result stands for this one."""

    reason = outcomes.DUPLICATE

    def __init__(self, past: TrialRecord) -> None:
        super().__init__(f"same parameters as trial {past.number}")
        self.past = past


class RunningTwin(NotTrained):
    """Another process is training the same parameters right now."""

    reason = outcomes.DUPLICATE_RUNNING

    def __init__(self, number: int) -> None:
        super().__init__(f"trial {number} is training the same parameters now")
        self.number = number


class OverBudget(NotTrained):
    """Trials that started before this one (other workers') hold the study's whole budget: two
    workers that both saw room for the last trial do not both train."""

    reason = outcomes.OVER_BUDGET

    def __init__(self, budget: int) -> None:
        super().__init__(f"the trials started before it hold the study's budget of {budget}")
        self.budget = budget


class OverEstimate(NotTrained):
    """The configuration's memory estimate is clearly over the cap."""

    reason = outcomes.OVER_ESTIMATE

    def __init__(self, estimate_bytes: int, cap_bytes: int) -> None:
        super().__init__(
            f"estimated {estimate_bytes / 2**20:.0f} MiB is more than {100 * SAFETY_MARGIN:.0f}% over "
            f"the cap of {cap_bytes / 2**20:.0f} MiB"
        )


class PredictedOOM(NotTrained):
    """A configuration needing no more memory than this one already ran out of it."""

    reason = outcomes.OOM_PREDICTED

    def __init__(self, number: int) -> None:
        super().__init__(f"needs at least the memory of trial {number}, which did not fit")
        self.number = number


class UnusedParametersKnown(NotTrained):
    """DDP without its search for unused parameters, on a model that already failed that way."""

    reason = outcomes.UNUSED_PARAMETERS_KNOWN

    def __init__(self, number: int) -> None:
        super().__init__(
            f"the model has parameters without gradients (trial {number} failed without "
            "ddp_find_unused_parameters): it must stay on"
        )
        self.number = number


# Ends of a trial that every rank of a DDP trial reaches together (agreed pre-checks, the agreed
# timeout, a loss gathered from all ranks): the group goes on with the next trial.
AGREED_ENDS = (NotTrained, TrialTimeout, NonFiniteLoss, ScreenedOut)


def failure_reason(exc: BaseException) -> str:
    """A machine-readable reason for an exception that ended a trial."""
    text = str(exc)
    if isinstance(exc, NotTrained):
        return exc.reason
    if isinstance(exc, StoreError):
        return outcomes.STORE_LOST
    if is_disk_full(exc):  # before the compile error a full compile cache also is
        return outcomes.DISK_FULL
    if isinstance(exc, torch.OutOfMemoryError | MemoryError) or "out of memory" in text.lower():
        return outcomes.OOM
    if "DefaultCPUAllocator: can't allocate memory" in text:
        return outcomes.OOM
    if isinstance(exc, NonFiniteLoss):
        return outcomes.NAN_LOSS
    if isinstance(exc, TrialTimeout):
        return outcomes.TIMEOUT
    if isinstance(exc, ScreenedOut):
        return outcomes.SCREENED_OUT
    if isinstance(exc, ModuleNotFoundError | ImportError):
        return outcomes.MISSING_PACKAGE
    module = type(exc).__module__
    if module.startswith(("torch._dynamo", "torch._inductor")) or "CompilerFailed" in type(exc).__name__:
        return outcomes.COMPILE_ERROR
    if "parameters that were not used in producing loss" in text:
        return outcomes.UNUSED_PARAMETERS  # ddp_find_unused_parameters off, on a model that needs it
    if "no kernel image" in text or "not implemented for" in text:
        return outcomes.MISSING_KERNEL
    return outcomes.ERROR


def failure_record(exc: BaseException, setup_s: float | None, traceback_text: str | None) -> TrialRecord:
    """What a trial that `exc` ended records beside its reason: the knob that cannot run here, the
    trial that made it pointless, a screened-out trial's steps and its set-up, and the traceback
    (`traceback_text`, with ``--debug``)."""
    record = measured_record(exc.attrs() if isinstance(exc, ScreenedOut) else {})
    if isinstance(exc, ScreenedOut):
        record = replace(record, measurement=replace(record.measurement, setup_s=setup_s))
    failure = replace(
        record.failure,
        unavailable_knob=exc.knob if isinstance(exc, Unavailable) else None,
        traceback=traceback_text,
    )
    return replace(
        record, dominated_by=exc.number if isinstance(exc, PredictedOOM) else None, failure=failure
    )


def one_line(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line that says something (an
    `AutotuneError`: its own one line, message and hint, which a supervisor may show as is)."""
    if isinstance(exc, AutotuneError):
        return str(exc)
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if text.endswith(":") and len(lines) > 1:  # "backend='inductor' raised:" says nothing alone
        text = f"{text} {lines[1]}"
    return f"{type(exc).__name__}: {text}"[:300]
