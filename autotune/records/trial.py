"""A trial's stored facts, typed (`TrialRecord`, grouped: `Measurement`, `MemoryRecord`,
`CompileRecord`, `ScreeningRecord`, `Failure`), read from and written to an optuna trial's user
attrs. A trial's record is written by `write_trial` (`autotune.store.outcomes.record_outcome`: the
fresh measurement, read by `measured_record`, with its ending set by `concluded`). Pure: no optuna
(optuna's objects are duck-typed), no torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from autotune.records.keys import ByName, key, read, values, write

# -- a trial -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """A trial's measured window (`autotune.measure.callback.ThroughputCallback.result`) and what
    was derived from it. Rates are the whole job's (every rank)."""

    tokens_per_s: float | None = key("tokens_per_s")
    samples_per_s: float | None = key("samples_per_s")
    # the 95% confidence half-width of the throughput, relative to it
    rel_ci_halfwidth: float | None = key("rel_ci_halfwidth")
    measured_steps: int | None = key("measured_steps")
    window_s: float | None = key("window_s")
    window_tokens: float | None = key("window_tokens")
    tokens_per_step: float | None = key("tokens_per_step")
    samples_per_step: int | None = key("samples_per_step")
    padding_fraction: float | None = key("padding_fraction")
    step_time_mean_s: float | None = key("step_time_mean_s")
    step_time_median_s: float | None = key("step_time_median_s")
    step_time_min_s: float | None = key("step_time_min_s")
    step_time_max_s: float | None = key("step_time_max_s")
    step_time_std_s: float | None = key("step_time_std_s")
    warmup_steps: int | None = key("warmup_steps")
    warmup_s: float | None = key("warmup_s")
    warmup_excess_s: float | None = key("warmup_excess_s")
    first_step_s: float | None = key("first_step_s")
    setup_s: float | None = key("setup_s")
    # the machine probe's seconds around the window, the faster of before and after
    # (`autotune.measure.drift`): what a trial screened against this one is confirmed with
    probe_s: float | None = key("probe_s")
    train_loss: float | None = key("train_loss")
    # [tokens seen, loss] after each optimizer step
    loss_curve: list[list[float]] | None = key("loss_curve")
    # the loss against the baseline's at equal tokens, relative to it
    loss_delta: float | None = key("loss_delta")
    mfu: float | None = key("mfu")
    model_flops_per_token: float | None = key("model_flops_per_token")
    matmul_precision: str | None = key("matmul_precision")
    world_size: int | None = key("world_size")


@dataclass(frozen=True)
class MemoryRecord:
    """A trial's measured peak and the estimate made before it ran."""

    peak_bytes: int | None = key("peak_memory_bytes")
    peak_children_bytes: int | None = key("peak_children_bytes")
    rss_start_bytes: int | None = key("rss_start_bytes")
    source: str | None = key("memory_source")
    # CUDA: the allocator's peaks and NVML's process usage (`PeakMemoryMeter.read`)
    allocated_bytes: int | None = key("peak_allocated_bytes")
    reserved_bytes: int | None = key("peak_reserved_bytes")
    nvml_bytes: int | None = key("peak_nvml_bytes")
    # every rank's peak, in rank order (a trial of several processes; `peak_bytes` is the largest)
    rank_peaks_bytes: list[int] | None = key("rank_peak_memory_bytes")
    estimate_bytes: int | None = key("memory_estimate_bytes")
    # (peak - estimate) / peak
    estimate_error: float | None = key("memory_estimate_error")
    # the estimate's parts (`autotune.measure.estimator`)
    estimate: dict[str, Any] | None = key("memory_estimate")

    @property
    def estimated_from_trials(self) -> list[int]:
        """The earlier trials whose measured peaks gave the estimate (empty: the probe's)."""
        return list((self.estimate or {}).get("activations_from_trials") or [])


@dataclass(frozen=True)
class CompileRecord:
    """How a compiled trial compiled (None fields: it did not compile)."""

    cache: str | None = key("compile_cache")
    seconds: float | None = key("compile_s")
    cold_s: float | None = key("compile_cold_s")


@dataclass(frozen=True)
class ScreeningRecord:
    """Why a trial's window was cut short: screened out, or under the promotion line."""

    tokens_per_s: float | None = key("screen_tokens_per_s")
    reference_tokens_per_s: float | None = key("screen_reference_tokens_per_s")
    ratio: float | None = key("screen_ratio")
    steps: int | None = key("screen_steps")
    seconds: float | None = key("screen_s")
    stopped_step_s: float | None = key("screen_step_stopped_s")
    # how much slower the machine ran than when the reference was measured, by its probe (> 1 only)
    slowdown: float | None = key("screen_slowdown")
    # judged on the user's run: the trial's optimistic predicted run and the best one, in seconds
    run_s: float | None = key("screen_run_s")
    reference_run_s: float | None = key("screen_reference_run_s")
    # the promotion line: steps, upper_tokens_per_s, reference_tokens_per_s, promote_ratio
    not_promoted: dict[str, Any] | None = key("not_promoted")


@dataclass(frozen=True)
class Failure:
    """Why a trial did not complete (reason: one of `autotune.store.outcomes`)."""

    reason: str | None = key("reason")
    message: str | None = key("message")
    traceback: str | None = key("traceback")
    unavailable_knob: str | None = key("unavailable_knob")
    # What Ray said of a Ray trial that died (its error file, "Failure # 1 (occurred at ...)"),
    # kept apart from the one-line message.
    ray_error: str | None = key("ray_error")


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the store holds it.

    Attributes:
        number: optuna's trial number.
        params: knob name -> value.
        state: ``"COMPLETE"``, ``"PRUNED"`` (skipped, reused or infeasible), ``"FAIL"`` or
            ``"RUNNING"``.
        trained: whether it counts against the budget (None: not recorded).
        feasible: finished, finite loss, under the cap (None: not recorded).
        training_args: the `TrainingArguments` kwargs it applied.
        model_kwargs: the model-load kwargs it applied.
        duplicate_of: the trial whose measurement it reused.
        twin_of: the trial, the fastest, that changes the training math and whose twin that keeps
            it this trial is (`autotune.driver.twin`).
        measurement, memory, compile, screening, failure: its facts, grouped.
        owner: the process that ran it (`autotune.store.owner.Owner`'s dict).
        trainable_params, total_params: the parameters the trial trained (an adapter's, under
            peft) and all of its model's.
        dominated_by, ddp, data_parallel_applied, padding_compared, padding_note: what a
            pre-check or a strategy recorded (the trial that made it pointless; the DDP settings
            and strategy it ran; a padding-free trial against its padded twin, and why it was no
            faster).
    """

    number: int
    params: dict[str, Any]
    state: str
    trained: bool | None = key("trained")
    feasible: bool | None = key("feasible")
    training_args: dict[str, Any] | None = key("training_args")
    model_kwargs: dict[str, Any] | None = key("model_kwargs")
    duplicate_of: int | None = key("duplicate_of")
    twin_of: int | None = key("twin_of")
    trainable_params: int | None = key("trainable_params")
    total_params: int | None = key("total_params")
    dominated_by: int | None = key("dominated_by")
    ddp: dict[str, Any] | None = key("ddp")
    data_parallel_applied: Any = key("data_parallel_applied")
    padding_compared: dict[str, Any] | None = key("padding_free_vs_padded")
    padding_note: str | None = key("padding_free_note")
    owner: dict[str, Any] | None = key("worker")
    measurement: Measurement = field(default_factory=Measurement)
    memory: MemoryRecord = field(default_factory=MemoryRecord)
    compile: CompileRecord = field(default_factory=CompileRecord)
    screening: ScreeningRecord = field(default_factory=ScreeningRecord)
    failure: Failure = field(default_factory=Failure)
    # its whole-run check, which the study keeps (a finished trial's attrs are closed): set where
    # the study's records are read (`autotune.store.trials.read_trials`), never stored with the trial
    whole_run: WholeRun | None = None

    # The figures every table shows, by their usual names.
    @property
    def tokens_per_s(self) -> float | None:
        return self.measurement.tokens_per_s

    @property
    def samples_per_s(self) -> float | None:
        return self.measurement.samples_per_s

    @property
    def peak_memory_bytes(self) -> int | None:
        return self.memory.peak_bytes

    @property
    def rel_ci_halfwidth(self) -> float | None:
        return self.measurement.rel_ci_halfwidth

    @property
    def reason(self) -> str | None:
        return self.failure.reason

    @property
    def message(self) -> str | None:
        return self.failure.message

    @property
    def reused(self) -> bool:
        """A duplicate that reused another trial's measurement (left out of rankings)."""
        return self.duplicate_of is not None

    @property
    def is_feasible(self) -> bool:
        """Feasible, reading a record without the flag as feasible (older stores)."""
        return self.feasible is not False

    def with_reason(self, reason: str | None) -> TrialRecord:
        """The record with `reason` (a FAIL without one is read as interrupted by the store)."""
        return replace(self, failure=replace(self.failure, reason=reason))

    @property
    def attrs(self) -> dict[str, Any]:
        """The flat user attrs that store this record (what `trial_record` read)."""
        return trial_attrs(self)


_TRIAL_GROUPS = ("measurement", "memory", "compile", "screening", "failure")


def trial_record(number: int, params: Mapping[str, Any], state: str, attrs: Mapping[str, Any]) -> TrialRecord:
    """A trial's record from its number, params, state name and user attrs."""
    groups: dict[str, Any] = {name: read(_GROUP_TYPES[name], attrs) for name in _TRIAL_GROUPS}
    return TrialRecord(number, dict(params), state, **values(TrialRecord, attrs), **groups)


def trial_attrs(record: TrialRecord) -> dict[str, Any]:
    """The flat user attrs of a trial record (its groups' fields under their keys)."""
    out = write(record)
    for name in _TRIAL_GROUPS:
        out.update(write(getattr(record, name)))
    return out


def measured_record(attrs: Mapping[str, Any], params: Mapping[str, Any] | None = None) -> TrialRecord:
    """The record of a fresh measurement (a trial process's flat measured attrs, before they are
    stored), numbered -1."""
    return trial_record(-1, params or {}, "COMPLETE", attrs)


def concluded(
    record: TrialRecord, *, state: str, trained: bool, feasible: bool, reason: str | None, message: str
) -> TrialRecord:
    """`record` as the store keeps it once its trial ended: its state, whether it trained and is
    feasible, and why it ended (a reason or message of its own stays where none is given)."""
    failure = replace(
        record.failure,
        reason=reason if reason is not None else record.failure.reason,
        message=message or record.failure.message,
    )
    return replace(record, state=state, trained=trained, feasible=feasible, failure=failure)


def trial_facts(**facts: Any) -> dict[str, Any]:
    """The user attrs that store some of a trial's own facts, by `TrialRecord` field name:
    ``trial_facts(owner=...)`` (not its groups: write a whole record with `write_trial`).

    Raises:
        KeyError: a name that is not a stored field of `TrialRecord`.
    """
    keys = {f.name: f.metadata["key"] for f in fields(TrialRecord) if "key" in f.metadata}
    return {keys[name]: value for name, value in facts.items()}


_GROUP_TYPES: dict[str, type] = {
    "measurement": Measurement,
    "memory": MemoryRecord,
    "compile": CompileRecord,
    "screening": ScreeningRecord,
    "failure": Failure,
}

# Keys a trial's attrs hold that are read through their own modules' constants.
OWNER_KEY = "worker"
RAY_TRIAL_KEY = "ray_trial_id"  # the Ray trial that ran an optuna trial: links the two tables


# The steps of a whole-run check, in the order they run (`WholeRun.step_peaks`).
WHOLE_RUN_STEPS = ("train", "eval", "save")


@dataclass(frozen=True)
class WholeRun:
    """One configuration run once as a whole run does, in a fresh worker under the memory cap
    (`autotune.driver.wholerun`): an optimizer step on the longest batch of the data, an
    evaluation step and a checkpoint save, each step's peak measured as a trial's is.

    Attributes:
        trial: the trial it checked; None: the defaults (the baseline's configuration).
        params: its knob values.
        step_peaks: each step that ran -> its peak memory (bytes), in `WHOLE_RUN_STEPS` order.
        fits: True: every step ran under the cap; False: a step went over it or ran out of memory
            (the trial is then infeasible, reason ``whole_run_over_cap``); None: the check could
            not run (an error that is no memory verdict: `message` says which).
        failed_step: the step that failed (``"unknown"``: its process ended from outside;
            ``"setup"``: before the first step).
        reason: why a step failed, as its process saw it (``oom``, ``killed``, ``error``: the
            reasons of `autotune.store.outcomes`); None: no step failed (or it went over the cap
            only by its measured peak).
        message: what failed, in one line.
        cap_bytes: the cap it was judged under (None: none).
        train_samples: samples in the optimizer step (per device x accumulation x processes).
        train_tokens: the padded width of its widest batch: the longest sample's tokens where
            batches are padded (a padding-free batch: all its tokens in one row).
        eval_samples: samples in the evaluation step (every process's).
        memory_source: how the peaks were read (`autotune.measure.peak`).
        seconds: the check's wall time, its worker's start included.
    """

    trial: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    step_peaks: dict[str, int] = field(default_factory=dict)
    fits: bool | None = None
    failed_step: str | None = None
    reason: str | None = None
    message: str | None = None
    cap_bytes: int | None = None
    train_samples: int | None = None
    train_tokens: int | None = None
    eval_samples: int | None = None
    memory_source: str | None = None
    seconds: float | None = None

    @property
    def peak_bytes(self) -> int | None:
        """The whole run's peak: the largest of its steps' (None: no step measured)."""
        return max(self.step_peaks.values()) if self.step_peaks else None

    @property
    def headroom_bytes(self) -> int | None:
        """How far the whole-run peak stays under the cap (negative: over it); None without a cap
        or a peak."""
        peak = self.peak_bytes
        return self.cap_bytes - peak if self.cap_bytes is not None and peak is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> WholeRun | None:
        if not data:
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


@dataclass(frozen=True)
class WholeRunFindings(ByName):
    """What a whole-run job found in its process (`autotune.trial.whole_run_steps.findings`), before
    the supervisor judges it against the cap into a `WholeRun` (`autotune.driver.wholerun.judged`);
    it crosses the process boundary as its dict (`to_dict`).

    Attributes:
        step_peaks: each step that ran -> its peak (bytes; every rank's largest).
        failed_step, reason, message: the step that failed, why and in one line (None: none did).
        train_samples, train_tokens, eval_samples: the sizes of its batches (as `WholeRun`'s).
        memory_source: how the peaks were read (`autotune.measure.peak`).
    """

    step_peaks: dict[str, int | None] = field(default_factory=dict)
    failed_step: str | None = None
    reason: str | None = None
    message: str | None = None
    train_samples: int | None = None
    train_tokens: int | None = None
    eval_samples: int | None = None
    memory_source: str | None = None


# -- optuna's objects (duck-typed: this module imports no optuna) ----------------------------------


def read_trial(trial: Any) -> TrialRecord:
    """The record of an optuna `FrozenTrial`."""
    return trial_record(trial.number, trial.params, trial.state.name, trial.user_attrs)


def queued_params(trial: Any) -> dict[str, Any]:
    """The values of an optuna trial that waits in its study's queue (`enqueue_trial`), or is
    running one: optuna keeps them as its fixed params until they are suggested."""
    return {**trial.system_attrs.get("fixed_params", {}), **trial.params}


def write_trial(trial: Any, record: TrialRecord) -> None:
    """Store a trial's record (`trial_attrs`) in an optuna `Trial` (anything with ``set_user_attr``)."""
    for name, value in trial_attrs(record).items():
        trial.set_user_attr(name, value)
