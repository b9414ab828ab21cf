"""Resolving a run configuration (or a stored study) into a `Plan`: the space, workload, hardware
rules, base config and store every trial of a search (and every worker) works from."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune.options import RunConfig, cap_bytes
from autotune.plan.base_args import load_base_args
from autotune.plan.resolved import Plan, study_fingerprint, trial_world_size
from autotune.records import StudyRecord
from autotune.space import SearchSpace, builtin_spaces, load_space, parse_space
from autotune.space.availability import detect_hardware, model_support
from autotune.space.knobs import value_unavailable
from autotune.store.fingerprint import check_resume
from autotune.store.resumable import stored_run_config
from autotune.store.storage import default_study_name, open_storage
from autotune.workloads.adapters import load_peft
from autotune.workloads.data import DataSource
from autotune.workloads.workload import Workload, resolve_workload


def plan_search(
    config: RunConfig,
    open_store: bool = True,
    stored: StudyRecord | None = None,
    workload: Workload | None = None,
) -> Plan:
    """Resolve a run configuration: space, workload, hardware rules, base config, store.

    Args:
        config: the run configuration.
        open_store: open (and create) the store at ``config.storage_url``.
        stored: the record of the study this run continues, where a worker takes the base
            config and, when the space file is not on this host, the space from.
        workload: the workload, already built (a worker of the Python API's own Trainer pieces);
            None: the one `config` names.

    Raises:
        UsageError: a bad space, model, base config, or an unreachable global batch size.
        StoreError: the store cannot be opened.
    """
    if stored is not None and stored.base_args:
        base = dict(stored.base_args)
    else:
        base = load_base_args(config.base_args) if config.base_args else {}
    workload = workload or workload_of(config)
    if stored is not None and stored.peft:
        workload.attach_adapter(dict(stored.peft), resolved=True)  # as the study's first process resolved it
    elif config.peft is not None:
        workload.attach_adapter(load_peft(config.peft, workload.task))
    return plan_for(config, workload, base, open_store, stored)


def plan_for(
    config: RunConfig,
    workload: Workload,
    base: dict[str, Any],
    open_store: bool = True,
    stored: StudyRecord | None = None,
) -> Plan:
    """`plan_search` for an already resolved workload and base config (the Python API's own
    model and data, which a run configuration cannot name)."""
    space = _space(config.space, stored)
    hardware = detect_hardware()
    world_size = trial_world_size(config)
    # trials that train a peft adapter on a frozen base: a 4-bit base (QLoRA) is possible there
    adapter = getattr(workload, "adapter_config", None)
    adapters = adapter is not None and adapter() is not None
    support: dict[str, Any] = dict(workload.trainer_support())  # a Trainer's own (TRL's SFTConfig)
    model = replace(
        model_support(workload.model_class()),
        padded=workload.padded,
        adapters=adapters,
        **support,
    )
    space = space.for_hardware(*hardware.batch_multiple())
    if config.keep_semantics:
        space = space.keep_semantics(base, world_size)
    elif config.global_batch_size is not None:
        space = space.with_global_batch(config.global_batch_size, world_size)
    if stored is not None and stored.batch_ladder is not None:
        space = space.with_ladder(stored.batch_ladder)  # as the study's first process resolved it
    # Values that cannot run on this machine are not offered to the sampler at all; rules on
    # combinations are checked per trial (a skipped trial with a reason and a constraint).
    space, single_rank = space.for_world_size(world_size)
    space, dropped = space.without(lambda knob, value: value_unavailable(knob, value, hardware, model))
    dropped = [*single_rank, *dropped]
    return Plan(
        config=config,
        space=space,
        workload=workload,
        hardware=hardware,
        model=model,
        base_args=base,
        not_searched=dropped,
        cap_bytes=cap_bytes(config.memory_cap or None, hardware.memory_bytes),
        study_name=config.study or default_study_name(config.model, space.name, workload.seq_len),
        storage=open_storage(config.storage_url) if open_store else None,
    )


def _space(name_or_path: str, stored: StudyRecord | None) -> SearchSpace:
    if stored is not None and stored.space and not _exists_here(name_or_path):
        # The file form stored with the study (already resolved for the study's hardware).
        described = dict(stored.space)
        return parse_space(
            {"description": described.get("description", ""), "knobs": described.get("knobs", {})},
            name=Path(name_or_path).stem,
            source=f"the space stored with the study ({name_or_path})",
        )
    return load_space(name_or_path)


def _exists_here(name_or_path: str) -> bool:
    return name_or_path in builtin_spaces() or Path(name_or_path).exists()


def plan_from_study(
    study_name: str,
    storage_url: str,
    check_fingerprint: bool = False,
    existing: bool = False,
    trust_remote_code: bool | None = None,
    workload: Workload | None = None,
) -> tuple[Plan, Any]:
    """The plan of a stored study, rebuilt from the run configuration stored with it: what a worker
    (on this host or another) runs. With `check_fingerprint`, a host whose hardware or libraries
    differ from the study's is refused: its measurements would not be comparable. `existing`: the
    store's schema is known to be current (see `open_storage`). `trust_remote_code`: whether this
    process's own command line allows code the stored configuration asks for (None: not checked,
    for the workers of a supervisor that checked). `workload`: the run's workload as its supervisor
    handed it over (the Python API's own Trainer pieces), instead of the one the configuration names.

    Raises:
        UsageError: what `autotune.store.resumable.stored_run_config` refuses, or a mismatch.
    """
    study, record, config = stored_run_config(
        study_name, storage_url, existing, trust_remote_code, own_workload=workload is not None
    )
    plan = plan_search(config, open_store=False, stored=record, workload=workload)
    plan.storage = study.storage
    if check_fingerprint and record.fingerprint:
        check_resume(study_name, record.fingerprint, study_fingerprint(plan), config.allow_mismatch)
    return plan, study


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
        packing=config.packing,
    )
