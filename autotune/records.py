"""What the store holds, typed: `TrialRecord` and `StudyRecord` (the study's answer as its stored dict).

optuna keeps a trial's and a study's facts as flat user attrs (JSON values under string keys), and
optuna's CLI and dashboard read them there. This module is the one place that spells those keys:
each field of a record names its stored key in its metadata (``key``), and `trial_record` and
`study_record` read a trial's or a study's attrs into frozen, typed records grouped by what they
hold. Writers go through `study_attrs` (a study's facts) and `answer_attrs`; a trial's record is
written by `write_trial` (`autotune.study.outcomes.record_outcome`: the fresh measurement, read by
`measured_record`, with its ending set by `concluded`).

Schema versions (`autotune.schema`): stores written before ``schema_version`` was stored are
version 0; everything a version 0 store holds is read the same way (an answer missing from it is
decided again from its finalists). A newer store than this code knows is refused by
`autotune.schema.check_schema`.

Pure: no optuna, no torch.
"""

from __future__ import annotations

import functools
import statistics
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

from autotune.schema import SCHEMA_VERSION, check_schema


def _key(name: str) -> Any:
    """A record field stored under user-attr key `name`."""
    return field(default=None, metadata={"key": name})


def _keyed(name: str, factory: Any) -> Any:
    return field(default_factory=factory, metadata={"key": name})


R = TypeVar("R")


@functools.cache
def _keys(cls: type) -> tuple[tuple[str, str], ...]:
    """(field name, stored key) of the fields of `cls` that have a key."""
    return tuple((f.name, f.metadata["key"]) for f in fields(cls) if "key" in f.metadata)


def _values(cls: type, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `cls` that flat `attrs` hold, each read from its ``key``."""
    return {name: attrs[key] for name, key in _keys(cls) if key in attrs}


def _read(cls: type[R], attrs: Mapping[str, Any]) -> R:
    """A record of `cls` from flat attrs: each field from its ``key`` (absent: its default)."""
    return cls(**_values(cls, attrs))


def _write(record: Any) -> dict[str, Any]:
    """The flat attrs of a record: its fields that are set, under their keys."""
    return {
        f.metadata["key"]: getattr(record, f.name)
        for f in fields(record)
        if "key" in f.metadata and getattr(record, f.name) is not None
    }


# -- a trial -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """A trial's measured window (`autotune.measure.callback.ThroughputCallback.result`) and what
    was derived from it. Rates are the whole job's (every rank)."""

    tokens_per_s: float | None = _key("tokens_per_s")
    samples_per_s: float | None = _key("samples_per_s")
    # the 95% confidence half-width of the throughput, relative to it
    rel_ci_halfwidth: float | None = _key("rel_ci_halfwidth")
    measured_steps: int | None = _key("measured_steps")
    window_s: float | None = _key("window_s")
    window_tokens: float | None = _key("window_tokens")
    tokens_per_step: float | None = _key("tokens_per_step")
    samples_per_step: int | None = _key("samples_per_step")
    padding_fraction: float | None = _key("padding_fraction")
    step_time_mean_s: float | None = _key("step_time_mean_s")
    step_time_median_s: float | None = _key("step_time_median_s")
    step_time_min_s: float | None = _key("step_time_min_s")
    step_time_max_s: float | None = _key("step_time_max_s")
    step_time_std_s: float | None = _key("step_time_std_s")
    warmup_steps: int | None = _key("warmup_steps")
    warmup_s: float | None = _key("warmup_s")
    warmup_excess_s: float | None = _key("warmup_excess_s")
    first_step_s: float | None = _key("first_step_s")
    setup_s: float | None = _key("setup_s")
    # the machine probe's seconds around the window, the faster of before and after
    # (`autotune.measure.drift`): what a trial screened against this one is confirmed with
    probe_s: float | None = _key("probe_s")
    train_loss: float | None = _key("train_loss")
    # [tokens seen, loss] after each optimizer step
    loss_curve: list[list[float]] | None = _key("loss_curve")
    # the loss against the baseline's at equal tokens, relative to it
    loss_delta: float | None = _key("loss_delta")
    mfu: float | None = _key("mfu")
    model_flops_per_token: float | None = _key("model_flops_per_token")
    matmul_precision: str | None = _key("matmul_precision")
    world_size: int | None = _key("world_size")


@dataclass(frozen=True)
class MemoryRecord:
    """A trial's measured peak and the estimate made before it ran."""

    peak_bytes: int | None = _key("peak_memory_bytes")
    peak_children_bytes: int | None = _key("peak_children_bytes")
    rss_start_bytes: int | None = _key("rss_start_bytes")
    source: str | None = _key("memory_source")
    # CUDA: the allocator's peaks and NVML's process usage (`PeakMemoryMeter.read`)
    allocated_bytes: int | None = _key("peak_allocated_bytes")
    reserved_bytes: int | None = _key("peak_reserved_bytes")
    nvml_bytes: int | None = _key("peak_nvml_bytes")
    # every rank's peak, in rank order (a trial of several processes; `peak_bytes` is the largest)
    rank_peaks_bytes: list[int] | None = _key("rank_peak_memory_bytes")
    estimate_bytes: int | None = _key("memory_estimate_bytes")
    # (peak - estimate) / peak
    estimate_error: float | None = _key("memory_estimate_error")
    # the estimate's parts (`autotune.measure.estimator`)
    estimate: dict[str, Any] | None = _key("memory_estimate")

    @property
    def estimated_from_trials(self) -> list[int]:
        """The earlier trials whose measured peaks gave the estimate (empty: the probe's)."""
        return list((self.estimate or {}).get("activations_from_trials") or [])


@dataclass(frozen=True)
class CompileRecord:
    """How a compiled trial compiled (None fields: it did not compile)."""

    cache: str | None = _key("compile_cache")
    seconds: float | None = _key("compile_s")
    cold_s: float | None = _key("compile_cold_s")


@dataclass(frozen=True)
class ScreeningRecord:
    """Why a trial's window was cut short: screened out, or under the promotion line."""

    tokens_per_s: float | None = _key("screen_tokens_per_s")
    reference_tokens_per_s: float | None = _key("screen_reference_tokens_per_s")
    ratio: float | None = _key("screen_ratio")
    steps: int | None = _key("screen_steps")
    seconds: float | None = _key("screen_s")
    stopped_step_s: float | None = _key("screen_step_stopped_s")
    # how much slower the machine ran than when the reference was measured, by its probe (> 1 only)
    slowdown: float | None = _key("screen_slowdown")
    # judged on the user's run: the trial's optimistic predicted run and the best one, in seconds
    run_s: float | None = _key("screen_run_s")
    reference_run_s: float | None = _key("screen_reference_run_s")
    # the promotion line: steps, upper_tokens_per_s, reference_tokens_per_s, promote_ratio
    not_promoted: dict[str, Any] | None = _key("not_promoted")


@dataclass(frozen=True)
class Failure:
    """Why a trial did not complete (reason: one of `autotune.study.outcomes`)."""

    reason: str | None = _key("reason")
    message: str | None = _key("message")
    traceback: str | None = _key("traceback")
    unavailable_knob: str | None = _key("unavailable_knob")
    # What Ray said of a Ray trial that died (its error file, "Failure # 1 (occurred at ...)"),
    # kept apart from the one-line message.
    ray_error: str | None = _key("ray_error")


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
        owner: the process that ran it (`autotune.study.owner.Owner`'s dict).
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
    trained: bool | None = _key("trained")
    feasible: bool | None = _key("feasible")
    training_args: dict[str, Any] | None = _key("training_args")
    model_kwargs: dict[str, Any] | None = _key("model_kwargs")
    duplicate_of: int | None = _key("duplicate_of")
    twin_of: int | None = _key("twin_of")
    trainable_params: int | None = _key("trainable_params")
    total_params: int | None = _key("total_params")
    dominated_by: int | None = _key("dominated_by")
    ddp: dict[str, Any] | None = _key("ddp")
    data_parallel_applied: Any = _key("data_parallel_applied")
    padding_compared: dict[str, Any] | None = _key("padding_free_vs_padded")
    padding_note: str | None = _key("padding_free_note")
    owner: dict[str, Any] | None = _key("worker")
    measurement: Measurement = field(default_factory=Measurement)
    memory: MemoryRecord = field(default_factory=MemoryRecord)
    compile: CompileRecord = field(default_factory=CompileRecord)
    screening: ScreeningRecord = field(default_factory=ScreeningRecord)
    failure: Failure = field(default_factory=Failure)
    # its whole-run check, which the study keeps (a finished trial's attrs are closed): set where
    # the study's records are read (`autotune.study.store.read_trials`), never stored with the trial
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
    groups: dict[str, Any] = {name: _read(_GROUP_TYPES[name], attrs) for name in _TRIAL_GROUPS}
    return TrialRecord(number, dict(params), state, **_values(TrialRecord, attrs), **groups)


def trial_attrs(record: TrialRecord) -> dict[str, Any]:
    """The flat user attrs of a trial record (its groups' fields under their keys)."""
    out = _write(record)
    for name in _TRIAL_GROUPS:
        out.update(_write(getattr(record, name)))
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


# -- the study -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """The defaults (`TrainingArguments()` and ``from_pretrained``'s picks), measured once before
    the search and again among the finalists."""

    params: dict[str, Any] = field(default_factory=dict, metadata={"key": "params"})
    tokens_per_s: float | None = _key("tokens_per_s")
    samples_per_s: float | None = _key("samples_per_s")
    peak_memory_bytes: int | None = _key("peak_memory_bytes")
    rel_ci_halfwidth: float | None = _key("rel_ci_halfwidth")
    tokens_per_step: float | None = _key("tokens_per_step")
    # its window's steps and their median time: what a round's measurement of it is predicted from
    measured_steps: int | None = _key("measured_steps")
    step_time_median_s: float | None = _key("step_time_median_s")
    # the padding share of its window (padded data only): what a padding-free trial is compared with
    padding_fraction: float | None = _key("padding_fraction")
    setup_s: float | None = _key("setup_s")
    warmup_excess_s: float | None = _key("warmup_excess_s")
    first_step_s: float | None = _key("first_step_s")
    compile_s: float | None = _key("compile_s")
    probe_s: float | None = _key("probe_s")
    loss_curve: list[list[float]] | None = _key("loss_curve")
    error: str | None = _key("error")
    remeasured_median: float | None = _key("remeasured_median")

    @property
    def measured(self) -> bool:
        return bool(self.tokens_per_s)

    def attrs(self) -> dict[str, Any]:
        return _write(self)

    def as_trial(self) -> TrialRecord:
        """The baseline's measurement as a trial record (what run time and scores read)."""
        return measured_record(_write(self))

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any] | None) -> Baseline:
        return _read(cls, attrs or {})


# The numbers the finalists' rounds give the baseline's two measurements (the A/A pair).
BASELINE = -1
BASELINE_AGAIN = -2


@dataclass(frozen=True)
class FinalistRecord:
    """One contestant of the finalists' rounds (number -1: the baseline).

    `scores` are what the rounds ranked by (tokens/s, or with the user's run length the effective
    rate of that run), per round; `tokens_per_s` and `peaks` the round's throughput and peak
    (version 0 stores kept tokens/s only: their scores are their tokens/s)."""

    number: int = field(default=-1, metadata={"key": "number"})
    tokens_per_s: list[float] = _keyed("tokens_per_s", list)
    rounds: list[int] = _keyed("rounds", list)
    scores: list[float] | None = _key("scores")
    peaks: list[int | None] | None = _key("peaks")
    # each measurement's place in its round's order (0: first; None: a store that did not keep it)
    positions: list[int] | None = _key("positions")
    # what version 0 stored beside its rounds (`autotune.measure.stats.Finalist`): their median
    # and half-range relative to it; version 1 derives them from `tokens_per_s`
    median: float | None = _key("median")
    spread: float | None = _key("spread")

    def scores_by_round(self) -> dict[int, float]:
        values = self.scores if self.scores is not None else self.tokens_per_s
        rounds = self.rounds or list(range(1, len(values) + 1))
        return dict(zip(rounds, values, strict=False))

    def tokens_by_round(self) -> dict[int, float]:
        rounds = self.rounds or list(range(1, len(self.tokens_per_s) + 1))
        return dict(zip(rounds, self.tokens_per_s, strict=False))

    def positions_by_round(self) -> dict[int, int]:
        if self.positions is None:
            return {}
        return dict(zip(self.rounds, self.positions, strict=False))

    def attrs(self) -> dict[str, Any]:
        return _write(self)

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> FinalistRecord:
        return _read(cls, attrs)


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
            reasons of `autotune.study.outcomes`); None: no step failed (or it went over the cap
            only by its measured peak).
        message: what failed, in one line.
        cap_bytes: the cap it was judged under (None: none).
        train_samples: samples in the optimizer step (per device x accumulation x processes).
        train_tokens: the padded width of its widest batch: the longest sample's tokens where
            batches are padded (a padding-free batch: all its tokens in one row).
        eval_samples: samples in the evaluation step (every process's).
        memory_source: how the peaks were read (`autotune.measure.memory`).
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
class Winner:
    """The finalists' re-measured leader as version 0 stored it (``winner``): kept for the trial
    line and older readers; `Answer` is what is handed back."""

    number: int | None = _key("number")
    median_tokens_per_s: float | None = _key("median_tokens_per_s")
    median_score: float | None = _key("median_score")
    objective: str | None = _key("objective")
    speedup: dict[str, Any] | None = _key("speedup")
    verdict: str | None = _key("verdict")

    def attrs(self) -> dict[str, Any]:
        return _write(self)

    @property
    def race(self) -> str | None:
        """The finalists' race in words (stores written before the answer was stored appended the
        tie with the defaults to it: that part is the answer's now)."""
        return (self.verdict or "").split("; nothing beat the defaults measurably")[0] or None


@dataclass(frozen=True)
class StudyRecord:
    """A study's stored facts, grouped: what ran (run configuration, workload, device, space,
    base config, cap), what it was measured against (baseline), what ended it (finalists, winner,
    answer) and where its time went.

    Attributes:
        name: the study's name.
        schema_version: 0 for stores written before the version was stored.
        run_config: `RunConfig.to_dict` of the search that created it.
        workload, device, space: `describe()`/`to_dict()` of each, as created.
        fingerprint: what a resume checks (`autotune.study.fingerprint`).
        memory_cap: the cap as the user wrote it.
        base_args, base_model_kwargs: the base config every trial started from.
        peft: the peft adapter every trial trained (its config's kwargs, as peft loads them:
            ``LoraConfig(**peft)``); None: every weight trained.
        not_searched: knobs that could not run here.
        baseline: the defaults, measured.
        finalists: the finalists' rounds (the baseline's number is -1).
        rounds_looks: how many looks at the rounds their budget allowed, which every interval
            of them holds over together (None: a store from before the sequential rounds).
        rounds_look: the look the rounds ended at, whose level their intervals take (None: a
            store that did not record it, where every look took an equal part).
        winner: the re-measured leader (version 0's record of it).
        answer: the stored answer as its dict (`autotune.answer.model.Answer.from_dict` reads it;
            None: not decided yet, or a version 0 store).
        time_breakdown: where the last search's time went (`autotune.driver.accounting`).
        activation_probes, batch_ladder, batch_ladder_probe: the memory estimate's measurements
            (each probe kind stored under its own key: `add_activation_probes`).
        whole_run: the whole-run checks (`WholeRun`), in the order they ran (each under its own
            key: `add_whole_run`).
    """

    name: str
    schema_version: int = field(default=0, metadata={"key": "schema_version"})
    run_config: dict[str, Any] = _keyed("run_config", dict)
    workload: dict[str, Any] = _keyed("workload", dict)
    device: dict[str, Any] = _keyed("device", dict)
    space: dict[str, Any] = _keyed("space", dict)
    fingerprint: dict[str, Any] | None = _key("fingerprint")
    memory_cap: str | None = _key("memory_cap")
    base_args: dict[str, Any] = _keyed("base_args", dict)
    base_model_kwargs: dict[str, Any] = _keyed("base_model_kwargs", dict)
    peft: dict[str, Any] | None = _key("peft")
    not_searched: list[Any] = _keyed("not_searched", list)
    baseline: Baseline = field(default_factory=Baseline)
    finalists: tuple[FinalistRecord, ...] = ()
    # the looks the rounds' intervals hold over together (`autotune.measure.rounds.look_level`)
    rounds_looks: int | None = _key("rounds_looks")
    rounds_look: int | None = _key("rounds_look")
    winner: Winner | None = None
    answer: dict[str, Any] | None = None
    time_breakdown: dict[str, Any] | None = _key("time_breakdown")
    activation_probes: dict[str, Any] | None = None
    batch_ladder: list[Any] | None = _key("batch_ladder")
    batch_ladder_probe: dict[str, Any] | None = _key("batch_ladder_probe")
    whole_run: tuple[WholeRun, ...] = ()

    @property
    def model(self) -> str | None:
        return self.workload.get("model") or self.run_config.get("model")

    @property
    def seq_len(self) -> int | None:
        return self.workload.get("seq_len") or self.run_config.get("seq_len")

    @property
    def train_tokens(self) -> int | None:
        """The user's run length in tokens (``--train-tokens``, or ``--train-steps`` times the
        baseline's tokens per step), None when not given."""
        tokens = self.run_config.get("train_tokens")
        if tokens:
            return int(tokens)
        steps = self.run_config.get("train_steps")
        per_step = self.baseline.tokens_per_step
        if steps and per_step:
            return int(steps * per_step)
        return None

    @property
    def device_memory_bytes(self) -> int:
        return int(self.device.get("memory_bytes") or 0)

    def whole_run_of(self, trial: int | None) -> WholeRun | None:
        """The latest whole-run check of a trial (None: of the defaults), None: not checked."""
        return next((check for check in reversed(self.whole_run) if check.trial == trial), None)

    def remeasured_tokens_per_s(self) -> dict[int, float]:
        """Trial number -> its re-measured median tokens/s (the finalists; not the baseline)."""
        return {
            f.number: statistics.median(f.tokens_per_s)
            for f in self.finalists
            if f.number >= 0 and f.tokens_per_s
        }


_STUDY_SPECIAL = {
    "baseline": "baseline",
    "finalists": "finalists",
    "winner": "winner",
    "answer": "answer",
    "whole_run": "whole_run",
}


def study_record(name: str, attrs: Mapping[str, Any]) -> StudyRecord:
    """A study's record from its name and user attrs.

    Raises:
        UsageError: the store was written by a newer autotune (its schema version is higher).
    """
    check_schema(f"study {name!r}", attrs.get("schema_version") or 0)
    winner = attrs.get("winner")
    answer = attrs.get("answer")
    return StudyRecord(
        name=name,
        **_values(StudyRecord, attrs),
        baseline=Baseline.from_attrs(attrs.get("baseline")),
        finalists=tuple(FinalistRecord.from_attrs(f) for f in attrs.get("finalists") or ()),
        winner=_read(Winner, winner) if winner else None,
        answer=dict(answer) if answer else None,
        activation_probes=_probes(attrs),
        whole_run=tuple(check for check in map(WholeRun.from_dict, _whole_runs(attrs)) if check),
    )


# Facts that processes add to a study at the same time are stored one user attr each, under a
# prefix: each writer adds its own rows and none overwrites another's (a read-modify-write of one
# attr loses the updates of a concurrent writer). Stores written before hold them under one key
# ("activation_probes": kind -> probe; "whole_run": a list), read first.
_PROBE_PREFIX = "activation_probe:"
_WHOLE_RUN_PREFIX = "whole_run:"


def _probes(attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    """Kind -> probe: the single-key form of older stores, then one attr per kind."""
    probes = dict(attrs.get("activation_probes") or {})
    probes.update(
        (key.removeprefix(_PROBE_PREFIX), value)
        for key, value in attrs.items()
        if key.startswith(_PROBE_PREFIX)
    )
    return probes or None


def _whole_runs(attrs: Mapping[str, Any]) -> list[Any]:
    """The stored whole-run checks in the order they ran: the single-key list of older stores, then
    one attr per check, whose key sorts by the time it was added."""
    added = sorted(key for key in attrs if key.startswith(_WHOLE_RUN_PREFIX))
    return [*(attrs.get("whole_run") or ()), *(attrs[key] for key in added)]


def add_activation_probes(study: Any, probes: Mapping[str, Any]) -> None:
    """Add activation probes (kind -> probe) to an optuna `Study`, one attr per kind: processes
    adding at the same time lose nothing (two probes of one kind are alike: either stays)."""
    for kind, probe in probes.items():
        study.set_user_attr(f"{_PROBE_PREFIX}{kind}", probe)


def add_whole_run(study: Any, check: WholeRun) -> None:
    """Add a whole-run check to an optuna `Study`, under a key of its own that sorts by when it was
    added: processes adding at the same time lose nothing."""
    study.set_user_attr(f"{_WHOLE_RUN_PREFIX}{time.time_ns():020d}-{uuid.uuid4().hex[:8]}", check.to_dict())


def study_attrs(**facts: Any) -> dict[str, Any]:
    """The user attrs that store some of a study's facts, by `StudyRecord` field name:
    ``study_attrs(run_config=..., device=...)``; `Baseline`, finalists, `Winner` and `Answer` as
    their records. Always carries the schema version.

    Raises:
        KeyError: a name that is not a stored field of `StudyRecord`.
    """
    keys = {f.name: f.metadata["key"] for f in fields(StudyRecord) if "key" in f.metadata}
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    for name, value in facts.items():
        if name in _STUDY_SPECIAL:
            out[_STUDY_SPECIAL[name]] = _special(name, value)
        else:
            out[keys[name]] = value
    return out


def _special(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name == "finalists":
        return [f.attrs() for f in value]
    if name == "answer":
        return value.to_dict() if hasattr(value, "to_dict") else dict(value)
    if name == "whole_run":
        return [check.to_dict() for check in value]
    return value.attrs()


# -- optuna's objects (duck-typed: this module imports no optuna) ----------------------------------


def read_trial(trial: Any) -> TrialRecord:
    """The record of an optuna `FrozenTrial`."""
    return trial_record(trial.number, trial.params, trial.state.name, trial.user_attrs)


def queued_params(trial: Any) -> dict[str, Any]:
    """The values of an optuna trial that waits in its study's queue (`enqueue_trial`), or is
    running one: optuna keeps them as its fixed params until they are suggested."""
    return {**trial.system_attrs.get("fixed_params", {}), **trial.params}


def read_study(study: Any) -> StudyRecord:
    """The record of an optuna `Study` (its name and user attrs)."""
    return study_record(study.study_name, study.user_attrs)


def write_trial(trial: Any, record: TrialRecord) -> None:
    """Store a trial's record (`trial_attrs`) in an optuna `Trial` (anything with ``set_user_attr``)."""
    for key, value in trial_attrs(record).items():
        trial.set_user_attr(key, value)


def write_study(study: Any, **facts: Any) -> None:
    """Store some of a study's facts (`study_attrs`) in an optuna `Study`."""
    for key, value in study_attrs(**facts).items():
        study.set_user_attr(key, value)
