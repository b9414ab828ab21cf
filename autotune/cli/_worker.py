"""`autotune worker`: join a stored study from any host and measure its trials until its budget is met."""

from __future__ import annotations

from typing import Annotated

import typer

from autotune.cli._options import DebugOpt, StorageOpt, WorkersOpt


def worker_command(
    study: Annotated[str, typer.Argument(help="Study name (see `autotune studies`).")],
    storage: StorageOpt = None,
    workers: WorkersOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Measure trials of a stored study until it holds its budget: a pool member on any host.

    The run configuration (model, space, measurement, cap) comes from the store; this host must
    match the study's hardware and library versions. The supervisor that created the study
    measures the baseline and re-measures the finalists; a worker only measures trials.
    """
    from autotune.cli._render import RichReporter
    from autotune.config import RunConfig
    from autotune.run.pool import join_study

    url = RunConfig(storage=storage).storage_url
    with RichReporter() as reporter:
        join_study(study, url, reporter=reporter, workers=workers, debug=debug)
