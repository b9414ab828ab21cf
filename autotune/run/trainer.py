"""`AutotuneTrainer`: a `Trainer` whose every trial runs exactly the knobs it was given.

Stock `Trainer.hyperparameter_search` applies a trial's values with a plain `setattr` on
`TrainingArguments`, after `model_init` and after activation checkpointing was decided. Anything
`TrainingArguments.__post_init__` derives (autocast from bf16/fp16, compile from the backend, tf32)
is then silently ignored, and checkpointing follows the previous trial. So this class applies a
trial in `call_model_init`, the first thing `train()` does for a trial: it rebuilds the arguments
from the pristine base kwargs plus the trial's (so `__post_init__` runs), in place (so `train()`'s
local reference sees them), and resets the accelerator state (so the new mixed precision is taken
when `_hp_search_setup` creates the trial's `Accelerator`).

Before anything is built, a trial is checked: a combination that cannot run here, the same
parameters as a finished trial (its result is reused), or a configuration that needs at least the
memory of one that ran out of it, ends there. `train()` then turns the trial's measurement into
the objective and the trial's user attrs and constraints, and turns a failed or infeasible trial
into a recorded result (`optuna.TrialPruned` with a reason) instead of an aborted search.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import optuna
import torch
from accelerate.state import AcceleratorState
from accelerate.utils.memory import release_memory
from optuna.trial import FrozenTrial
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_callback import PrinterCallback
from transformers.trainer_utils import HPSearchBackend

from autotune.measure.callback import ThroughputCallback, TrialTimeout
from autotune.measure.estimate import SAFETY_MARGIN, MemoryEstimate, relative_error
from autotune.measure.estimator import MemoryEstimator
from autotune.measure.flops import flops_per_token, mfu, model_shape
from autotune.measure.memory import release_device_memory
from autotune.measure.ranks import distributed, from_rank_zero, gather, is_rank_zero
from autotune.progress import Reporter, TrialSummary
from autotune.run.feasibility import (
    OVER_MEMORY_CAP,
    constraint_values,
    memory_violation,
    precheck,
)
from autotune.run.plan import Plan, trial_world_size
from autotune.space import precision_of
from autotune.space.availability import combination_unavailable
from autotune.space.knobs import Value, trial_kwargs
from autotune.study.owner import OWNER_ATTR, this_process
from autotune.study.store import FINISHED, as_past


class NonFiniteLoss(RuntimeError):
    """The trial's training loss became NaN or infinite."""


class NotTrained(Exception):
    """A pre-check decided the trial needs no training. `reason` is one of `NOT_TRAINED`."""

    reason = "not_trained"


class SkippedOnRankZero(NotTrained):
    """Rank 0 of a DDP trial skipped it (its reason is recorded there)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Unavailable(NotTrained):
    """A knob value of the trial cannot run on this machine."""

    reason = "unavailable"

    def __init__(self, knob: str, why: str) -> None:
        super().__init__(f"{knob}: {why}")
        self.knob = knob


class Reused(NotTrained):
    """A finished trial has the same parameters: its result stands for this one."""

    reason = "duplicate"

    def __init__(self, past: FrozenTrial) -> None:
        super().__init__(f"same parameters as trial {past.number}")
        self.past = past


class RunningTwin(NotTrained):
    """Another process is training the same parameters right now."""

    reason = "duplicate_running"

    def __init__(self, number: int) -> None:
        super().__init__(f"trial {number} is training the same parameters now")
        self.number = number


class OverEstimate(NotTrained):
    """The configuration's memory estimate is clearly over the cap."""

    reason = "over_estimate"

    def __init__(self, estimate_bytes: int, cap_bytes: int) -> None:
        super().__init__(
            f"estimated {estimate_bytes / 2**20:.0f} MiB is more than {100 * SAFETY_MARGIN:.0f}% over "
            f"the cap of {cap_bytes / 2**20:.0f} MiB"
        )


class PredictedOOM(NotTrained):
    """A configuration needing no more memory than this one already ran out of it."""

    reason = "oom_predicted"

    def __init__(self, number: int) -> None:
        super().__init__(f"needs at least the memory of trial {number}, which did not fit")
        self.number = number


# Ends of a trial that every rank of a DDP trial reaches together (agreed pre-checks, the agreed
# timeout, a loss gathered from all ranks): the group goes on with the next trial.
AGREED_ENDS = (NotTrained, TrialTimeout, NonFiniteLoss)


def failure_reason(exc: BaseException) -> str:
    """A machine-readable reason for an exception that ended a trial."""
    text = str(exc)
    if isinstance(exc, NotTrained):
        return exc.reason
    if isinstance(exc, torch.OutOfMemoryError | MemoryError) or "out of memory" in text.lower():
        return "oom"
    if "DefaultCPUAllocator: can't allocate memory" in text:
        return "oom"
    if isinstance(exc, NonFiniteLoss):
        return "nan_loss"
    if isinstance(exc, TrialTimeout):
        return "timeout"
    if isinstance(exc, ModuleNotFoundError | ImportError):
        return "missing_package"
    module = type(exc).__module__
    if module.startswith(("torch._dynamo", "torch._inductor")) or "CompilerFailed" in type(exc).__name__:
        return "compile_error"
    if "no kernel image" in text or "not implemented for" in text:
        return "missing_kernel"
    return "error"


class AutotuneTrainer(Trainer):
    """A `Trainer` for throughput trials (see the module docstring).

    Args:
        plan: the resolved run: the space samples each trial's knob values, the workload builds
            its model and owns the data, hardware and model support decide what can run.
        base_args: `TrainingArguments` kwargs every trial starts from.
        measurement: the callback that times steps and measures peak memory.
        reporter: receives trial start and end events.
        callbacks: more Trainer callbacks (tests use them as probes).
        debug: keep tracebacks of failed trials.
    """

    def __init__(
        self,
        *,
        plan: Plan,
        base_args: dict[str, Any],
        measurement: ThroughputCallback,
        reporter: Reporter,
        callbacks: Sequence[TrainerCallback] = (),
        debug: bool = False,
    ) -> None:
        self.plan = plan
        self.workload = plan.workload
        self.space = plan.space
        self.base_args = dict(base_args)
        self.measurement = measurement
        self.reporter = reporter
        self.debug = debug
        self.trial_values: dict[str, Value] = {}
        self.trial_model_kwargs: dict[str, Any] = {}
        self._compiled_before = False
        self.estimator = MemoryEstimator(
            plan.workload, plan.hardware.device, plan.base_args, trial_world_size(plan.config)
        )
        self._estimate: MemoryEstimate | None = None
        self._verbatim_values: dict[str, Value] | None = None
        self.owner = this_process()
        self.job_id: str | None = None  # the worker job (set by workers): how a supervisor finds the trial
        model_init: Callable[..., Any] = self._build_model
        super().__init__(
            model_init=model_init,
            args=TrainingArguments(**self.base_args),
            train_dataset=self.workload.dataset(int(self.base_args.get("seed", 0))),
            data_collator=self.workload.collator(),
            callbacks=[measurement, *callbacks],
        )
        # Samples of a user's dataset differ in length: count each window's real tokens.
        measurement.count_tokens = self.workload.tokens_in
        # With tqdm off, Trainer prints its metrics dict; the reporter shows trials instead.
        self.remove_callback(PrinterCallback)

    def owner_attrs(self) -> dict[str, Any]:
        """The ``worker`` user attr of the trials this process runs."""
        return {**self.owner.to_dict(), "job": self.job_id}

    # -- applying a trial ---------------------------------------------------------------------

    def trial_values_of(self, trial: Any) -> dict[str, Value]:
        """The knob values of a trial: sampled (optuna), replayed (`FixedTrial`) or given (Ray dict)."""
        if trial is None:
            return {}
        if self._verbatim_values is not None:
            return dict(self._verbatim_values)
        if isinstance(trial, dict):
            return self.space.complete(trial)
        return self.space.suggest(trial)

    def call_model_init(self, trial: Any = None) -> torch.nn.Module:
        self._estimate = None
        values = self.trial_values_of(trial)
        args_kwargs, model_kwargs = trial_kwargs(values)
        self.trial_values, self.trial_model_kwargs = values, model_kwargs
        if isinstance(trial, optuna.Trial):  # who runs it: a trial of a dead process is failed at once
            trial.set_user_attr(OWNER_ATTR, self.owner_attrs())
        if trial is not None:
            self.reporter.on_trial_start(getattr(trial, "number", -1), values)
            self._agreed_precheck(trial, values)  # before any model, args or accelerator work
        self._rebuild_args({**self.base_args, **args_kwargs})
        return super().call_model_init(trial)

    def _agreed_precheck(self, trial: Any, values: dict[str, Value]) -> None:
        """The pre-checks, decided on rank 0 (which alone sees the study) and taken by every rank
        of a DDP trial, so that all skip together instead of waiting for each other."""
        skip: NotTrained | None = None
        if is_rank_zero():
            try:
                self._precheck(trial, values)
            except NotTrained as exc:
                skip = exc
        decided = from_rank_zero((skip.reason, str(skip)) if skip is not None else None)
        if skip is not None:
            raise skip
        if decided is not None:
            raise SkippedOnRankZero(*decided)

    def _precheck(self, trial: Any, values: dict[str, Value]) -> None:
        # A space that does not search precision trains at the base config's.
        checked = {"precision": precision_of(self.base_args), **values}
        blocked = combination_unavailable(checked, self.plan.hardware, self.plan.model)
        if blocked is not None:
            raise Unavailable(*blocked)
        if not isinstance(trial, optuna.Trial):
            return
        trials = trial.study.get_trials(deepcopy=False, states=(*FINISHED, optuna.trial.TrialState.RUNNING))
        others = [t for t in trials if t.number != trial.number]
        finished = [t for t in others if t.state in FINISHED]
        running = [as_past(t) for t in others if t.state == optuna.trial.TrialState.RUNNING]

        def estimate_bytes() -> int | None:
            self._estimate = self._estimate_memory(values)
            return self._estimate.total_bytes if self._estimate is not None else None

        cap = self.plan.cap_bytes
        skip = precheck(trial.params, [as_past(t) for t in finished], estimate_bytes, cap, running)
        if skip is None:
            return
        reason, past = skip
        if reason == "duplicate" and past is not None:
            raise Reused(next(t for t in finished if t.number == past.number))
        if reason == "oom_predicted" and past is not None:
            raise PredictedOOM(past.number)
        if reason == "duplicate_running" and past is not None:
            raise RunningTwin(past.number)
        assert self._estimate is not None and cap is not None  # "over_estimate" needs both
        raise OverEstimate(self._estimate.total_bytes, cap)

    def _estimate_memory(self, values: dict[str, Value]) -> MemoryEstimate | None:
        try:
            self.estimator.refresh_baseline()
            return self.estimator.estimate(values)
        except Exception:  # an estimate that cannot be made must not cost the trial
            return None

    def _rebuild_args(self, kwargs: dict[str, Any]) -> None:
        fresh = TrainingArguments(**kwargs)
        # In place: Trainer.train() holds a local reference to self.args across the trial.
        vars(self.args).clear()
        vars(self.args).update(vars(fresh))
        # The trial's Accelerator (made in _hp_search_setup) must be free to take a new mixed
        # precision; the process-level PartialState (devices, process group) is kept.
        AcceleratorState._reset_state(reset_partial_state=False)

    def _build_model(self, trial: Any) -> torch.nn.Module:
        return self.workload.build_model(self.trial_model_kwargs)

    # -- running a trial ----------------------------------------------------------------------

    def train(  # type: ignore[override]
        self, resume_from_checkpoint: Any = None, trial: Any = None, **kwargs: Any
    ) -> Any:
        if trial is None:
            return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        try:
            attrs = self._measure(trial)
        except Reused as reuse:
            return self._reuse(trial, reuse.past)
        except Exception as exc:
            self._end_failed_trial(trial, exc)
            if distributed() and not isinstance(exc, AGREED_ENDS):
                # Only this rank failed: the others wait for it in a collective. Record the trial
                # with this rank's reason, then end the process: torchrun ends the group.
                self._record_rank_failure(trial, exc)
                raise
            raise optuna.TrialPruned(f"{failure_reason(exc)}: {one_line(exc)}") from exc
        over = memory_violation(attrs.get("peak_memory_bytes"), self.plan.cap_bytes)
        if over > 0:
            attrs.update(reason=OVER_MEMORY_CAP, message=_over_cap_message(attrs, self.plan.cap_bytes))
            self._finish(trial, "PRUNED", attrs)
            raise optuna.TrialPruned(attrs["message"])
        self.objective: float | None = attrs["tokens_per_s"]
        self._finish(trial, "COMPLETE", attrs)
        return None

    def _measure(self, trial: Any) -> dict[str, Any]:
        """Train one trial through the stock loop and return its measurements."""
        if self._compiled_before:
            torch._dynamo.reset()  # drop the previous trial's graphs and guards
        try:
            output = super().train(trial=trial)
        finally:
            self._compiled_before = self._compiled_before or bool(self.args.torch_compile)
        attrs = self.measurement.result()
        attrs["train_loss"] = output.training_loss
        # Tokens/s is already the whole job's (every rank steps together; samples per step count
        # the world size). Peak memory is the largest rank's, and every rank's is kept.
        everyone = gather((attrs.get("peak_memory_bytes"), output.training_loss))
        if len(everyone) > 1:
            peaks = [int(peak or 0) for peak, _ in everyone]
            attrs.update(world_size=len(everyone), rank_peak_memory_bytes=peaks, peak_memory_bytes=max(peaks))
        losses = [loss for _, loss in everyone]
        if not all(math.isfinite(loss) for loss in losses):
            raise NonFiniteLoss(f"training loss became {next(x for x in losses if not math.isfinite(x))}")
        return attrs

    def measure_config(self, params: dict[str, Value], number: int, verbatim: bool = False) -> dict[str, Any]:
        """Measure a configuration outside the search: a finalist again (its params are a point of
        the space), or with `verbatim` any knob values at all (the baseline).

        Raises:
            Exception: whatever training raised; memory is released either way.
        """
        # As inside hyperparameter_search, so that _hp_search_setup makes the trial's Accelerator.
        self.hp_search_backend = HPSearchBackend.OPTUNA  # type: ignore[assignment]
        self.hp_space = self.space.hp_space
        if verbatim:
            self._verbatim_values = dict(params)
            self.hp_space = lambda trial: {}
        try:
            return self._measure(optuna.trial.FixedTrial({} if verbatim else params, number))
        finally:
            self.hp_search_backend = None
            self._verbatim_values = None
            self._release()

    def _record_rank_failure(self, trial: Any, exc: BaseException) -> None:
        """On a rank other than 0 (which records its own trials), fail the group's running trial
        with this rank's reason. Best effort: the supervisor or a resume fails it otherwise."""
        if is_rank_zero() or getattr(trial, "number", None) is None:
            return
        import torch.distributed as dist

        from autotune.study.store import fail_running_trial

        try:
            study = optuna.load_study(study_name=self.plan.study_name, storage=self.plan.storage)
            trial_id = study.trials[trial.number]._trial_id
            message = f"rank {dist.get_rank()}: {one_line(exc)}"
            fail_running_trial(study, trial_id, failure_reason(exc), message, trained=True)
        except Exception:
            pass

    def _reuse(self, trial: Any, past: FrozenTrial) -> None:
        attrs = {**past.user_attrs, "duplicate_of": past.number, "trained": False}
        attrs[OWNER_ATTR] = self.owner_attrs()  # who ran this trial, not the one it reuses
        attrs["message"] = f"same parameters as trial {past.number}: its result is reused"
        constraints = dict(past.constraints)
        if past.state == optuna.trial.TrialState.COMPLETE:
            self.objective = past.value
            self._finish(trial, "COMPLETE", attrs, constraints)
            return None
        self._finish(trial, "PRUNED", attrs, constraints)
        raise optuna.TrialPruned(attrs["message"])

    def _end_failed_trial(self, trial: Any, exc: BaseException) -> None:
        attrs: dict[str, Any] = {"reason": failure_reason(exc), "message": one_line(exc)}
        if isinstance(exc, NotTrained):
            attrs["message"] = str(exc)
            attrs["trained"] = False
        if isinstance(exc, Unavailable):
            attrs["unavailable_knob"] = exc.knob
        if isinstance(exc, PredictedOOM):
            attrs["dominated_by"] = exc.number
        if self.debug and not isinstance(exc, NotTrained):
            attrs["traceback"] = traceback.format_exc()[-2000:]
        if not isinstance(exc, NotTrained):  # a trial stopped by a pre-check allocated nothing
            self._release()
        self._finish(trial, "PRUNED", attrs)

    def _release(self) -> None:
        # Stock Trainer skips release_memory when a trial raises: do it here, or memory creeps.
        self.model_wrapped, self.model = release_memory(self.model_wrapped, self.model)
        self.optimizer, self.lr_scheduler = None, None
        self.accelerator.clear()
        release_device_memory()

    def _finish(
        self, trial: Any, state: str, attrs: dict[str, Any], constraints: dict[str, float] | None = None
    ) -> None:
        """Store a trial's outcome: constraints first (TPE reads them only from COMPLETE and
        PRUNED trials, and they must be set before pruning), then user attrs, then tell the reporter."""
        attrs = {
            "trained": True,
            **attrs,
            "training_args": _applied_args(self.trial_values),
            "model_kwargs": dict(self.trial_model_kwargs),
            **self._estimate_attrs(attrs.get("peak_memory_bytes")),
            **self._mfu_attrs(attrs.get("tokens_per_s")),
        }
        if constraints is None:
            constraints = constraint_values(
                attrs.get("reason"), attrs.get("peak_memory_bytes"), self.plan.cap_bytes
            )
        attrs["feasible"] = state == "COMPLETE" and all(v <= 0 for v in constraints.values())
        if isinstance(trial, optuna.Trial):
            for key, value in constraints.items():
                trial.set_constraint(key, value)
            for key, value in attrs.items():
                trial.set_user_attr(key, value)
        self.reporter.on_trial_end(
            TrialSummary(
                number=getattr(trial, "number", -1),
                params=dict(self.trial_values),
                state=state,
                tokens_per_s=attrs.get("tokens_per_s"),
                samples_per_s=attrs.get("samples_per_s"),
                peak_memory_bytes=attrs.get("peak_memory_bytes"),
                rel_ci_halfwidth=attrs.get("rel_ci_halfwidth"),
                reason=attrs.get("reason"),
                message=attrs.get("message"),
                attrs=attrs,
            )
        )

    def _mfu_attrs(self, tokens_per_s: float | None) -> dict[str, Any]:
        if tokens_per_s is None:
            return {}
        try:
            layers, hidden = model_shape(self.workload.config)
            per_token = flops_per_token(self.estimator.n_params, layers, hidden, self.workload.seq_len)
        except Exception:  # a model whose parameters cannot be counted gets no MFU
            return {}
        hardware = self.plan.hardware
        precision = str(self.trial_values.get("precision", precision_of(self.base_args)))
        device = hardware.name if hardware.cuda else ""
        return {
            "model_flops_per_token": per_token,
            "mfu": mfu(tokens_per_s, per_token, device, precision, devices=int(self.args.world_size)),
        }

    def _estimate_attrs(self, peak_bytes: int | None) -> dict[str, Any]:
        if self._estimate is None:
            return {}
        attrs: dict[str, Any] = {
            "memory_estimate_bytes": self._estimate.total_bytes,
            "memory_estimate": self._estimate.to_dict(),
        }
        if peak_bytes:
            attrs["memory_estimate_error"] = relative_error(self._estimate.total_bytes, peak_bytes)
        return attrs


def _over_cap_message(attrs: dict[str, Any], cap_bytes: int | None) -> str:
    peak = attrs.get("peak_memory_bytes") or 0
    return f"peak memory {peak / 2**20:.0f} MiB is over the cap of {(cap_bytes or 0) / 2**20:.0f} MiB"


def _applied_args(values: dict[str, Value]) -> dict[str, Any]:
    args_kwargs, _ = trial_kwargs(values)
    return args_kwargs


def one_line(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line that says something."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if text.endswith(":") and len(lines) > 1:  # "backend='inductor' raised:" says nothing alone
        text = f"{text} {lines[1]}"
    return f"{type(exc).__name__}: {text}"[:300]
