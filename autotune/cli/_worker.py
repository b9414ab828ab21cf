"""`autotune worker`: join a stored study from any host and measure its trials until its budget is met."""

from __future__ import annotations

from typing import Annotated

from autotune.cli._options import (
    DebugOpt,
    StorageOpt,
    StoredStudyOpt,
    StoreRetryOpt,
    StudyArg,
    WorkersOpt,
    apply_store_retry,
    run_option,
    study_named,
)

# The flag of the run option, with this command's meaning: an opt-in of this host's.
TrustRemoteCodeOpt = Annotated[
    bool,
    run_option(
        "trust_remote_code",
        "Allow the code from the model's hub repository that the study's run configuration asks "
        "for. Without it, a study that asks for remote code is refused: the store does not choose "
        "what code runs here.",
    ),
]


def worker_command(
    study_argument: StudyArg = None,
    study: StoredStudyOpt = None,
    storage: StorageOpt = None,
    workers: WorkersOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    store_retry_s: StoreRetryOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Measure trials of a stored study until it holds its budget: a pool member on any host.

    The run configuration (model, space, measurement, cap) comes from the store; this host must
    match the study's hardware and library versions. The supervisor that created the study
    measures the baseline and re-measures the finalists; a worker only measures trials.
    """
    study = study_named("worker", study, study_argument)
    from autotune.options import RunConfig
    from autotune.store.resumable import stored_run_config

    apply_store_retry(store_retry_s)
    url = RunConfig(storage=storage).storage_url
    # What the store alone refuses (a newer configuration, remote code not allowed) is refused
    # before the training stack's imports (seconds); `join_study` reads it again to plan.
    stored_run_config(study, url, trust_remote_code=trust_remote_code)
    from autotune.driver.pool import join_study
    from autotune.view import RichReporter

    with RichReporter() as reporter:
        join_study(
            study, url, reporter=reporter, workers=workers, debug=debug, trust_remote_code=trust_remote_code
        )
