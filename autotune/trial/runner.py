"""`TrialRunner`: a `Trainer` whose every trial runs exactly the knobs it was given.

A trial is applied in `call_model_init`, the first thing `train()` does for a trial
(`autotune.trial.apply`: its arguments rebuilt, its collator and sampler chosen). Before anything is
built, a trial is checked (`autotune.trial.prechecks`, with its memory estimate from
`autotune.trial.memory`): a combination that cannot run here, the same parameters as a finished
trial (its result is reused), or a configuration that needs at least the memory of one that ran
out of it, ends there. `train()` then measures the trial through the stock loop, completes its
record (`autotune.trial.measured`), has it judged (`autotune.trial.judge`) and hands the outcome
to the one writer (`autotune.store.outcomes.record_outcome`); a failed or infeasible trial becomes
a recorded result (`autotune.store.asked.TrialPruned` with a reason) instead of an aborted search. The jobs
outside the search (a measurement of given values, a whole-run check) are
`autotune.trial.trainer.AutotuneTrainer`'s.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from accelerate.utils.memory import release_memory
from transformers import Trainer, TrainerCallback
from transformers.trainer_callback import PrinterCallback

from autotune.disk import disk_full_line
from autotune.measure.callback import ThroughputCallback
from autotune.measure.deadline import step_deadlines
from autotune.measure.estimator import MemoryEstimator
from autotune.measure.memory_model import LadderProbe, MemoryEstimate
from autotune.measure.peak import release_device_memory
from autotune.measure.ranks import distributed, from_rank_zero, gather, is_rank_zero
from autotune.measure.screen import ScreenedOut
from autotune.plan.resolved import Plan, trial_world_size
from autotune.progress import Reporter
from autotune.records import (
    Baseline,
    StudyRecord,
    TrialRecord,
    measured_record,
    read_study,
    write_trial,
)
from autotune.space import SearchSpace, precision_of
from autotune.space.defaults import training_arguments
from autotune.space.knobs import Value
from autotune.space.mapping import data_choices, fp8_trial, trial_kwargs
from autotune.store.asked import TrialPruned, is_study_trial, study_of
from autotune.store.objective import run_tokens, score
from autotune.store.outcomes import DISK_FULL, TrialOutcome, fail_group_trial, record_outcome
from autotune.store.owner import this_process
from autotune.store.rdb import RetryingRDBStorage
from autotune.store.semantics import loss_compared, study_changes
from autotune.trial import apply, memory, sft, whole_run_steps
from autotune.trial.compile_cache import CompileMeter, study_compile_cache
from autotune.trial.errors import (
    AGREED_ENDS,
    NonFiniteLoss,
    NotTrained,
    Reused,
    failure_reason,
    failure_record,
    one_line,
)
from autotune.trial.judge import Verdict, judge, non_finite_loss
from autotune.trial.measured import (
    cold_compile,
    screen_reference,
    with_model_mfu,
    with_parameters,
    with_rank_peaks,
)
from autotune.trial.padding import padding_free_comparison
from autotune.trial.patches import undone_kernel_patches
from autotune.trial.prechecks import agreed_precheck, precheck_trial
from autotune.workloads.user import UserWorkload


class TrialRunner(Trainer):
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
        # The study's budget of measured trials while a trial job runs (`Job.budget`): the pre-check
        # yields to trials other workers started first once they hold it.
        self.trial_budget: int | None = None
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
        # while a whole-run check runs: its steps, and the data it draws the longest samples from
        self._whole_run: whole_run_steps.WholeRunSteps | None = None
        self._full_data: Any = None
        model_init: Callable[..., Any] = self._build_model
        # Trainer builds a model in __init__ and each trial builds its own: the first only has to
        # be of the right class and config (see `Workload.build_placeholder`).
        self._placeholder_wanted = True
        super().__init__(
            model_init=model_init,
            args=training_arguments(self.workload.args_class, **self.base_args),
            train_dataset=self.workload.dataset(int(self.base_args.get("seed", 0))),
            data_collator=self.workload.collator(),
            callbacks=[measurement, *callbacks],
        )
        self._placeholder_wanted = False
        # Samples of a user's dataset differ in length: count each window's real tokens.
        measurement.count_tokens = self.workload.tokens_in
        # With tqdm off, Trainer prints its metrics dict; the reporter shows trials instead.
        self.remove_callback(PrinterCallback)
        # Trainer leaves the division of the loss by the accumulation steps to any model whose
        # forward takes **kwargs, believing it averages over num_items_in_batch. Some do not
        # (BertForMaskedLM builds its own CrossEntropyLoss): their step loss would be the sum of
        # the micro-batches' means, and loss parity would judge 4 x 2 twice as bad as 8 x 1.
        if self.model_accepts_loss_kwargs and not apply.averages_over_items(self.model):
            self.model_accepts_loss_kwargs = False

    @property
    def space(self) -> SearchSpace:
        """The plan's space, read each time: resolving the batch ladder replaces it."""
        return self.plan.space

    def owner_attrs(self) -> dict[str, Any]:
        """The owner (`TrialRecord.owner`) of the trials this process runs, with the GPUs it was
        given (``devices``: its ``CUDA_VISIBLE_DEVICES``, a worker's slot; None where it was given
        none, as on a CPU)."""
        return {**self.owner.to_dict(), "job": self.job_id, "devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    # -- applying a trial ---------------------------------------------------------------------

    def trial_values_of(self, trial: Any) -> dict[str, Value]:
        """The knob values of a trial: sampled (the study's sampler), replayed (`fixed_trial`) or
        given (a Ray dict)."""
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
        if is_study_trial(trial):  # who runs it: a trial of a dead process is failed at once
            write_trial(trial, replace(measured_record({}), owner=self.owner_attrs()))  # the owner alone
        if trial is not None:
            self.reporter.on_trial_start(getattr(trial, "number", -1), values)
            self._agreed_precheck(trial, values)  # before any model, args or accelerator work
        kwargs = apply.merged_args(self.base_args, args_kwargs)
        if self._whole_run is not None:  # one step, evaluated and saved, on the longest samples
            kwargs = whole_run_steps.check_args(kwargs, self.plan.config.eval_batch_size)
        apply.rebuild_args(self.args, kwargs)
        user = self.workload if isinstance(self.workload, UserWorkload) and self.workload.sft else None
        if user is not None:  # what SFTTrainer derives from its config: its rows, packed by TRL or not
            self.train_dataset, lengths = sft.trial_rows(self, user)
        if self._whole_run is not None:
            full = self.train_dataset if user is not None else self._full_data
            lengths = lengths if user is not None else self.workload.sample_lengths()
            self.train_dataset, self.eval_dataset = whole_run_steps.check_datasets(full, lengths, self.args)
        self.data_collator = apply.trial_collator(self.workload, data_choices(values))
        # A sampler that reorders the data: count each step's tokens from its batches.
        self.measurement.count_batches = self.args.train_sampling_strategy != "sequential"
        if user is not None:
            sft.prepare_trial(self, user, data_choices(values))
            self.measurement.count_batches = True  # packed or not, the trial's own rows
            return sft.patch_model(self, super().call_model_init(trial))
        return super().call_model_init(trial)

    def _build_accelerator_args(self, **kwargs: Any) -> dict[str, Any]:
        # An fp8 trial's Accelerator: no TrainingArguments field can ask for it.
        accelerator_args: dict[str, Any] = super()._build_accelerator_args(**kwargs)
        return apply.with_fp8(accelerator_args) if fp8_trial(self.trial_values) else accelerator_args

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        lengths = self.workload.sample_lengths()
        if self.args.train_sampling_strategy != "group_by_length" or not lengths:
            return super()._get_train_sampler(train_dataset)
        return apply.length_grouped_sampler(self.args, lengths)

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> Any:
        batches, items = super().get_batch_samples(epoch_iterator, num_batches, device)
        if self._whole_run is not None:
            self._whole_run.saw(batches)
        if self.measurement.count_batches or self.workload.padded:
            self.measurement.add_step_tokens(
                sum(apply.real_tokens(batch) for batch in batches),
                sum(batch["input_ids"].numel() for batch in batches),
            )
        return batches, items

    def _agreed_precheck(self, trial: Any, values: dict[str, Value]) -> None:
        study = study_of(trial)

        def estimate(finished: Sequence[TrialRecord]) -> MemoryEstimate | None:
            self._estimate = memory.estimate_in_study(self.estimator, study, finished, values)
            return self._estimate

        agreed_precheck(
            lambda: precheck_trial(trial, values, self.plan, self.base_args, estimate, self.trial_budget)
        )

    def batch_ladder(self, candidates: Sequence[int]) -> tuple[list[int], LadderProbe | None]:
        """The leading `candidates` (larger batch sizes) that fit, and the probe that decided one
        (`autotune.trial.memory.batch_ladder`)."""
        return memory.batch_ladder(self.estimator, self.plan, candidates)

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
        study = study_of(trial)
        config = self.plan.config
        # Screening compares with the study's best (throughput; with the run's length, its predicted
        # time) as rank 0 reads it when the trial begins.
        self.measurement.screen_against = from_rank_zero(
            screen_reference(study, config.measure.screen_ratio, config.train_tokens, config.train_steps)
            if is_rank_zero()
            else None
        )
        try:
            record = self._measure(trial)
        except Reused as reuse:
            return self._reuse(trial, reuse.past)
        except Exception as exc:
            self._end_failed_trial(trial, exc)
            if distributed() and not isinstance(exc, AGREED_ENDS):
                # Only this rank failed: the others wait for it in a collective. Record the trial
                # with this rank's reason, then end the process: torchrun ends the group.
                if not is_rank_zero() and getattr(trial, "number", None) is not None:
                    message = f"rank {torch.distributed.get_rank()}: {one_line(exc)}"
                    outcome = TrialOutcome.process_ended(failure_reason(exc), message)
                    fail_group_trial(self.plan.storage, self.plan.study_name, trial.number, outcome)
                raise
            raise TrialPruned(f"{failure_reason(exc)}: {one_line(exc)}") from exc
        # Rank 0's reading of the study and its loss curve decide, so every rank of a group ends alike.
        studied = read_study(study) if study is not None and is_rank_zero() else None
        baseline: Baseline | None = from_rank_zero(studied.baseline if studied is not None else None)
        verdict = from_rank_zero(self._judge(record, studied) if is_rank_zero() else None)
        record = replace(record, measurement=replace(record.measurement, loss_delta=verdict.loss_delta))
        if not verdict.complete:
            self._finish(trial, TrialOutcome(verdict.state, verdict.reason, verdict.message, record=record))
            raise TrialPruned(verdict.message)
        # Padding-free against the same configuration padded: the gain, or why there was none.
        compared = (
            padding_free_comparison(study, self.trial_values, record.tokens_per_s) if is_rank_zero() else None
        )
        padded, note = from_rank_zero(compared) or (None, None)
        record = replace(record, padding_compared=padded, padding_note=note)
        self.objective: float | None = score(
            record, run_tokens(config.train_tokens, config.train_steps, baseline)
        )
        self._finish(trial, TrialOutcome("COMPLETE", record=record))
        return None

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        storage = RetryingRDBStorage.of(self.plan.storage)
        if storage is not None:
            storage.raise_if_full()  # the trial's heartbeat found the store full: say so now
        loss = super().training_step(*args, **kwargs)
        self.measurement.add_loss(loss)  # the trial's loss curve, step by step
        return loss

    def _measure(self, trial: Any) -> TrialRecord:
        """Train one trial through the stock loop and return what it measured."""
        if self._compiled_before:
            torch._dynamo.reset()  # drop the previous trial's graphs and guards
        compiling = CompileMeter()
        compiling.start()  # after the reset, which zeroes dynamo's timers
        try:
            # Screening may stop a step at its deadline (a hopeless step is not finished).
            with (
                step_deadlines() as self.measurement.deadline,
                undone_kernel_patches([type(self.model).__module__]),  # for a next trial in process
            ):
                output = super().train(trial=trial)
        finally:
            self.measurement.deadline = None
            self._compiled_before = self._compiled_before or bool(self.args.torch_compile)
        record = measured_record({**self.measurement.result(), **compiling.read()}, self.trial_values)
        applied = apply.strategy_applied(self)
        record = replace(
            record,
            measurement=replace(record.measurement, train_loss=output.training_loss),
            compile=replace(record.compile, cold_s=cold_compile(self.plan, self.trial_values, record)),
            ddp=apply.ddp_settings(self.model_wrapped),
            data_parallel_applied=applied,
        )
        asked = self.trial_values.get("data_parallel")
        if applied is not None and asked is not None and asked != applied:
            # Measured, but not what it is labelled: a silent fallback must not win under a
            # strategy's name.
            raise RuntimeError(f"data_parallel={asked} was asked, but the Trainer ran {applied}")
        if fp8_trial(self.trial_values) and not apply.fp8_layers(self.model):
            # accelerate trains fp16 instead on a GPU without fp8 tensor cores, and says so only in a log
            raise RuntimeError(
                f"precision=fp8 was asked, but the Accelerator ran {self.accelerator.mixed_precision} "
                "with no Float8Linear layer"
            )
        # Peak memory is the largest rank's, and every rank's is kept; any rank's loss may be NaN.
        everyone = gather((record.peak_memory_bytes, output.training_loss))
        record = with_rank_peaks(record, [peak for peak, _ in everyone])
        problem = non_finite_loss(loss for _, loss in everyone)
        if problem is not None:
            raise NonFiniteLoss(problem)
        return record

    def _judge(self, record: TrialRecord, study: StudyRecord | None) -> Verdict:
        """The verdict on a measured trial (`autotune.trial.judge`) against the study's baseline;
        its loss is not judged where the trial changes the effective batch or the data order
        (`autotune.store.semantics.loss_compared`)."""
        if study is None:
            return judge(record, self.plan.cap_bytes, None, self.plan.config.loss_tolerance)
        changes = study_changes(study, self.trial_values, apply.applied_args(self.trial_values))
        baseline = study.baseline.as_trial()
        tolerance = self.plan.config.loss_tolerance
        return judge(record, self.plan.cap_bytes, baseline, tolerance, loss_compared(changes))

    # -- ending a trial -----------------------------------------------------------------------

    def _reuse(self, trial: Any, past: TrialRecord) -> None:
        # Who ran this trial, not the one it reuses.
        record = replace(past, duplicate_of=past.number, owner=self.owner_attrs())
        message = f"same parameters as trial {past.number}: its result is reused"
        complete = past.state == "COMPLETE"
        state = "COMPLETE" if complete else "PRUNED"
        study = study_of(trial)
        value, constraints = study.outcome_of(past.number) if study is not None else (None, {})
        self._finish(trial, TrialOutcome(state, record.reason, message, False, record, constraints))
        if complete:
            self.objective = value
            return None
        raise TrialPruned(message)

    def _end_failed_trial(self, trial: Any, exc: BaseException) -> None:
        skipped = isinstance(exc, NotTrained)  # a trial stopped by a pre-check allocated nothing
        text = traceback.format_exc()[-2000:] if self.debug and not skipped else None
        record = failure_record(exc, self.measurement.setup_s, text)
        if not skipped:
            self._release()
        reason = failure_reason(exc)
        # A pre-check's or screening's own sentence; a full disk's folder; an error's type and first line.
        message = str(exc) if skipped or isinstance(exc, ScreenedOut) else one_line(exc)
        if reason == DISK_FULL:
            places = {"compile cache": study_compile_cache(self.plan), "scratch folder": self.args.output_dir}
            message = disk_full_line(exc, places)
        self._finish(trial, TrialOutcome("PRUNED", reason, message, not skipped, record))

    def _release(self) -> None:
        # Stock Trainer skips release_memory when a trial raises: do it here, or memory creeps.
        self.model_wrapped, self.model = release_memory(self.model_wrapped, self.model)
        self.optimizer, self.lr_scheduler = None, None
        self.accelerator.clear()
        release_device_memory()

    def _finish(self, trial: Any, outcome: TrialOutcome) -> None:
        """Store a trial's outcome with what every trial records (applied arguments, model
        kwargs, estimate, MFU), then tell the reporter."""
        record = replace(
            outcome.record,
            number=getattr(trial, "number", -1),
            params=dict(self.trial_values),
            training_args=apply.applied_args(self.trial_values),
            model_kwargs=dict(self.trial_model_kwargs),
        )
        record = memory.with_estimate(with_parameters(record, self.estimator), self._estimate)
        precision = str(self.trial_values.get("precision", precision_of(self.base_args)))
        devices = int(self.args.world_size)
        record = with_model_mfu(record, self.estimator, self.workload, self.plan.hardware, precision, devices)
        full = replace(outcome, record=record)
        cap = self.plan.cap_bytes
        stored = record_outcome(trial, full, cap) if is_study_trial(trial) else full.stored(cap)
        self.reporter.on_trial_end(stored)
