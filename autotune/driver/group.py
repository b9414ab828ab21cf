"""A search inside a process group the user launched (``torchrun ... -m autotune search``,
``accelerate launch``): multi-node searches.

Every rank runs the search in its own process; rank 0 creates the study and asks it for each
trial (the Trainer's rank-zero trial generation) and every decision that ends or skips a trial is
rank 0's, broadcast before the next collective (see `autotune.measure.ranks`). The group is made
with ``--ddp-timeout``, on CPU too, so a rank that waits for a failed one gives up within it. A
failure on one rank alone is recorded with the trial, and then ends every rank: the group cannot
be trusted to line its collectives up again. The message says how to resume.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.driver.result import SearchResult
from autotune.driver.study import finish, open_study
from autotune.driver.trials import run_trials
from autotune.errors import AutotuneError, UsageError
from autotune.logs import quiet_libraries
from autotune.measure.ranks import from_rank_zero, init_group, is_rank_zero
from autotune.options import RunConfig
from autotune.plan.build import plan_search
from autotune.progress import Reporter
from autotune.store.session import StudyStore
from autotune.trial.errors import one_line
from autotune.urls import display_url


class GroupFailed(AutotuneError):
    """A rank of a launched search failed alone; the group ended after recording the trial."""


def search_in_group(
    config: RunConfig,
    reporter: Reporter,
    callbacks: Sequence[Any] = (),
    enqueue: Sequence[Mapping[str, Any]] = (),
    debug: bool = False,
) -> SearchResult:
    """Run (or continue) a search on every rank of the launched process group."""
    if config.nproc_per_node > 1:
        raise UsageError(
            "nproc_per_node starts its own torchrun groups: do not launch the search under torchrun too",
            "drop nproc_per_node, or run `autotune search` without a launcher",
            field="nproc_per_node",
        )
    config = dataclasses.replace(config, isolation="none")  # trials run in the launched processes
    rank, _ = init_group(config.ddp_timeout_s)
    quiet = reporter if is_rank_zero() else Reporter()
    with quiet_libraries():
        # Rank 0 creates the study first (two processes creating one SQLite study race on its
        # schema); the others open it once it exists, or stop with rank 0's error.
        opened: tuple[Any, ...] = ("failed", None)
        if is_rank_zero():
            try:
                plan = plan_search(config)
                study, done_before, remaining = open_study(plan, quiet, enqueue)
                opened = ("ok", done_before, remaining)
            except AutotuneError as exc:
                from_rank_zero(("failed", (type(exc).__name__, exc.message, exc.hint)))
                raise
        opened = from_rank_zero(opened)
        if opened[0] == "failed":
            raise AutotuneError(f"rank 0 stopped: {opened[1][1]}", opened[1][2])
        _, done_before, remaining = opened
        if not is_rank_zero():
            plan = plan_search(config)
            study = StudyStore.load(plan.storage, plan.study_name)
        if remaining:
            try:
                run_trials(plan, study, remaining, quiet, callbacks, debug)
            except AutotuneError:
                raise
            except Exception as exc:
                raise GroupFailed(
                    f"rank {rank}: {one_line(exc)}; the trial is recorded, and the process group "
                    "cannot go on after a failure on one rank",
                    f"continue with your launcher: ... -m autotune resume --study {plan.study_name} "
                    f"--storage {display_url(config.storage_url)}",
                ) from exc
    return finish(study, config, done_before, quiet)
