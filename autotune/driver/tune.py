"""Bring your own Trainer: tune the efficiency knobs of a training script's own `Trainer`.

`tune` takes a constructed `transformers.Trainer` (any subclass, with its model or `model_init`,
train dataset, data collator, callbacks) and searches the knobs on it, as ``autotune search`` does
on a named model: the same store, study, baseline, finalists and answer. It hands back the
Trainer's `TrainingArguments` with the winner's knobs applied plus the model-load kwargs;
everything that is not a searched knob (learning rate, scheduler, seed, weight decay, ...) is kept
as given.

Trials run isolated, each in a fresh worker process, as ``autotune search`` runs them: the
Trainer's pieces are written to a file with `cloudpickle` (`autotune.workloads.user`), and each
worker builds its trial Trainer from them: a class derived from `AutotuneTrainer` and the user's own
Trainer class, so the user's overrides run in every trial. A piece that cannot be pickled is named
in one warning (`NotIsolatedWarning`), and the trials then run in the calling process, one after
another, each with a fresh model (``isolation="none"``, which can also be asked for).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import inspect
import os
import sys
import types
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_callback import DefaultFlowCallback, PrinterCallback, ProgressCallback

from autotune.answer.model import Answer
from autotune.driver.result import SearchResult
from autotune.driver.study import finish, open_study
from autotune.driver.trials import run_trials
from autotune.errors import UsageError, first_line
from autotune.executors.warm import start_forkserver
from autotune.logs import quiet_libraries
from autotune.measure.peak import release_device_memory
from autotune.options import ALIASES, KEYWORDS, run_config, with_option_keywords
from autotune.plan.base_args import RESERVED_ARGS
from autotune.plan.build import plan_for
from autotune.preflight import check_before_creating
from autotune.progress import LoggingReporter, Reporter
from autotune.records import read_study
from autotune.scratch import temporary_folder
from autotune.space.defaults import training_arguments
from autotune.space.knobs import CATALOGUE
from autotune.space.mapping import fp8_trial
from autotune.store.semantics import SemanticChange, study_changes
from autotune.trackers import tracking
from autotune.workloads.adapters import adapter_of
from autotune.workloads.sft import sft_data_args, sft_pieces
from autotune.workloads.tasks import Task
from autotune.workloads.user import UserWorkload, dump

# RunConfig fields that name a model or data: tune() takes them from the Trainer or from its own
# parameters (the budget and the study also by their RunConfig names, ``trials`` and ``study``, as
# `autotune.search` takes them). Ray and torchrun trials are not offered for a Trainer's pieces.
_NOT_OPTIONS = {
    "model",
    "space",
    "storage",
    "seq_len",
    "seed",
    "base_args",
    "task",
    "pretrained",
    "trust_remote_code",
    "dataset",
    "dataset_config",
    "split",
    "text_column",
    "tokenizer",
    "pad_to_multiple_of",
    "packing",
    "backend",
    "ray_address",
    "nproc_per_node",
    "peft",  # the Trainer's model is a PeftModel already, or is not
}
OPTIONS = tuple(name for name in KEYWORDS if name not in _NOT_OPTIONS)
"""The run options `tune` takes as keywords (docs/reference/options.md), by their field names."""


def _aliased(name: str) -> str | None:
    """The option another keyword of it names (``max_steps``: ``measure_steps``), or None."""
    alias = ALIASES.get(name)
    return alias.option if alias is not None else None


# The callbacks every Trainer adds itself: the trial Trainer adds its own.
_STOCK_CALLBACKS = (DefaultFlowCallback, PrinterCallback, ProgressCallback)


class NotIsolatedWarning(UserWarning):
    """A piece of the Trainer cannot be pickled for worker processes: the trials of `tune` run in
    the calling process instead (``isolation="none"``)."""


@dataclass
class TuneResult:
    """What `tune` found.

    Attributes:
        training_args: the Trainer's `TrainingArguments` with the answer's knobs applied, of their own
            class (an `SFTTrainer`'s `SFTConfig`).
        model_kwargs: model-load kwargs of the answer (``attn_implementation``): pass them to
            ``from_pretrained`` (or to `model_init`'s load); the defaults' when it keeps them.
        semantic_changes: the answer's differences from the baseline that change the training math.
        search: the underlying search result (the study, every trial, speedup and verdict).
        answer: the study's answer these arguments apply: the defaults (the knob values the
            Trainer's own arguments resolve to here, as the baseline measured them) when nothing
            beat them measurably, with the best measured configuration named as its alternative.
    """

    training_args: TrainingArguments
    model_kwargs: dict[str, Any]
    semantic_changes: list[SemanticChange]
    search: SearchResult
    answer: Answer


def tune(
    trainer: Trainer,
    space: str = "quick",
    n_trials: int | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    *,
    reporter: Reporter | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    debug: bool = False,
    **options: Any,
) -> TuneResult:
    """Search the knobs of `space` for a constructed `Trainer`, each trial in a worker process.

    Args:
        trainer: the script's `Trainer` (any subclass). Its `model_init` builds each trial's model
            (else a copy of its model is trained), its train dataset is read in order and cycled
            (samples with ``input_ids``, and ``attention_mask`` where padded: only real tokens
            count towards tokens/s), its data collator, callbacks, ``compute_loss_func`` and the
            attributes its class stored are used in every trial, and its arguments are the base
            config: their fields that are not searched knobs are kept as given, in their own class
            (TRL's `SFTTrainer`: its `SFTConfig`, which each trial rebuilds; `autotune.trial.sft`).
        space: a shipped space name or a YAML path (as ``--space``).
        n_trials: the study's budget of measured trials (as ``hyperparameter_search``'s; ``trials``,
            as `autotune.search` also takes it, names it too; default: as `RunConfig` declares it).
        storage: an optuna RDB URL (as ``--storage``; default ``AUTOTUNE_STORAGE`` or
            ``sqlite:///autotune.db``).
        study_name: the study (default: from the model, space and sequence length; ``study``
            names it too). An existing study of the same Trainer is continued.
        reporter: receives progress events (`autotune.RichReporter` prints them); the trackers of
            ``report_to`` (`autotune.trackers`) see them beside it.
        callbacks: extra Trainer callbacks added to every trial.
        debug: keep tracebacks of failed trials in their user attrs.
        options: more run options, by their field names as for `autotune.search`:
            ``memory_cap``, ``measure_steps`` (or a whole ``measure``), ``keep_semantics``,
            ``global_batch_size``, ``finalists``, ``measure_baseline``, ``isolation`` (``"none"``:
            trials in this process), ``workers``, ``output_dir``, ... (`OPTIONS`; the keywords of
            this signature).

    Raises:
        UsageError: not a `Trainer`, no train dataset, an optimizer given to the Trainer (the
            optimizer is a knob), an unknown option, a bad option value (its `field` names the
            option), a bad space or store.
        AutotuneError: what ``autotune search`` raises.
    """
    unknown = sorted(name for name in options if name not in OPTIONS and _aliased(name) not in OPTIONS)
    if unknown:
        raise UsageError(
            f"tune() takes no option {unknown[0]!r}",
            f"its options are {', '.join(OPTIONS)} (docs/reference/options.md)",
        )
    workload = user_workload(trainer, callbacks)
    user_kwargs = given_training_args(trainer.args)
    base = {k: v for k, v in user_kwargs.items() if k not in RESERVED_ARGS}
    named = {"n_trials": n_trials, "study_name": study_name}
    config = run_config(
        None,
        model=workload.name,
        space=space,
        **{key: value for key, value in named.items() if value is not None},
        storage=storage,
        seq_len=workload.seq_len,
        seed=int(trainer.args.seed),
        **options,
    )
    check_before_creating(config)  # nothing created yet: a bad address or folder fails in one line
    reporter = reporter or LoggingReporter()
    with (
        _off_the_device(trainer.model),
        temporary_folder("autotune-tune-", config.output_dir) as folder,
        tracking(config, reporter) as reporter,  # the trackers of report_to, beside the reporter
    ):
        workload_file: str | None = None
        if config.isolation == "process":
            start_forkserver()  # its imports overlap the pickling and planning here
            workload_file = os.path.join(folder, "workload.pkl")
            problem = write_workload(workload, workload_file)
            if problem is not None:
                warnings.warn(
                    f"autotune.tune: {problem}: trials run in this process instead (isolation='none')",
                    NotIsolatedWarning,
                    stacklevel=2,
                )
                config = dataclasses.replace(config, isolation="none", workers=None)
                workload_file = None
        plan = plan_for(config, workload, base)
        with quiet_libraries():
            study, done_before, remaining = open_study(plan, reporter)
            if remaining:
                run_trials(plan, study, remaining, reporter, (), debug, workload_file=workload_file)
        result = finish(study, config, done_before, reporter)
    # Measured without a GPU: the arguments say so, or TrainingArguments refuses bf16 on a CPU.
    answered = user_kwargs if plan.hardware.cuda else {**user_kwargs, "use_cpu": True}
    return _answer(result, answered, type(trainer.args))


tune.__signature__ = with_option_keywords(inspect.signature(tune), OPTIONS)  # type: ignore[attr-defined]


@contextlib.contextmanager
def _off_the_device(model: Any) -> Iterator[None]:
    """The caller's model on the CPU while the trials run, put back where it was at the end: its
    weights must not take the memory of the device the trials measure on (nor reach the workers as
    device tensors). A model spread over devices (``hf_device_map``) or quantized stays put."""
    device = next((p.device for p in model.parameters()), None) if hasattr(model, "parameters") else None
    spread = getattr(model, "hf_device_map", None) or getattr(model, "is_quantized", False)
    if device is None or device.type == "cpu" or spread:
        yield
        return
    model.to("cpu")
    release_device_memory()
    try:
        yield
    finally:
        model.to(device)


def user_workload(trainer: Trainer, callbacks: Sequence[TrainerCallback] = ()) -> UserWorkload:
    """The workload of a constructed Trainer: its model builder (or model), data, collator, class,
    callbacks (its own, then `callbacks`) and the attributes its class stored.

    Raises:
        UsageError: not a `Trainer`, no train dataset with a length, a model without a config, or
            an optimizer given to the Trainer.
    """
    if not isinstance(trainer, Trainer):
        raise UsageError(
            f"tune() takes a constructed transformers.Trainer, not a {type(trainer).__name__}",
            "pass Trainer(model_init=..., args=..., train_dataset=..., data_collator=...)",
        )
    dataset = trainer.train_dataset
    if dataset is None or not hasattr(dataset, "__len__") or len(dataset) == 0:
        raise UsageError("tune() needs a Trainer with a non-empty train_dataset with a length")
    if trainer.optimizer is not None or trainer.lr_scheduler is not None or trainer.optimizer_cls_and_kwargs:
        raise UsageError(
            "tune() searches the optimizer: the Trainer was given its own (optimizers= or "
            "optimizer_cls_and_kwargs=)",
            "build the Trainer without them; set the optimizer with TrainingArguments(optim=...)",
        )
    model = trainer.model
    config = getattr(model, "config", None)
    if config is None:
        raise UsageError(
            f"tune() needs a transformers model (with a config); the Trainer's is a {type(model).__name__}"
        )
    # The longest of the first samples: the sequence length memory and FLOPs are estimated for.
    seen = [dataset[i] for i in range(min(len(dataset), 256))]
    seq_len = max((len(s["input_ids"]) for s in seen if "input_ids" in s), default=128)
    # A PeftModel: its base model's class says what runs (attention kernels, checkpointing).
    get_base_model = getattr(model, "get_base_model", None)
    built = type(get_base_model() if callable(get_base_model) else model)
    task: Task = "causal-lm"
    if "SequenceClassification" in built.__name__:
        task = "sequence-classification"
    elif "MaskedLM" in built.__name__:
        task = "masked-lm"
    return UserWorkload(
        name=getattr(config, "_name_or_path", "") or built.__name__,
        task=task,
        config=config,
        seq_len=seq_len,
        model_init=trainer.model_init,
        model=None if trainer.model_init is not None else model,
        train_dataset=dataset,
        data_collator=trainer.data_collator,
        built_class=built,
        # the adapter of a PeftModel: its memory probe and export; each trial copies the model whole
        peft=adapter_of(model),
        trainer_class=type(trainer),
        trainer_attrs=trainer_attrs(trainer),
        args_class=type(trainer.args),
        sft=sft_pieces(trainer),
        callbacks=(
            *(c for c in trainer.callback_handler.callbacks if not _stock_callback(c, trainer.args)),
            *callbacks,
        ),
    )


def trainer_attrs(trainer: Trainer) -> dict[str, Any]:
    """What each trial's Trainer takes over from `trainer`: ``compute_loss_func``,
    ``processing_class``, and every attribute that `Trainer` itself never sets (what the user's
    subclass stored, in its ``__init__`` or later; none where Trainer's source cannot be read)."""
    stock = _stock_attribute_names()
    own = {} if stock is None else {k: v for k, v in vars(trainer).items() if k not in stock}
    carried = {"compute_loss_func": trainer.compute_loss_func, "processing_class": trainer.processing_class}
    return {**carried, **own}


@functools.cache
def _stock_attribute_names() -> frozenset[str] | None:
    """Every attribute `transformers.Trainer`'s own code assigns (``self.NAME = ...`` anywhere in
    the modules of its classes), read once from their source; None where it cannot be read."""
    found: set[str] = set()
    try:
        for base in Trainer.__mro__[:-1]:
            tree = ast.parse(inspect.getsource(sys.modules[base.__module__]))
            found.update(
                node.attr
                for node in ast.walk(tree)
                if isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            )
    except (OSError, TypeError, SyntaxError):
        return None
    return frozenset(found)


def _stock_callback(callback: TrainerCallback, args: TrainingArguments) -> bool:
    """Whether the Trainer added `callback` itself: flow and printing, or an integration that
    ``report_to`` asked for (the trials report to nothing)."""
    if isinstance(callback, _STOCK_CALLBACKS):
        return True
    from transformers.integrations import get_reporting_integration_callbacks

    return type(callback) in get_reporting_integration_callbacks(args.report_to)


def write_workload(workload: UserWorkload, path: str) -> str | None:
    """Write `workload` to `path` for the worker processes; None when done, else what could not be
    pickled and why, in a few words (the first of its pieces that fails alone)."""
    import cloudpickle

    try:
        dump(workload, path)
        return None
    except Exception as whole:
        failure = whole
    for name, piece in workload.pieces().items():
        try:
            cloudpickle.CloudPickler(_Discard()).dump(piece)
        except Exception as exc:
            return f"{name} ({type(piece).__name__}) cannot be pickled for worker processes ({_why(exc)})"
    return f"the Trainer's pieces cannot be pickled for worker processes ({_why(failure)})"


class _Discard:
    """A file that keeps nothing: what pickling a piece to test it writes to."""

    def write(self, data: bytes) -> int:
        return len(data)


def _why(exc: BaseException) -> str:
    text = first_line(exc, empty="")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def given_training_args(args: TrainingArguments) -> dict[str, Any]:
    """The fields of `args` the caller set, as kwargs that rebuild them with their own class
    (``type(args)``, TRL's `SFTConfig` included); ``output_dir`` always.

    A `TrainingArguments` field is set where it differs from `TrainingArguments`' default, even when
    the subclass changed that default itself (`SFTConfig`: checkpointing on, bf16): the knobs'
    baseline, the answer's semantic changes and the estimate read the base config over
    `TrainingArguments`' defaults. A field of the subclass's own is set where it differs from the
    subclass's default, and always where it is a knob (``packing``): the baseline's value, as are
    the `TrainingArguments` fields whose default the subclass changed."""
    defaults = TrainingArguments(output_dir=args.output_dir)
    own_defaults = defaults if type(args) is TrainingArguments else _defaults_of(args)
    given: dict[str, Any] = {"output_dir": args.output_dir}
    for f in dataclasses.fields(args):
        if not f.init or f.name.startswith("_"):
            continue
        own = not hasattr(defaults, f.name)
        default = getattr(own_defaults if own else defaults, f.name)
        value = getattr(args, f.name)
        # a default the subclass changed is spelled out too: an export for its own tools
        # (`trl sft`) must not leave it to that default
        changed = not own and getattr(own_defaults, f.name, default) != default
        if value != default or changed or (own and f.name in CATALOGUE):
            given[f.name] = getattr(value, "value", value)  # enums as their strings
    return given


def _defaults_of(args: TrainingArguments) -> Any:
    """The class of `args` as its own defaults make it on the same device (`SFTConfig` turns bf16
    on, which a CPU refuses without ``use_cpu``); its fields' declared defaults where its
    ``__post_init__`` refuses to run without more."""
    try:
        return type(args)(output_dir=args.output_dir, use_cpu=args.use_cpu)
    except (TypeError, ValueError):
        declared = {f.name: f.default for f in dataclasses.fields(args)}
        return types.SimpleNamespace(**{k: v for k, v in declared.items() if v is not dataclasses.MISSING})


def _answer(result: SearchResult, user_kwargs: dict[str, Any], args_class: type) -> TuneResult:
    """The Trainer's arguments with what the study's answer hands back applied. When it keeps the
    defaults, those are the knob values the baseline measured, which the Trainer's own arguments
    resolve to on this machine (the export writes the same)."""
    choice = result.answer.choice
    if choice is None:
        return TuneResult(training_arguments(args_class, **user_kwargs), {}, [], result, result.answer)
    tuned = training_arguments(
        args_class, **{**user_kwargs, **choice.training_args, **sft_data_args(args_class, choice.params)}
    )
    if fp8_trial(choice.params):
        # no field says fp8: the Trainer's Accelerator takes this, and accelerate picks torchao's
        # recipe first (the one the trial trained with)
        tuned.mixed_precision = "fp8"
    changes = study_changes(read_study(result.study), choice.params, choice.training_args)
    return TuneResult(tuned, dict(choice.model_kwargs), changes, result, result.answer)
