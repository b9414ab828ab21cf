"""A run resolved once against this machine: the space, workload, hardware rules, base config and
store every trial of a search (and every worker) works from."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config import RunConfig, load_base_args
from autotune.errors import UsageError
from autotune.space import SearchSpace, builtin_spaces, load_space, parse_space, precision_of
from autotune.space.availability import (
    Hardware,
    ModelSupport,
    detect_hardware,
    model_support,
    value_unavailable,
)
from autotune.study.store import default_study_name, open_storage
from autotune.workloads.data import DataSource
from autotune.workloads.workload import Workload, resolve_workload


@dataclass
class Plan:
    """A run resolved against this machine: everything the trials need, decided once."""

    config: RunConfig
    space: SearchSpace
    workload: Workload
    hardware: Hardware
    model: ModelSupport
    base_args: dict[str, Any]
    study_name: str
    storage: Any
    not_searched: list[str] = dataclasses.field(default_factory=list)
    cap_bytes: int | None = None


def plan_search(config: RunConfig, open_store: bool = True, stored: Mapping[str, Any] | None = None) -> Plan:
    """Resolve a run configuration: space, workload, hardware rules, base config, store.

    Args:
        config: the run configuration.
        open_store: open (and create) the store at ``config.storage_url``.
        stored: the user attrs of the study this run continues, where a worker takes the base
            config and, when the space file is not on this host, the space from.

    Raises:
        UsageError: a bad space, model, base config, or an unreachable global batch size.
        StoreError: the store cannot be opened.
    """
    if stored is not None and "base_args" in stored:
        base = dict(stored["base_args"])
    else:
        base = load_base_args(config.base_args) if config.base_args else {}
    return plan_for(config, workload_of(config), base, open_store, stored)


def plan_for(
    config: RunConfig,
    workload: Workload,
    base: dict[str, Any],
    open_store: bool = True,
    stored: Mapping[str, Any] | None = None,
) -> Plan:
    """`plan_search` for an already resolved workload and base config (the Python API's own
    model and data, which a run configuration cannot name)."""
    space = _space(config.space, stored)
    hardware = detect_hardware()
    world_size = trial_world_size(config)
    model = model_support(workload.model_class())
    space = space.for_hardware(*hardware.batch_multiple())
    if config.keep_semantics:
        space = space.keep_semantics(base, world_size)
    elif config.global_batch_size is not None:
        space = space.with_global_batch(config.global_batch_size, world_size)
    # Values that cannot run on this machine are not offered to the sampler at all; rules on
    # combinations are checked per trial (a skipped trial with a reason and a constraint).
    space, dropped = space.without(lambda knob, value: value_unavailable(knob, value, hardware, model))
    return Plan(
        config=config,
        space=space,
        workload=workload,
        hardware=hardware,
        model=model,
        base_args=base,
        not_searched=dropped,
        cap_bytes=cap.resolve(hardware.memory_bytes) if (cap := config.memory_cap_parsed) else None,
        study_name=config.study or default_study_name(config.model, space.name, workload.seq_len),
        storage=open_storage(config.storage_url) if open_store else None,
    )


def trial_world_size(config: RunConfig) -> int:
    """Processes that train each trial together: the supervisor's torchrun groups
    (``--nproc-per-node``), or the launcher this process runs under (``WORLD_SIZE``)."""
    if config.nproc_per_node > 1:
        return config.nproc_per_node
    return int(os.environ.get("WORLD_SIZE", "1"))


def _space(name_or_path: str, stored: Mapping[str, Any] | None) -> SearchSpace:
    if stored is not None and stored.get("space") and not _exists_here(name_or_path):
        # The file form stored with the study (already resolved for the study's hardware).
        described = dict(stored["space"])
        return parse_space(
            {"description": described.get("description", ""), "knobs": described.get("knobs", {})},
            name=Path(name_or_path).stem,
            source=f"the space stored with the study ({name_or_path})",
        )
    return load_space(name_or_path)


def _exists_here(name_or_path: str) -> bool:
    return name_or_path in builtin_spaces() or Path(name_or_path).exists()


def plan_from_study(
    study_name: str, storage_url: str, check_fingerprint: bool = False, existing: bool = False
) -> tuple[Plan, Any]:
    """The plan of a stored study, rebuilt from the run configuration stored with it: what a worker
    (on this host or another) runs. With `check_fingerprint`, a host whose hardware or libraries
    differ from the study's is refused: its measurements would not be comparable. `existing`: the
    store's schema is known to be current (see `open_storage`).

    Raises:
        UsageError: no such study, a study without a stored run configuration, or a mismatch.
    """
    import optuna

    from autotune.study.fingerprint import check_resume, fingerprint
    from autotune.study.store import load_existing_study

    study = load_existing_study(storage_url, study_name, existing)
    attrs = study.user_attrs
    if "run_config" not in attrs:
        raise UsageError(
            f"study {study_name!r} has no stored run configuration: it was not made by autotune search",
            "start it with `autotune search`",
        )
    config = RunConfig.from_dict(attrs["run_config"], storage=storage_url, study=study_name)
    plan = plan_search(config, open_store=False, stored=attrs)
    plan.storage = study._storage
    if check_fingerprint and attrs.get("fingerprint"):
        check_resume(study_name, attrs["fingerprint"], fingerprint(plan), config.allow_mismatch)
    return plan, optuna.load_study(study_name=study_name, storage=plan.storage)


def workload_of(config: RunConfig) -> Workload:
    """The workload a run configuration names: model, task and data. Tokenized data comes from
    the `datasets` cache after the study's first process built it."""
    data = None
    if config.dataset is not None:
        data = DataSource(config.dataset, config.dataset_config, config.split, config.text_column)
    return resolve_workload(
        config.model,
        config.seq_len,
        task=config.task,
        pretrained=config.pretrained,
        trust_remote_code=config.trust_remote_code,
        data=data,
        tokenizer=config.tokenizer,
        pad_to_multiple_of=config.pad_to_multiple_of,
    )


def data_notes(plan: Plan, world_size: int = 1) -> list[str]:
    """What the user should know about the data: a dataset shorter than a trial is cycled."""
    data = plan.workload.data
    if data is None:
        return []
    space, base = plan.space, plan.base_args

    def largest(knob: str, default: int) -> int:
        values = space.knobs.get(knob) or [space.fixed.get(knob, base.get(knob, default))]
        return max(int(v) for v in values)

    if space.global_batch is not None:
        most = space.global_batch
    else:
        most = (
            largest("per_device_train_batch_size", 8) * largest("gradient_accumulation_steps", 1) * world_size
        )
    needed = most * plan.config.measure.step_budget
    if len(data) >= needed:
        return [f"dataset: {len(data):,} samples ({plan.workload.dataset_identity()})"]
    return [
        f"dataset: {len(data):,} samples, fewer than the {needed:,} a trial may read: it is cycled "
        "(samples repeat; throughput does not depend on their content)"
    ]


def baseline_values(plan: Plan) -> dict[str, Any]:
    """The knob values a user gets without autotune: the base config, else the Transformers
    defaults (what `TrainingArguments()` and `from_pretrained` pick on this machine)."""
    base = plan.base_args
    compile_backend = base.get("torch_compile_backend") or ("inductor" if base.get("torch_compile") else None)
    values: dict[str, Any] = {
        "per_device_train_batch_size": int(base.get("per_device_train_batch_size", 8)),
        "gradient_accumulation_steps": int(base.get("gradient_accumulation_steps", 1)),
        "precision": precision_of(base),
        "optim": str(base.get("optim", "adamw_torch")),
        "torch_compile": compile_backend or "off",
        "attn_implementation": "sdpa" if plan.model.sdpa else "eager",
        "activation_checkpointing": bool(base.get("activation_checkpointing", False)),
        "dataloader_num_workers": int(base.get("dataloader_num_workers", 0)),
        # TrainingArguments pins memory by default, and turns it off itself without a GPU.
        "dataloader_pin_memory": bool(base.get("dataloader_pin_memory", True)) and plan.hardware.cuda,
        "torch_empty_cache_steps": int(base.get("torch_empty_cache_steps") or 0),
    }
    if compile_backend == "inductor":
        values["torch_compile_mode"] = str(base.get("torch_compile_mode") or "default")
    return values


def base_training_args(plan: Plan, output_dir: str) -> dict[str, Any]:
    """`TrainingArguments` kwargs every trial starts from: the user's base config, then what a
    throughput trial needs (train only; save, evaluate and log nothing)."""
    return {
        **plan.base_args,
        "output_dir": output_dir,
        "max_steps": plan.config.measure.step_budget,
        "report_to": "none",
        "save_strategy": "no",
        "eval_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        # Keep NaN/inf in the reported loss: a trial that diverges must not look healthy.
        "logging_nan_inf_filter": False,
        # Synthetic samples are already random; a sequential sampler costs nothing to build.
        "train_sampling_strategy": "sequential",
        "seed": plan.config.seed,
        # Without a GPU, TrainingArguments refuses bf16 unless told the CPU is meant.
        "use_cpu": not plan.hardware.cuda,
        "ddp_timeout": int(plan.config.ddp_timeout_s),
    }
