"""A study's stored facts, typed (`StudyRecord`, with its `Baseline`, finalists' rounds, whole-run
checks and the answer as its stored dict), read from and written to an optuna study's user attrs
(`study_record`, `study_attrs`, `write_study`). Facts that processes add at the same time
(activation probes, whole-run checks) are one attr each, so concurrent writers lose nothing. Pure:
no optuna (optuna's objects are duck-typed), no torch."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from autotune.records.keys import key, keyed, read, values, write
from autotune.records.trial import TrialRecord, WholeRun, measured_record
from autotune.schema import SCHEMA_VERSION, check_schema

# -- the study -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """The defaults (`TrainingArguments()` and ``from_pretrained``'s picks), measured once before
    the search and again among the finalists."""

    params: dict[str, Any] = field(default_factory=dict, metadata={"key": "params"})
    tokens_per_s: float | None = key("tokens_per_s")
    samples_per_s: float | None = key("samples_per_s")
    peak_memory_bytes: int | None = key("peak_memory_bytes")
    rel_ci_halfwidth: float | None = key("rel_ci_halfwidth")
    tokens_per_step: float | None = key("tokens_per_step")
    # its window's steps and their median time: what a round's measurement of it is predicted from
    measured_steps: int | None = key("measured_steps")
    step_time_median_s: float | None = key("step_time_median_s")
    # the padding share of its window (padded data only): what a padding-free trial is compared with
    padding_fraction: float | None = key("padding_fraction")
    setup_s: float | None = key("setup_s")
    warmup_excess_s: float | None = key("warmup_excess_s")
    first_step_s: float | None = key("first_step_s")
    compile_s: float | None = key("compile_s")
    probe_s: float | None = key("probe_s")
    loss_curve: list[list[float]] | None = key("loss_curve")
    error: str | None = key("error")
    remeasured_median: float | None = key("remeasured_median")

    @property
    def measured(self) -> bool:
        return bool(self.tokens_per_s)

    def attrs(self) -> dict[str, Any]:
        return write(self)

    def as_trial(self) -> TrialRecord:
        """The baseline's measurement as a trial record (what run time and scores read)."""
        return measured_record(write(self))

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any] | None) -> Baseline:
        return read(cls, attrs or {})


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
    tokens_per_s: list[float] = keyed("tokens_per_s", list)
    rounds: list[int] = keyed("rounds", list)
    scores: list[float] | None = key("scores")
    peaks: list[int | None] | None = key("peaks")
    # each measurement's place in its round's order (0: first; None: a store that did not keep it)
    positions: list[int] | None = key("positions")
    # what version 0 stored beside its rounds (`autotune.measure.stats.Finalist`): their median
    # and half-range relative to it; version 1 derives them from `tokens_per_s`
    median: float | None = key("median")
    spread: float | None = key("spread")

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
        return write(self)

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> FinalistRecord:
        return read(cls, attrs)


@dataclass(frozen=True)
class StudyRecord:
    """A study's stored facts, grouped: what ran (run configuration, workload, device, space,
    base config, cap), what it was measured against (baseline), what ended it (finalists, answer)
    and where its time went (a ``winner`` that version 0 stored beside the finalists is not read:
    their leader is read from the rounds, `autotune.answer.race`).

    Attributes:
        name: the study's name.
        schema_version: 0 for stores written before the version was stored.
        run_config: `RunConfig.to_dict` of the search that created it.
        workload, device, space: `describe()`/`to_dict()` of each, as created.
        fingerprint: what a resume checks (`autotune.store.fingerprint`).
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
    run_config: dict[str, Any] = keyed("run_config", dict)
    workload: dict[str, Any] = keyed("workload", dict)
    device: dict[str, Any] = keyed("device", dict)
    space: dict[str, Any] = keyed("space", dict)
    fingerprint: dict[str, Any] | None = key("fingerprint")
    memory_cap: str | None = key("memory_cap")
    base_args: dict[str, Any] = keyed("base_args", dict)
    base_model_kwargs: dict[str, Any] = keyed("base_model_kwargs", dict)
    peft: dict[str, Any] | None = key("peft")
    not_searched: list[Any] = keyed("not_searched", list)
    baseline: Baseline = field(default_factory=Baseline)
    finalists: tuple[FinalistRecord, ...] = ()
    # the looks the rounds' intervals hold over together (`autotune.measure.rounds.look_level`)
    rounds_looks: int | None = key("rounds_looks")
    rounds_look: int | None = key("rounds_look")
    answer: dict[str, Any] | None = None
    time_breakdown: dict[str, Any] | None = key("time_breakdown")
    activation_probes: dict[str, Any] | None = None
    batch_ladder: list[Any] | None = key("batch_ladder")
    batch_ladder_probe: dict[str, Any] | None = key("batch_ladder_probe")
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
    "answer": "answer",
    "whole_run": "whole_run",
}


def study_record(name: str, attrs: Mapping[str, Any]) -> StudyRecord:
    """A study's record from its name and user attrs.

    Raises:
        UsageError: the store was written by a newer autotune (its schema version is higher).
    """
    check_schema(f"study {name!r}", attrs.get("schema_version") or 0)
    answer = attrs.get("answer")
    return StudyRecord(
        name=name,
        **values(StudyRecord, attrs),
        baseline=Baseline.from_attrs(attrs.get("baseline")),
        finalists=tuple(FinalistRecord.from_attrs(f) for f in attrs.get("finalists") or ()),
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
    ``study_attrs(run_config=..., device=...)``; `Baseline`, finalists and `Answer` as
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


def read_study(study: Any) -> StudyRecord:
    """The record of an optuna `Study` (its name and user attrs)."""
    return study_record(study.study_name, study.user_attrs)


def write_study(study: Any, **facts: Any) -> None:
    """Store some of a study's facts (`study_attrs`) in an optuna `Study`."""
    for name, value in study_attrs(**facts).items():
        study.set_user_attr(name, value)
