"""The checks across run options that `RunConfig` makes when it is built: each raises a
`UsageError` naming the options at fault. `config`: the `RunConfig` being built (typed `Any`: this
module sits below it)."""

from __future__ import annotations

from typing import Any

from autotune.errors import UsageError


def check_execution(config: Any) -> None:
    if config.isolation not in ("process", "none"):
        raise UsageError(
            f"isolation must be 'process' or 'none', got {config.isolation!r}", field="isolation"
        )
    if config.workers is not None and config.workers < 1:
        raise UsageError(f"workers must be at least 1, got {config.workers}", field="workers")
    if config.nproc_per_node < 1:
        raise UsageError(
            f"nproc_per_node must be at least 1, got {config.nproc_per_node}", field="nproc_per_node"
        )
    if config.ddp_timeout_s <= 0:
        raise UsageError(f"ddp_timeout_s must be positive, got {config.ddp_timeout_s}", field="ddp_timeout_s")
    if config.nproc_per_node > 1 and (config.isolation == "none" or config.workers not in (None, 1)):
        raise UsageError(
            f"nproc_per_node={config.nproc_per_node} runs each trial as its own torchrun group",
            "drop isolation='none' and workers",
            field=("nproc_per_node", "isolation", "workers"),
        )
    if config.workers not in (None, 1) and config.isolation == "none":
        raise UsageError(
            f"workers={config.workers} needs worker processes",
            "drop isolation='none', or workers",
            field=("workers", "isolation"),
        )


def check_run_length(config: Any) -> None:
    if not config.loss_tolerance > 0:
        raise UsageError(
            f"loss_tolerance must be positive, got {config.loss_tolerance}", field="loss_tolerance"
        )
    if config.train_tokens is not None and config.train_steps is not None:
        raise UsageError(
            "give train_tokens or train_steps, not both",
            "drop one of them",
            field=("train_tokens", "train_steps"),
        )
    for name in ("train_tokens", "train_steps"):
        value = getattr(config, name)
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1, got {value}", field=name)
    if config.train_steps is not None and not config.measure_baseline:
        raise UsageError(
            "train_steps counts steps of the baseline's batch, which measure_baseline=False does not measure",
            "drop measure_baseline=False, or give train_tokens",
            field=("train_steps", "measure_baseline", "train_tokens"),
        )
    if config.price_per_hour is not None and not config.price_per_hour > 0:
        raise UsageError(
            f"price_per_hour must be positive, got {config.price_per_hour}", field="price_per_hour"
        )
    if config.eval_batch_size is not None and config.eval_batch_size < 1:
        raise UsageError(
            f"eval_batch_size must be at least 1, got {config.eval_batch_size}", field="eval_batch_size"
        )


def check_backend(config: Any) -> None:
    if config.backend not in ("optuna", "ray"):
        raise UsageError(f"backend must be 'optuna' or 'ray', got {config.backend!r}", field="backend")
    if config.backend != "ray":
        if config.ray_address is not None:
            raise UsageError(
                "ray_address only applies with backend='ray'",
                "add backend='ray'",
                field=("ray_address", "backend"),
            )
        return
    if config.isolation == "none":
        raise UsageError(
            "backend='ray' runs trials in Ray actors, not in this process",
            "drop isolation='none', or backend='ray'",
            field=("backend", "isolation"),
        )
    if config.workers is not None:
        raise UsageError(
            f"workers={config.workers} does not apply with backend='ray': Ray runs one trial per GPU "
            "(or per CPU machine)",
            "drop workers",
            field=("workers", "backend"),
        )
    if config.nproc_per_node > 1:
        raise UsageError(
            "nproc_per_node runs trials as torchrun groups, not Ray actors",
            "drop nproc_per_node, or backend='ray'",
            field=("nproc_per_node", "backend"),
        )


def check_workload(config: Any) -> None:
    if config.task is not None and config.task not in ("causal-lm", "masked-lm", "seq-classification"):
        raise UsageError(
            f"unknown task {config.task!r}", "use causal-lm, masked-lm or seq-classification", field="task"
        )
    if config.pad_to_multiple_of is not None and config.pad_to_multiple_of < 1:
        raise UsageError(
            f"pad_to_multiple_of must be at least 1, got {config.pad_to_multiple_of}",
            field="pad_to_multiple_of",
        )
    if config.packing not in ("blocks", "examples"):
        raise UsageError(f"unknown packing {config.packing!r}", "use 'blocks' or 'examples'", field="packing")
    if config.packing == "examples" and config.task == "seq-classification":
        raise UsageError(
            "packing='examples' applies to language-model text; classification samples are always "
            "one text each",
            "drop packing",
            field="packing",
        )
    given = [
        name
        for name, value in (
            ("dataset_config", config.dataset_config),
            ("text_column", config.text_column),
            ("tokenizer", config.tokenizer),
            ("pad_to_multiple_of", config.pad_to_multiple_of),
            ("packing", None if config.packing == "blocks" else config.packing),
        )
        if value is not None
    ]
    if given and config.dataset is None:
        raise UsageError(
            f"{given[0]} only applies with dataset",
            "give dataset (a file, a folder or a hub id)",
            field=(given[0], "dataset"),
        )


# The trackers a search logs to (`autotune.trackers`), by the names the Trainer's ``report_to`` uses.
TRACKERS = ("tensorboard", "mlflow", "wandb")


def tracker_names(value: Any) -> tuple[str, ...]:
    """``report_to`` as the tuple of tracker names it asks for: one name, a comma-separated list,
    or a list or tuple of either, each of `TRACKERS` or ``none`` (no tracker), in the order first
    given, each once.

    Raises:
        UsageError: a name that is not a tracker.
    """
    items = [value] if isinstance(value, str) else list(value or ())
    names: list[str] = []
    for item in items:
        for name in str(item).split(","):
            name = name.strip().lower()
            if name in ("", "none") or name in names:
                continue
            if name not in TRACKERS:
                raise UsageError(
                    f"unknown tracker {name!r} in report_to",
                    f"use {', '.join(TRACKERS)} or none",
                    field="report_to",
                )
            names.append(name)
    return tuple(names)
