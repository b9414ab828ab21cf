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

import functools
import itertools
import math
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import optuna
import torch
from accelerate.state import AcceleratorState
from accelerate.utils.memory import release_memory
from optuna.trial import FrozenTrial
from transformers import Trainer, TrainerCallback
from transformers.trainer_callback import PrinterCallback
from transformers.trainer_utils import HPSearchBackend

from autotune.measure.callback import ScreenedOut, ThroughputCallback
from autotune.measure.deadline import step_deadlines
from autotune.measure.estimate import SAFETY_MARGIN, MemoryEstimate, fitting_rungs, relative_error
from autotune.measure.estimator import MemoryEstimator
from autotune.measure.flops import flops_per_token, matmul_precision, mfu, model_shape
from autotune.measure.memory import release_device_memory
from autotune.measure.ranks import distributed, from_rank_zero, gather, is_rank_zero
from autotune.plan.resolved import Plan, base_training_args, trial_world_size
from autotune.progress import Reporter, TrialSummary
from autotune.space import SearchSpace, precision_of
from autotune.space.defaults import tf32_matmuls, training_arguments
from autotune.space.knobs import Value, data_choices, trial_kwargs
from autotune.study.objective import compile_s, loss_delta, loss_diverged, run_tokens, score
from autotune.study.outcomes import (
    LOSS_DIVERGED,
    OVER_MEMORY_CAP,
    TrialOutcome,
    fail_running_trial,
    memory_violation,
    record_outcome,
)
from autotune.study.owner import OWNER_ATTR, this_process
from autotune.trial.compile_cache import CompileMeter, cold_compile_s, compile_key, study_compile_cache
from autotune.trial.errors import (
    AGREED_ENDS,
    NonFiniteLoss,
    NotTrained,
    PredictedOOM,
    Reused,
    Unavailable,
    failure_reason,
    one_line,
)
from autotune.trial.padding import padding_free_comparison
from autotune.trial.prechecks import agreed_precheck, precheck_trial
from autotune.workloads.user import UserWorkload


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
        # Trainer builds a model in __init__ and each trial builds its own: the first only has to
        # be of the right class and config (see `Workload.build_placeholder`).
        self._placeholder_wanted = True
        super().__init__(
            model_init=model_init,
            args=training_arguments(**self.base_args),
            train_dataset=self.workload.dataset(int(self.base_args.get("seed", 0))),
            data_collator=self.workload.collator(),
            callbacks=[measurement, *callbacks],
        )
        self._placeholder_wanted = False
        # Samples of a user's dataset differ in length: count each window's real tokens.
        measurement.count_tokens = self.workload.tokens_in
        # With tqdm off, Trainer prints its metrics dict; the reporter shows trials instead.
        self.remove_callback(PrinterCallback)

    @property
    def space(self) -> SearchSpace:
        """The plan's space, read each time: resolving the batch ladder replaces it."""
        return self.plan.space

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
        self._rebuild_args(_merged_args(self.base_args, args_kwargs))
        self.data_collator = self._collator(data_choices(values))
        # A sampler that reorders the data: count each step's tokens from its batches.
        self.measurement.count_batches = self.args.train_sampling_strategy != "sequential"
        return super().call_model_init(trial)

    def _collator(self, choices: dict[str, Value]) -> Any:
        """The trial's data collator: the workload's (padding each batch), or with ``padding_free``
        one flattened row per batch with position ids that restart at every sample."""
        if choices.get("padding_free"):
            from transformers import DataCollatorWithFlattening

            return DataCollatorWithFlattening(return_position_ids=True, separator_id=-100)
        return self.workload.collator()

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        lengths = self.workload.sample_lengths()
        if self.args.train_sampling_strategy != "group_by_length" or not lengths:
            return super()._get_train_sampler(train_dataset)
        from transformers.trainer_pt_utils import LengthGroupedSampler

        # The known lengths of the samples the trial can reach (the data is read in a loop), so the
        # sampler reads no sample to learn them and no epoch ends inside a measurement.
        group = self.args.train_batch_size * self.args.gradient_accumulation_steps
        reach = max(len(lengths), max(1, self.args.max_steps) * group * max(1, self.args.world_size))
        generator = torch.Generator()
        generator.manual_seed(int(self.args.seed))
        cycled = [lengths[i % len(lengths)] for i in range(reach)]
        return LengthGroupedSampler(group, lengths=cycled, generator=generator)

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> Any:
        batches, items = super().get_batch_samples(epoch_iterator, num_batches, device)
        if self.measurement.count_batches or self.workload.padded:
            self.measurement.add_step_tokens(
                sum(_real_tokens(batch) for batch in batches),
                sum(batch["input_ids"].numel() for batch in batches),
            )
        return batches, items

    def _agreed_precheck(self, trial: Any, values: dict[str, Value]) -> None:
        study = getattr(trial, "study", None) if isinstance(trial, optuna.Trial) else None

        def estimate(finished: Sequence[FrozenTrial]) -> MemoryEstimate | None:
            # The study keeps what earlier processes' probes measured: a kind is probed once a study.
            stored = dict(study.user_attrs.get(ACTIVATION_PROBES) or {}) if study is not None else {}
            self.estimator.learn_activations(stored)
            # and its finished trials what they measured
            self.estimator.learn_peaks((t.number, t.params, t.user_attrs) for t in finished)
            self._estimate = self._estimate_memory(values)
            known = self.estimator.known_activations()
            if study is not None and known.keys() - stored.keys():
                study.set_user_attr(ACTIVATION_PROBES, {**stored, **known})
            return self._estimate

        agreed_precheck(lambda: precheck_trial(trial, values, self.plan, self.base_args, estimate))

    def _estimate_memory(self, values: dict[str, Value]) -> MemoryEstimate | None:
        try:
            self.estimator.refresh_baseline()
            return self.estimator.estimate(values)
        except Exception:  # an estimate that cannot be made must not cost the trial
            return None

    def batch_ladder(self, candidates: Sequence[int]) -> tuple[list[int], dict[str, Any] | None]:
        """The leading `candidates` (larger batch sizes) that fit, and the probe that decided one
        (`fitting_rungs`): the memory estimate of the space's most frugal configuration at that
        batch (over its attention kernels, precisions and checkpointing choices) is under the
        memory cap, or without one under the device's memory less the estimate's safety margin;
        the first batch whose estimate is in doubt is measured once in a real forward and backward."""
        hardware = self.plan.hardware
        limit = self.plan.cap_bytes or int(hardware.memory_bytes / (1 + SAFETY_MARGIN))
        # Every combination of the values the estimate reads (not the whole grid: thousands of points).
        knobs = [name for name in _MEMORY_KNOBS if name in self.space.knobs]
        combos = itertools.product(*(self.space.knobs[name] for name in knobs))
        points = [dict(zip(knobs, values, strict=True)) for values in combos]

        frugal: dict[int, dict[str, Any]] = {}

        def smallest(batch: int) -> int | None:
            found: list[tuple[int, dict[str, Any]]] = []
            for point in points:
                values = {**point, "per_device_train_batch_size": batch}
                estimate = self._estimate_memory(values)
                if estimate is not None:
                    found.append((estimate.total_bytes, values))
            if not found:
                return None
            total, frugal[batch] = min(found, key=lambda pair: pair[0])
            return total

        def probe(batch: int) -> int | None:
            try:
                return self.estimator.probe(frugal[batch])
            except Exception:  # a probe that cannot run (out of memory, say) means it does not fit
                return None
            finally:
                release_device_memory()

        rungs, probed = fitting_rungs(candidates, smallest, limit, probe)
        if probed is None:
            return rungs, None
        return rungs, {**probed, "values": frugal[probed["batch"]], "limit_bytes": limit}

    def _rebuild_args(self, kwargs: dict[str, Any]) -> None:
        fresh = training_arguments(**kwargs)
        # In place: Trainer.train() holds a local reference to self.args across the trial.
        vars(self.args).clear()
        vars(self.args).update(vars(fresh))
        # The trial's Accelerator (made in _hp_search_setup) must be free to take a new mixed
        # precision; the process-level PartialState (devices, process group) is kept.
        AcceleratorState._reset_state(reset_partial_state=False)

    def _build_model(self, trial: Any) -> torch.nn.Module:
        if self._placeholder_wanted:
            placeholder = self.workload.build_placeholder(self.trial_model_kwargs)
            if placeholder is not None:
                return placeholder
        return self.workload.build_model(self.trial_model_kwargs)

    def _move_model_to_device(self, model: Any, device: Any) -> None:
        if any(parameter.is_meta for parameter in model.parameters()):
            return  # the placeholder of __init__: it has no storage to move, and is never trained
        super()._move_model_to_device(model, device)

    # -- running a trial ----------------------------------------------------------------------

    def train(  # type: ignore[override]
        self, resume_from_checkpoint: Any = None, trial: Any = None, **kwargs: Any
    ) -> Any:
        if trial is None:
            return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        # Screening compares with the study's best throughput as rank 0 reads it when the trial begins.
        self.measurement.screen_against = from_rank_zero(
            self._screen_reference(trial) if is_rank_zero() else None
        )
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
            message = _over_cap_message(attrs, self.plan.cap_bytes)
            self._finish(trial, TrialOutcome("PRUNED", OVER_MEMORY_CAP, message, attrs=attrs))
            raise optuna.TrialPruned(message)
        # Rank 0's curve and reading of the study decide, so every rank of a group ends alike.
        baseline = from_rank_zero(_study_baseline(trial) if is_rank_zero() else None) or {}
        delta = from_rank_zero(loss_delta(attrs.get("loss_curve") or [], baseline.get("loss_curve") or []))
        if delta is not None:
            attrs["loss_delta"] = delta if math.isfinite(delta) else None
        if loss_diverged(delta, self.plan.config.loss_tolerance):
            message = _diverged_message(delta, self.plan.config.loss_tolerance)
            self._finish(trial, TrialOutcome("PRUNED", LOSS_DIVERGED, message, attrs=attrs))
            raise optuna.TrialPruned(message)
        # Padding-free against the same configuration padded: the gain, or why there was none.
        compared = (
            padding_free_comparison(trial, self.trial_values, attrs["tokens_per_s"])
            if is_rank_zero()
            else None
        )
        attrs.update(from_rank_zero(compared) or {})
        config = self.plan.config
        self.objective: float | None = score(
            attrs, run_tokens(config.train_tokens, config.train_steps, baseline)
        )
        self._finish(trial, TrialOutcome("COMPLETE", attrs=attrs))
        return None

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        loss = super().training_step(*args, **kwargs)
        self.measurement.add_loss(loss)  # the trial's loss curve, step by step
        return loss

    def _measure(self, trial: Any) -> dict[str, Any]:
        """Train one trial through the stock loop and return its measurements."""
        if self._compiled_before:
            torch._dynamo.reset()  # drop the previous trial's graphs and guards
        compiling = CompileMeter()
        compiling.start()  # after the reset, which zeroes dynamo's timers
        try:
            # Screening may stop a step at its deadline (a hopeless step is not finished).
            with step_deadlines() as self.measurement.deadline:
                output = super().train(trial=trial)
        finally:
            self.measurement.deadline = None
            self._compiled_before = self._compiled_before or bool(self.args.torch_compile)
        attrs = {**self.measurement.result(), **compiling.read()}
        attrs["train_loss"] = output.training_loss
        cold = self._cold_compile_s(attrs)
        if cold is not None:
            attrs["compile_cold_s"] = cold
        ddp = _ddp_settings(self.model_wrapped)
        if ddp is not None:
            attrs["ddp"] = ddp
        applied = _strategy_applied(self)
        if applied is not None:
            attrs["data_parallel_applied"] = applied
            asked = self.trial_values.get("data_parallel")
            if asked is not None and asked != applied:
                # Measured, but not what it is labelled: a silent fallback must not win under a
                # strategy's name.
                raise RuntimeError(f"data_parallel={asked} was asked, but the Trainer ran {applied}")
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

    def _cold_compile_s(self, attrs: dict[str, Any]) -> float | None:
        """What this configuration took to compile cold (`compile_cache.cold_compile_s`): this
        trial's own one-off seconds when it compiled cold, the cold trial's when the cache served it."""
        if not is_rank_zero() or attrs.get("compile_cache") is None:
            return None
        identity = {
            "model": self.workload.name,
            "task": self.workload.task,
            "seq_len": self.workload.seq_len,
            "world_size": trial_world_size(self.plan.config),
            "values": self.trial_values,
        }
        folder = study_compile_cache(self.plan)
        return cold_compile_s(folder, compile_key(identity), compile_s(attrs), attrs["compile_cache"])

    def _screen_reference(self, trial: Any) -> float | None:
        """The best tokens/s of the study so far (its completed trials and its baseline), which a
        search trial is screened against; None where nothing is measured yet, for trials outside
        an optuna study, with screening off (`MeasureSettings.screen_ratio` 0: the promotion line
        is off too), or when the objective is the user's run time (a slower configuration
        without compilation can still win a short run)."""
        config = self.plan.config
        study = getattr(trial, "study", None)
        if not isinstance(trial, optuna.Trial) or study is None or config.measure.screen_ratio <= 0:
            return None
        if config.train_tokens is not None or config.train_steps is not None:
            return None
        rates = [
            float(t.user_attrs["tokens_per_s"])
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.user_attrs.get("tokens_per_s")
        ]
        baseline = study.user_attrs.get("baseline") or {}
        if baseline.get("tokens_per_s"):
            rates.append(float(baseline["tokens_per_s"]))
        return max(rates, default=None)

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
        self.measurement.screen_against = None  # a measurement takes its full window
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
        try:
            study = optuna.load_study(study_name=self.plan.study_name, storage=self.plan.storage)
            trial_id = study.trials[trial.number]._trial_id
            message = f"rank {torch.distributed.get_rank()}: {one_line(exc)}"
            fail_running_trial(study, trial_id, TrialOutcome.process_ended(failure_reason(exc), message))
        except Exception:
            pass

    def _reuse(self, trial: Any, past: FrozenTrial) -> None:
        attrs = {**past.user_attrs, "duplicate_of": past.number}
        attrs[OWNER_ATTR] = self.owner_attrs()  # who ran this trial, not the one it reuses
        message = f"same parameters as trial {past.number}: its result is reused"
        complete = past.state == optuna.trial.TrialState.COMPLETE
        reused = TrialOutcome(
            "COMPLETE" if complete else "PRUNED",
            attrs.pop("reason", None),
            message,
            trained=False,
            attrs=attrs,
            constraints=dict(past.constraints),
        )
        self._finish(trial, reused)
        if complete:
            self.objective = past.value
            return None
        raise optuna.TrialPruned(message)

    def _end_failed_trial(self, trial: Any, exc: BaseException) -> None:
        attrs: dict[str, Any] = {}
        if isinstance(exc, Unavailable):
            attrs["unavailable_knob"] = exc.knob
        if isinstance(exc, PredictedOOM):
            attrs["dominated_by"] = exc.number
        if isinstance(exc, ScreenedOut):
            attrs.update(exc.attrs(), setup_s=self.measurement.setup_s)
        if self.debug and not isinstance(exc, NotTrained):
            attrs["traceback"] = traceback.format_exc()[-2000:]
        if not isinstance(exc, NotTrained):  # a trial stopped by a pre-check allocated nothing
            self._release()
        skipped = isinstance(exc, NotTrained)
        # A pre-check's or screening's own sentence; an error's type and first line.
        message = str(exc) if skipped or isinstance(exc, ScreenedOut) else one_line(exc)
        self._finish(trial, TrialOutcome("PRUNED", failure_reason(exc), message, not skipped, attrs))

    def _release(self) -> None:
        # Stock Trainer skips release_memory when a trial raises: do it here, or memory creeps.
        self.model_wrapped, self.model = release_memory(self.model_wrapped, self.model)
        self.optimizer, self.lr_scheduler = None, None
        self.accelerator.clear()
        release_device_memory()

    def _finish(self, trial: Any, outcome: TrialOutcome) -> None:
        """Store a trial's outcome with what every trial records (applied arguments, model
        kwargs, estimate, MFU), then tell the reporter."""
        measured = outcome.attrs
        full = TrialOutcome(
            outcome.state,
            outcome.reason,
            outcome.message,
            outcome.trained,
            {
                **measured,
                "training_args": _applied_args(self.trial_values),
                "model_kwargs": dict(self.trial_model_kwargs),
                **self._estimate_attrs(measured.get("peak_memory_bytes")),
                **self._mfu_attrs(measured.get("tokens_per_s")),
            },
            outcome.constraints,
        )
        if isinstance(trial, optuna.Trial):
            attrs = record_outcome(trial, full, self.plan.cap_bytes)
        else:
            attrs = full.user_attrs(self.plan.cap_bytes)
        self.reporter.on_trial_end(
            TrialSummary(
                number=getattr(trial, "number", -1),
                params=dict(self.trial_values),
                state=full.state,
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
        if not hardware.cuda:
            return {"model_flops_per_token": per_token, "mfu": None}
        applied = matmul_precision(precision, tf32_matmuls())
        return {
            "model_flops_per_token": per_token,
            "matmul_precision": applied,
            "mfu": mfu(tokens_per_s, per_token, hardware.name, applied, devices=int(self.args.world_size)),
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


def _strategy_applied(trainer: Any) -> str | None:
    """How the ranks of the trial really shared the model (a ``data_parallel`` value), read from
    what the Trainer built; None in a single process."""
    if not distributed():
        return None
    wrapped = trainer.model_wrapped
    if getattr(trainer, "is_deepspeed_enabled", False):
        stage = wrapped.zero_optimization_stage() if hasattr(wrapped, "zero_optimization_stage") else 0
        return f"zero{stage}"
    from torch.distributed.fsdp import FSDPModule

    if isinstance(trainer.model, FSDPModule) or isinstance(wrapped, FSDPModule):
        plugin = getattr(trainer.accelerator.state, "fsdp_plugin", None)
        reshard = getattr(plugin, "reshard_after_forward", True)
        return "fsdp_full_shard" if reshard in (True, "FULL_SHARD") else "fsdp_shard_grad_op"
    if isinstance(wrapped, torch.nn.parallel.DistributedDataParallel):
        return "ddp"
    return "none"


def _ddp_settings(model: Any) -> dict[str, Any] | None:
    """What the trial's DistributedDataParallel wrapper really runs with (None: not wrapped), read
    back from the wrapper and its reducer: proof that the DDP knobs took effect."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return None
    return {
        "find_unused_parameters": bool(model.find_unused_parameters),
        "bucket_cap_mb": model.bucket_bytes_cap / 2**20,
        "static_graph": bool(model.static_graph),
        # torch 2.13 keeps broadcast_buffers as forward_sync_buffers; earlier versions by its name
        "broadcast_buffers": bool(
            getattr(model, "forward_sync_buffers", getattr(model, "broadcast_buffers", True))
        ),
    }


# The knobs the memory estimate reads besides the batch (`MemoryEstimator.estimate`).
_MEMORY_KNOBS = ("precision", "optim", "attn_implementation", "activation_checkpointing")


# The study's per-sample activation bytes by kind (`MemoryEstimator.known_activations`).
ACTIVATION_PROBES = "activation_probes"


def _study_baseline(trial: Any) -> dict[str, Any]:
    """The study's baseline user attr, read through an optuna trial ({} elsewhere: Ray, replays)."""
    study = getattr(trial, "study", None)
    if not isinstance(trial, optuna.Trial) or study is None:
        return {}
    return dict(study.user_attrs.get("baseline") or {})


def _diverged_message(delta: float | None, tolerance: float) -> str:
    if delta is None or not math.isfinite(delta):
        return "the loss is not finite where the baseline's is"
    return (
        f"the loss is {100 * delta:.1f}% worse than the baseline's at equal tokens "
        f"(tolerance {100 * tolerance:.0f}%)"
    )


def _over_cap_message(attrs: dict[str, Any], cap_bytes: int | None) -> str:
    peak = attrs.get("peak_memory_bytes") or 0
    return f"peak memory {peak / 2**20:.0f} MiB is over the cap of {(cap_bytes or 0) / 2**20:.0f} MiB"


def _real_tokens(batch: Any) -> Any:
    """The real (non-padding) tokens of one collated batch: its attention mask's ones, or every
    token of a batch without one (equal-length or flattened samples). A device tensor stays one."""
    mask = batch.get("attention_mask") if hasattr(batch, "get") else None
    if mask is not None:
        return mask.sum()
    return batch["input_ids"].numel()


def _merged_args(base: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    """The trial's `TrainingArguments` kwargs over the base config's; checkpointing kwargs merge
    (a trial's ``every_n_layers`` keeps the base config's own keys, such as ``use_reentrant``)."""
    merged = {**base, **trial}
    key = "activation_checkpointing_kwargs"
    if isinstance(base.get(key), dict) and isinstance(trial.get(key), dict):
        merged[key] = {**base[key], **trial[key]}
    return merged


def _applied_args(values: dict[str, Value]) -> dict[str, Any]:
    args_kwargs, _ = trial_kwargs(values)
    return args_kwargs


def build_trainer(
    plan: Plan,
    output_dir: str,
    reporter: Reporter,
    callbacks: Sequence[TrainerCallback] = (),
    debug: bool = False,
) -> AutotuneTrainer:
    """The `AutotuneTrainer` that runs a plan's trials (and benchmarks' measurements). For the
    Python API's own Trainer pieces (a `UserWorkload`): an instance of `trial_trainer_class` of the
    user's Trainer class, with their callbacks and their Trainer's attributes carried over."""
    user = plan.workload if isinstance(plan.workload, UserWorkload) else None
    trainer = trial_trainer_class(user.trainer_class if user is not None else None)(
        plan=plan,
        base_args=base_training_args(plan, output_dir),
        measurement=ThroughputCallback(plan.config.measure, plan.workload.seq_len, reporter),
        reporter=reporter,
        callbacks=[*(user.callbacks if user is not None else ()), *callbacks],
        debug=debug,
    )
    if user is not None:
        for name, value in user.trainer_attrs.items():
            setattr(trainer, name, value)
        trainer.callback_handler.processing_class = trainer.processing_class
    return trainer


@functools.cache
def trial_trainer_class(user_class: type | None) -> type[AutotuneTrainer]:
    """The class a trial's Trainer is for a user's Trainer class: `AutotuneTrainer` first (it
    applies and measures the trial), then the user's class, so that every method the user's class
    overrides (``compute_loss``, ``training_step``, ``create_optimizer``, ...) runs where the stock
    `Trainer`'s would. The user's ``__init__`` is not called (its arguments are unknown here): what it
    stored on the instance is set on the trial's Trainer instead (`UserWorkload.trainer_attrs`).

    Raises:
        TypeError: `user_class` is not a `Trainer` class.
    """
    if user_class is None or user_class is Trainer or issubclass(AutotuneTrainer, user_class):
        return AutotuneTrainer
    if not issubclass(user_class, Trainer):
        raise TypeError(f"{user_class.__name__} is not a transformers.Trainer class")

    def stock_init(self: Any, *args: Any, **kwargs: Any) -> None:
        Trainer.__init__(self, *args, **kwargs)

    skip_init = type(user_class.__name__, (user_class,), {"__init__": stock_init})
    return type(
        f"Autotune{user_class.__name__}",
        (AutotuneTrainer, skip_init),
        {"__module__": __name__, "__doc__": f"`AutotuneTrainer` over {user_class.__qualname__}."},
    )
