"""Bring your own Trainer: tune the efficiency knobs of a training script's own model and data.

`tune` takes what a script already has (a `model_init` or a model name, the train dataset, the data
collator and the base `TrainingArguments`), searches the knobs, and hands back the same
`TrainingArguments` with the winner's knobs applied plus the model-load kwargs. Everything that is
not a searched knob (learning rate, scheduler, seed, weight decay, ...) is kept as given.

The user's objects cannot go through the study store, so unlike ``autotune search`` every trial
runs in the calling process, one after another, each with a freshly built model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
import torch
from transformers import TrainerCallback, TrainingArguments

from autotune.config import _RESERVED_ARGS, MeasureSettings, RunConfig
from autotune.driver.result import SearchResult
from autotune.driver.study import check_direction, describe_study, header
from autotune.driver.trials import run_trials
from autotune.errors import UsageError
from autotune.logs import quiet_libraries
from autotune.plan.build import plan_for
from autotune.progress import Reporter
from autotune.study.fingerprint import fingerprint
from autotune.study.semantics import SemanticChange, study_changes
from autotune.study.store import best_trial, measured_count, ranked_trials
from autotune.workloads.data import Cycled
from autotune.workloads.workload import Task, Workload, load_config


@dataclass
class TuneResult:
    """What `tune` found.

    Attributes:
        training_args: the caller's `TrainingArguments` with the winner's knobs applied.
        model_kwargs: model-load kwargs of the winner (``attn_implementation``): pass them to
            ``from_pretrained`` (or to `model_init`'s load).
        semantic_changes: the winner's differences from the baseline that change the training math.
        search: the underlying search result (the study, every trial, speedup and verdict).
    """

    training_args: TrainingArguments
    model_kwargs: dict[str, Any]
    semantic_changes: list[SemanticChange]
    search: SearchResult


@dataclass
class UserWorkload(Workload):
    """A workload made of the caller's objects: their model builder, dataset and collator."""

    model_init: Callable[[], torch.nn.Module] | None = None
    train_dataset: Any = None
    data_collator: Any = None
    built_class: type | None = None
    _lengths: dict[int, int] = dataclasses.field(default_factory=dict)

    def model_class(self) -> type:
        return self.built_class or super().model_class()

    def build_model(self, model_kwargs: dict[str, Any]) -> torch.nn.Module:
        if self.model_init is None:
            return super().build_model(model_kwargs)
        model = self.model_init()
        attention = model_kwargs.get("attn_implementation")
        if attention is not None:
            model.set_attn_implementation(attention)  # type: ignore[operator]
        if hasattr(model.config, "use_cache"):
            model.config.use_cache = False
        return model

    def dataset(self, seed: int) -> torch.utils.data.Dataset:
        return Cycled(self.train_dataset)

    def collator(self) -> Any:
        from transformers import default_data_collator

        return self.data_collator or default_data_collator

    def tokens_in(self, first: int, count: int) -> int:
        n = len(self.train_dataset)
        return sum(self._length((first + i) % n) for i in range(count))

    def _length(self, index: int) -> int:
        if index not in self._lengths:
            sample = self.train_dataset[index]
            mask = sample.get("attention_mask")
            self._lengths[index] = int(sum(mask)) if mask is not None else len(sample["input_ids"])
        return self._lengths[index]

    def dataset_identity(self) -> str:
        ds = self.train_dataset
        return f"user:{type(ds).__name__}:{len(ds)}:{getattr(ds, '_fingerprint', '')}"


def tune(
    train_dataset: Any,
    args: TrainingArguments,
    *,
    model_init: Callable[[], torch.nn.Module] | None = None,
    model: str | None = None,
    data_collator: Any = None,
    space: str = "quick",
    trials: int = 8,
    storage: str | None = None,
    study: str | None = None,
    memory_cap: str | None = None,
    measure: MeasureSettings | None = None,
    keep_semantics: bool = False,
    global_batch_size: int | None = None,
    finalists: int = 3,
    measure_baseline: bool = True,
    reporter: Reporter | None = None,
    callbacks: Sequence[TrainerCallback] = (),
) -> TuneResult:
    """Search the knobs of `space` for the caller's own training run, in this process.

    Args:
        train_dataset: samples with ``input_ids`` (and ``attention_mask`` where padded): only
            their real tokens count towards tokens/s. Read in order, and cycled if short.
        args: the base `TrainingArguments`: every trial starts from them; its fields that are not
            searched knobs are kept as given, in the trials and in the returned arguments.
        model_init: builds a fresh model (called once per trial). Or `model`: a hub id or a local
            folder, built from its config with random weights.
        data_collator: the collator the script uses (default: `default_data_collator`).
        space, trials, storage, study, memory_cap, measure, keep_semantics, global_batch_size,
            finalists, measure_baseline: as for ``autotune search``.
        reporter: receives progress events (`autotune.cli._render.RichReporter` prints them).
        callbacks: extra Trainer callbacks added to every trial.

    Raises:
        UsageError: neither or both of `model_init` and `model`, a bad space or store.
        AutotuneError: what ``autotune search`` raises.
    """
    if (model_init is None) == (model is None):
        raise UsageError(
            "tune() needs exactly one of model_init= and model=", "pass model_init=your_function"
        )
    if not hasattr(train_dataset, "__len__") or len(train_dataset) == 0:
        raise UsageError("tune() needs a non-empty train_dataset with a length")
    user_kwargs = given_training_args(args)
    base = {k: v for k, v in user_kwargs.items() if k not in _RESERVED_ARGS}
    workload = _workload(train_dataset, model_init, model, data_collator)
    name = model or getattr(workload.config, "_name_or_path", "") or type(workload.config).__name__
    config = RunConfig(
        model=str(name),
        space=space,
        trials=trials,
        storage=storage,
        study=study,
        seq_len=workload.seq_len,
        memory_cap=memory_cap,
        seed=int(args.seed),
        measure=measure or MeasureSettings(),
        keep_semantics=keep_semantics,
        global_batch_size=global_batch_size,
        finalists=finalists,
        measure_baseline=measure_baseline,
        # The user's model_init, dataset and collator live in this process: a worker process
        # could not rebuild them from the store, so trials run here.
        isolation="none",
    )
    reporter = reporter or Reporter()
    plan = plan_for(config, workload, base)
    with quiet_libraries():
        found = optuna.create_study(
            storage=plan.storage, study_name=plan.study_name, direction="maximize", load_if_exists=True
        )
        check_direction(found)
        if "fingerprint" not in found.user_attrs:
            describe_study(found, plan, fingerprint(plan))
        done_before = measured_count(found)
        remaining = max(0, trials - done_before)
        reporter.on_search_start(header(plan, done_before, remaining))
        if remaining:
            run_trials(plan, found, remaining, reporter, callbacks, debug=False)
    result = SearchResult(
        found, config, ranked_trials(found), best_trial(found), measured_count(found) - done_before
    )
    reporter.on_search_end(result)
    # Measured without a GPU: the arguments say so, or TrainingArguments refuses bf16 on a CPU.
    return _answer(result, user_kwargs if plan.hardware.cuda else {**user_kwargs, "use_cpu": True})


def given_training_args(args: TrainingArguments) -> dict[str, Any]:
    """The fields of `args` the caller set (those that differ from the `TrainingArguments`
    defaults), as kwargs that rebuild them; ``output_dir`` always."""
    defaults = TrainingArguments(output_dir=args.output_dir)
    given: dict[str, Any] = {"output_dir": args.output_dir}
    for f in dataclasses.fields(TrainingArguments):
        if not f.init or f.name.startswith("_"):
            continue
        value, default = getattr(args, f.name), getattr(defaults, f.name)
        if value != default:
            given[f.name] = getattr(value, "value", value)  # enums as their strings
    return given


def _answer(result: SearchResult, user_kwargs: dict[str, Any]) -> TuneResult:
    best = result.best_config()
    if result.best is None:
        return TuneResult(TrainingArguments(**user_kwargs), {}, [], result)
    tuned = TrainingArguments(**{**user_kwargs, **best["training_args"]})
    changes = study_changes(result.study.user_attrs, result.best.params, best["training_args"])
    return TuneResult(tuned, best["model_kwargs"], changes, result)


def _workload(
    dataset: Any, model_init: Callable[[], Any] | None, model: str | None, collator: Any
) -> UserWorkload:
    # The longest of the first samples: the sequence length memory and FLOPs are estimated for.
    seen = [dataset[i] for i in range(min(len(dataset), 256))]
    seq_len = max((len(s["input_ids"]) for s in seen if "input_ids" in s), default=128)
    if model_init is not None:
        probe = model_init()  # once, for the config and class that availability rules read
        config, built = probe.config, type(probe)
        del probe
    else:
        assert model is not None
        config, built = load_config(model), None
    task: Task = (
        "sequence-classification"
        if built is not None and "SequenceClassification" in built.__name__
        else "causal-lm"
    )
    return UserWorkload(
        name=model or getattr(config, "_name_or_path", "") or type(config).__name__,
        task=task,
        config=config,
        seq_len=seq_len,
        model_init=model_init,
        train_dataset=dataset,
        data_collator=collator,
        built_class=built,
    )
