"""`search()`: one call from a run configuration to a finished study.

cli -> config -> space -> workload -> driver (Trainer.hyperparameter_search, optuna) -> store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
import torch
from transformers import TrainerCallback
from transformers.utils import logging as hf_logging

from autotune import __version__
from autotune.config import RunConfig
from autotune.errors import StoreError
from autotune.measure import ThroughputCallback
from autotune.progress import Reporter, TrialSummary
from autotune.space import SearchSpace, load_space
from autotune.store import best_trial, default_study_name, finished_count, open_storage, ranked_trials
from autotune.workload import Workload, resolve_workload


@dataclass
class SearchResult:
    """What a search leaves behind.

    Attributes:
        study: the optuna study (in the store, readable by optuna's CLI and dashboard).
        config: the run configuration used.
        trials: every finished trial of the study, best first.
        best: the best completed trial, or None if none completed.
        ran: how many trials this call ran (0 when the budget was already spent).
    """

    study: optuna.Study
    config: RunConfig
    trials: list[TrialSummary]
    best: TrialSummary | None
    ran: int

    def best_config(self) -> dict[str, Any]:
        """The best trial as ``{"training_args": {...}, "model_kwargs": {...}}``."""
        if self.best is None:
            return {}
        return {
            "training_args": dict(self.best.attrs.get("training_args", {})),
            "model_kwargs": dict(self.best.attrs.get("model_kwargs", {})),
        }


def search(
    config: RunConfig | None = None,
    *,
    reporter: Reporter | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    enqueue: Sequence[Mapping[str, Any]] = (),
    debug: bool = False,
    **overrides: Any,
) -> SearchResult:
    """Run (or continue) a throughput search and return the study's result.

    Args:
        config: the run configuration; keyword `overrides` replace its fields
            (``search(model="tiny-llama", trials=4)`` works without a config).
        reporter: receives progress events; the default prints nothing.
        callbacks: extra Trainer callbacks added to every trial.
        enqueue: knob values to run first (optuna `enqueue_trial`), e.g. a baseline.
        debug: keep tracebacks of failed trials in their user attrs.

    Raises:
        UsageError: a bad space, model, flag value or storage URL.
        StoreError: the store cannot be opened, or the study is not a throughput study.
    """
    config = dataclasses.replace(config or RunConfig(), **overrides)
    reporter = reporter or Reporter()
    space = load_space(config.space)
    workload = resolve_workload(config.model, config.seq_len)
    study_name = config.study or default_study_name(config.model, space.name, workload.seq_len)
    storage = open_storage(config.storage_url)

    with _quiet_libraries():
        study = optuna.create_study(
            storage=storage, study_name=study_name, direction="maximize", load_if_exists=True
        )
        _check_direction(study)
        _describe_study(study, config, space, workload)
        done_before = finished_count(study)
        remaining = max(0, config.trials - done_before)
        reporter.on_search_start(_header(config, space, workload, study_name, done_before, remaining))
        if remaining:
            for params in enqueue:
                study.enqueue_trial(dict(params), skip_if_exists=True)
            _run_trials(
                config,
                space,
                workload,
                storage,
                study_name,
                remaining,
                done_before,
                reporter,
                callbacks,
                debug,
            )

    ranked = ranked_trials(study)
    result = SearchResult(study, config, ranked, best_trial(study), finished_count(study) - done_before)
    reporter.on_search_end(result)
    return result


def _run_trials(
    config: RunConfig,
    space: SearchSpace,
    workload: Workload,
    storage: optuna.storages.RDBStorage,
    study_name: str,
    n_trials: int,
    done_before: int,
    reporter: Reporter,
    callbacks: Sequence[TrainerCallback],
    debug: bool,
) -> None:
    from autotune.trainer import AutotuneTrainer  # imports Trainer machinery only when trials run

    with tempfile.TemporaryDirectory(prefix="autotune-", dir=config.output_dir) as scratch:
        dataset_tokens = workload.seq_len
        measurement = ThroughputCallback(config.measure, dataset_tokens, reporter)
        trainer = AutotuneTrainer(
            workload=workload,
            space=space,
            base_args=_base_args(config, scratch),
            measurement=measurement,
            reporter=reporter,
            callbacks=callbacks,
            debug=debug,
        )
        try:
            _hyperparameter_search(trainer, space, storage, study_name, n_trials, config.seed + done_before)
        except ValueError:
            # The Trainer asks the study for its best trial at the end, which raises when no trial
            # completed; every trial is already stored with its reason, so that is a result too.
            study = optuna.load_study(study_name=study_name, storage=storage)
            if study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
                raise


def _hyperparameter_search(
    trainer: Any, space: SearchSpace, storage: Any, study_name: str, n_trials: int, seed: int
) -> None:
    trainer.hyperparameter_search(
        hp_space=space.hp_space,
        n_trials=n_trials,
        direction="maximize",
        backend="optuna",
        storage=storage,
        study_name=study_name,
        load_if_exists=True,
        # Offset by the trials already stored, so a resumed study does not replay the first
        # run's random start-up suggestions.
        sampler=optuna.samplers.TPESampler(seed=seed),
    )


def _base_args(config: RunConfig, output_dir: str) -> dict[str, Any]:
    """`TrainingArguments` kwargs every trial starts from: train only, save and log nothing."""
    return {
        "output_dir": output_dir,
        "max_steps": config.measure.step_budget,
        "report_to": "none",
        "save_strategy": "no",
        "eval_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        # Keep NaN/inf in the reported loss: a trial that diverges must not look healthy.
        "logging_nan_inf_filter": False,
        # Synthetic samples are already random; a sequential sampler costs nothing to build.
        "train_sampling_strategy": "sequential",
        "seed": config.seed,
        # Without a GPU, TrainingArguments refuses bf16 unless told the CPU is meant.
        "use_cpu": not torch.cuda.is_available(),
    }


def _check_direction(study: optuna.Study) -> None:
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise StoreError(
            f"study {study.study_name!r} exists but minimizes its objective: it is not an autotune study",
            "pick another --study name",
        )


def _describe_study(study: optuna.Study, config: RunConfig, space: SearchSpace, workload: Workload) -> None:
    """Store what the study measures (once, at creation), for inspection and export."""
    if "autotune_version" in study.user_attrs:
        return
    study.set_user_attr("autotune_version", __version__)
    study.set_user_attr("run_config", config.to_dict())
    study.set_user_attr("workload", workload.describe())
    study.set_user_attr("space", space.to_dict())
    study.set_user_attr("space_fingerprint", space.fingerprint())
    study.set_user_attr("memory_cap", config.memory_cap)
    study.set_user_attr("device", device_description())


def device_description() -> dict[str, Any]:
    """The hardware the trials run on."""
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return {
            "type": "cuda",
            "name": props.name,
            "count": torch.cuda.device_count(),
            "memory_bytes": int(props.total_memory),
            "capability": f"{props.major}.{props.minor}",
        }
    return {"type": "cpu", "name": "cpu", "threads": torch.get_num_threads(), "cores": os.cpu_count()}


def _header(
    config: RunConfig,
    space: SearchSpace,
    workload: Workload,
    study_name: str,
    done_before: int,
    remaining: int,
) -> dict[str, Any]:
    return {
        "model": workload.name,
        "task": workload.task,
        "seq_len": workload.seq_len,
        "space": f"{space.name} ({len(space.knobs)} knobs, {space.grid_size()} combinations)",
        "storage": config.storage_url,
        "study": study_name,
        "budget": config.trials,
        "finished": done_before,
        "to_run": remaining,
        "device": device_description(),
        "memory_cap": config.memory_cap,
    }


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """Silence optuna's and transformers' per-trial INFO logs; reporters show trials instead."""
    optuna_level = optuna.logging.get_verbosity()
    hf_level = hf_logging.get_verbosity()
    optuna.logging.set_verbosity(logging.WARNING)
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        optuna.logging.set_verbosity(optuna_level)
        hf_logging.set_verbosity(hf_level)
