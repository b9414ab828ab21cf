"""How a trial ended, and the one place that writes it to the store.

Every path that ends a trial (the trial's own process, the supervisor that saw its worker die, a
Ray actor's watchdog, a resume that finds a dead owner) builds a `TrialOutcome` and hands it to
`record_outcome` (a trial still in the hands of optuna's loop, which then sets its state) or to
`fail_running_trial` (a trial whose process is gone). The machine-readable reasons are spelled
here only. No torch; optuna only where an outcome is written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from autotune.records import (
    TrialRecord,
    WholeRun,
    concluded,
    measured_record,
    trial_attrs,
    write_trial,
)

if TYPE_CHECKING:  # optuna is imported where outcomes are written, not where reasons are read
    import optuna

    from autotune.store.session import StudyStore

# -- reasons ------------------------------------------------------------------------------------
# Trials that trained and failed (the exception that ended them, see `autotune.trial.errors`).
OOM = "oom"
NAN_LOSS = "nan_loss"
TIMEOUT = "timeout"
MISSING_PACKAGE = "missing_package"
COMPILE_ERROR = "compile_error"
MISSING_KERNEL = "missing_kernel"
ERROR = "error"
UNUSED_PARAMETERS = "unused_parameters"  # DDP without find_unused_parameters, on a model that has some
OVER_MEMORY_CAP = "over_memory_cap"  # measured, but its peak is over the cap
LOSS_DIVERGED = "loss_diverged"  # measured, but its loss is worse than the baseline's at equal tokens
SCREENED_OUT = "screened_out"  # stopped early: even its fastest step was far slower than the best
# measured and feasible, but a step of its whole-run check (the longest batch, an evaluation step,
# a checkpoint save) went over the cap or ran out of memory (`autotune.driver.wholerun`)
WHOLE_RUN_OVER_CAP = "whole_run_over_cap"
# a disk filled up under it (its compile cache, its scratch folder): the machine's fault, not the
# configuration's, so a later proposal of the same values runs again (`RUN_AGAIN`)
DISK_FULL = "disk_full"
# Trials whose process ended under them (decided by whoever saw it end).
KILLED = "killed"  # a signal from outside (most often the kernel's OOM killer)
CRASHED = "crashed"  # a non-zero exit or a fatal signal
HUNG = "hung"  # the watchdog ended it
INTERRUPTED = "interrupted"  # its process stopped and nobody knows why: tried again
# A job (not a trial) whose process lost the store past its retry bound: its supervisor stops too.
STORE_LOST = "store_lost"
# Trials that needed no training: they cost nothing and do not spend the budget.
UNAVAILABLE = "unavailable"
DUPLICATE = "duplicate"
DUPLICATE_RUNNING = "duplicate_running"  # another worker is training the same parameters now
OVER_BUDGET = "over_budget"  # trials started before it (by other workers) hold the whole budget
OOM_PREDICTED = "oom_predicted"
OVER_ESTIMATE = "over_estimate"
# DDP without find_unused_parameters on a model that already failed that way (`UNUSED_PARAMETERS`)
UNUSED_PARAMETERS_KNOWN = "unused_parameters_known"
NOT_TRAINED_YET = "not_trained"  # a pre-check's base reason

NOT_TRAINED = (
    UNAVAILABLE,
    DUPLICATE,
    DUPLICATE_RUNNING,
    OVER_BUDGET,
    OOM_PREDICTED,
    OVER_ESTIMATE,
    UNUSED_PARAMETERS_KNOWN,
)
# Reasons that say nothing about the configuration: a trial with the same values runs again.
RUN_AGAIN = (INTERRUPTED, DISK_FULL)
# Reasons that mean "this configuration cannot run here (with this model)".
CANNOT_RUN = (UNAVAILABLE, UNUSED_PARAMETERS, UNUSED_PARAMETERS_KNOWN)
# Reasons that mean "this configuration does not fit in memory".
OUT_OF_MEMORY = (OOM, OVER_MEMORY_CAP, OOM_PREDICTED, OVER_ESTIMATE)


def memory_violation(peak_bytes: int | None, cap_bytes: int | None) -> float:
    """The memory constraint value: how far over the cap, as a fraction of it (0 when under)."""
    if cap_bytes is None or peak_bytes is None:
        return 0.0
    return max(0.0, (peak_bytes - cap_bytes) / cap_bytes)


def constraint_values(reason: str | None, peak_bytes: int | None, cap_bytes: int | None) -> dict[str, float]:
    """All constraint values of a trial that ended with `reason` (None: completed). optuna reads
    ``value <= 0`` as satisfied; TPE reads them from the storage, also after a resume."""
    memory = memory_violation(peak_bytes, cap_bytes)
    if reason in OUT_OF_MEMORY:
        memory = max(memory, 1.0)
    return {
        "runs_here": 1.0 if reason in CANNOT_RUN else 0.0,
        "finite_loss": 1.0 if reason == NAN_LOSS else 0.0,
        "memory": memory,
        "loss_parity": 1.0 if reason == LOSS_DIVERGED else 0.0,
    }


def with_whole_run(record: TrialRecord, check: WholeRun | None) -> TrialRecord:
    """A trial's record with its whole-run check (kept by the study: a finished trial's own attrs
    cannot change). A check it failed for memory makes it infeasible, reason `WHOLE_RUN_OVER_CAP`,
    the failed step in its message; a check it passed, or one that could not run, changes nothing
    else."""
    if check is None:
        return record
    record = replace(record, whole_run=check)
    if check.fits is not False or not record.is_feasible:
        return record
    failure = replace(record.failure, reason=WHOLE_RUN_OVER_CAP, message=f"whole-run check: {check.message}")
    return replace(record, feasible=False, failure=failure)


@dataclass(frozen=True)
class TrialOutcome:
    """How one trial ended.

    Attributes:
        state: ``"COMPLETE"`` (measured and feasible or not), ``"PRUNED"`` (skipped, reused,
            infeasible or failed inside its process) or ``"FAIL"`` (its process ended under it).
        reason: one of the reasons above; None for a completed trial.
        message: one human line about the reason.
        trained: whether it counts against the budget.
        record: everything else stored with it (measurements, estimate, applied arguments, ...);
            its number and params are the trial's where known.
        constraints: its optuna constraints; derived from the reason and peak when None.
    """

    state: str
    reason: str | None = None
    message: str = ""
    trained: bool = True
    record: TrialRecord = field(default_factory=lambda: measured_record({}))
    constraints: Mapping[str, float] | None = None

    def constraint_values(self, cap_bytes: int | None) -> dict[str, float]:
        if self.constraints is not None:
            return dict(self.constraints)
        return constraint_values(self.reason, self.record.peak_memory_bytes, cap_bytes)

    def stored(self, cap_bytes: int | None) -> TrialRecord:
        """The record that stores this outcome (``feasible`` derived from state and constraints)."""
        constraints = self.constraint_values(cap_bytes)
        return concluded(
            self.record,
            state=self.state,
            trained=self.trained,
            feasible=self.state == "COMPLETE" and all(v <= 0 for v in constraints.values()),
            reason=self.reason,
            message=self.message,
        )

    def user_attrs(self, cap_bytes: int | None) -> dict[str, Any]:
        """The user attrs that store this outcome (`stored`, flat)."""
        return trial_attrs(self.stored(cap_bytes))

    @classmethod
    def process_ended(
        cls, reason: str, message: str, trained: bool = True, ray_error: str | None = None
    ) -> TrialOutcome:
        """A trial whose process ended under it (killed, crashed, hung, interrupted); `ray_error`:
        what Ray said of it, when a Ray actor ran it."""
        record = measured_record({})
        if ray_error is not None:
            record = replace(record, failure=replace(record.failure, ray_error=ray_error))
        return cls("FAIL", reason, message, trained, record)


def record_outcome(trial: optuna.Trial, outcome: TrialOutcome, cap_bytes: int | None = None) -> TrialRecord:
    """Write the outcome of a trial that optuna's loop still holds (that loop then ends it, from
    the objective or `TrialPruned`): constraints first (TPE reads them only from COMPLETE and
    PRUNED trials, and they must be set before the trial ends), then its record
    (`autotune.records.write_trial`). Returns the record written."""
    if outcome.state != "FAIL":  # TPE never reads a failed trial's constraints
        for key, value in outcome.constraint_values(cap_bytes).items():
            trial.set_constraint(key, value)
    stored = outcome.stored(cap_bytes)
    write_trial(trial, stored)
    return stored


class _StoredTrial:
    """A trial known only by its id: enough of `optuna.Trial` for `record_outcome` of a FAIL."""

    def __init__(self, storage: Any, trial_id: int) -> None:
        self.storage = storage
        self._trial_id = trial_id

    def set_user_attr(self, key: str, value: Any) -> None:
        self.storage.set_trial_user_attr(self._trial_id, key, value)


def fail_running_trial(study: StudyStore, number: int, outcome: TrialOutcome) -> bool:
    """End RUNNING trial `number`, whose process is gone, with `outcome` (a ``FAIL``); False when
    it had already finished (its process, or another supervisor, got there first)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage = study.storage
    trial_id = study.trial_id(number)
    try:
        if storage.get_trial(trial_id).state != TrialState.RUNNING:
            return False
        record_outcome(_StoredTrial(storage, trial_id), outcome)  # type: ignore[arg-type]
        return bool(storage.set_trial_state_values(trial_id, state=TrialState.FAIL))
    except UpdateFinishedTrialError:
        return False


def fail_group_trial(storage: Any, study_name: str, number: int, outcome: TrialOutcome) -> None:
    """On a rank other than 0 of a DDP group (rank 0 records its own trials), fail the group's
    running trial `number` with this rank's `outcome`. Best effort: the supervisor or a resume
    fails it otherwise."""
    from autotune.store.session import StudyStore

    with contextlib.suppress(Exception):
        fail_running_trial(StudyStore.load(storage, study_name), number, outcome)
