"""A stored study's run configuration, read and checked from the store alone: `autotune resume` and
`autotune worker` refuse what they cannot continue (no configuration, a newer schema, remote code
not allowed, a user's own Trainer) before they import the training stack, and
`autotune.plan.build.plan_from_study` plans from what this returns. Light: no torch.
"""

from __future__ import annotations

from typing import Any

from autotune.errors import UsageError
from autotune.options import RunConfig
from autotune.records import StudyRecord, read_study
from autotune.store.session import StudyStore
from autotune.store.trust import refuse_stored_remote_code


def refuse_user_trainer_study(study_name: str, record: StudyRecord) -> None:
    """Refuse to continue, from the store alone, a study that `autotune.tune` made on a user's own
    Trainer (its stored workload names the Trainer class): its model and data are not in the store.

    Raises:
        UsageError: such a study.
    """
    trainer = (record.workload or {}).get("trainer")
    if trainer:
        raise UsageError(
            f"study {study_name!r} was made by autotune.tune() on your own Trainer ({trainer}), whose "
            "model and data are not in the store",
            f"continue it from Python: autotune.tune(trainer, study_name={study_name!r})",
        )


def stored_run_config(
    study_name: str,
    storage_url: str,
    existing: bool = False,
    trust_remote_code: bool | None = None,
    own_workload: bool = False,
    **overrides: Any,
) -> tuple[StudyStore, StudyRecord, RunConfig]:
    """The study, its record and the run configuration stored with it (`overrides`: fields the
    caller sets, as `RunConfig.from_dict` takes them). `existing`: the store's schema is known to
    be current (see `autotune.store.storage.open_storage`). `trust_remote_code`: whether this
    process's own command line allows code the configuration asks for (None: not checked).
    `own_workload`: the caller brings the workload (a supervisor's handed-over Trainer pieces), so
    a study of a user's own Trainer is no refusal.

    Raises:
        UsageError: no such study, a study of a user's own Trainer, one without a stored run
            configuration or with a newer one than this autotune reads, or one that asks for
            remote code this process was not allowed.
    """
    study = StudyStore.open(storage_url, study_name, existing)
    record = read_study(study)
    if not own_workload:
        refuse_user_trainer_study(study_name, record)
    if not record.run_config:
        raise UsageError(
            f"study {study_name!r} has no stored run configuration: it was not made by autotune search",
            "start it with `autotune search`",
        )
    if trust_remote_code is not None:  # before the workload is resolved, which runs that code
        refuse_stored_remote_code(record.run_config, trust_remote_code)
    config = RunConfig.from_dict(record.run_config, storage=storage_url, study=study_name, **overrides)
    return study, record, config
