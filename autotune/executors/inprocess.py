"""The in-process executor: each job in the search's own process, one after another, on one
Trainer (``--isolation none``, a search under the user's launcher, `autotune.tune` on a Trainer
whose pieces cannot be pickled).
No isolation: memory figures include what earlier trials left behind, and an error ends the search."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from autotune.executors.base import Ended, Executor
from autotune.measure.peak import frozen_heap
from autotune.plan.resolved import Plan
from autotune.progress import Reporter
from autotune.scratch import temporary_folder
from autotune.store.session import StudyStore
from autotune.trial.compile_cache import shared_compile_cache, study_compile_cache
from autotune.trial.compose import build_trainer
from autotune.trial.entry import run_on
from autotune.trial.job import Job
from autotune.trial.trainer import AutotuneTrainer


class InProcessExecutor(Executor):
    """Runs each job to its end when it is started (see the module docstring).

    Args:
        plan: the resolved run, used as it is (the Python API's own model and data included).
        study: its study.
        reporter: receives the trials' events.
        callbacks: extra Trainer callbacks.
        debug: keep tracebacks of failed trials.
        trainer: a Trainer to run the jobs on (benchmarks replay a table with one); default: an
            `AutotuneTrainer` built here.
    """

    capacity = 1

    def __init__(
        self,
        plan: Plan,
        study: StudyStore,
        reporter: Reporter,
        callbacks: Sequence[Any] = (),
        debug: bool = False,
        trainer: AutotuneTrainer | None = None,
    ) -> None:
        self.plan = plan
        self.study = study
        self._stack = contextlib.ExitStack()
        # The search's own process compiles into the study's cache too (restored on close).
        self._stack.enter_context(shared_compile_cache(study_compile_cache(plan)))
        if trainer is None:
            scratch = self._stack.enter_context(temporary_folder("autotune-", plan.config.output_dir))
            trainer = build_trainer(plan, scratch, reporter, callbacks, debug)
        self.trainer = trainer
        self._stack.enter_context(frozen_heap())
        self._ended: list[Ended] = []

    def start(self, job: Job) -> None:
        # What escapes a job here (a trial's own failures are recorded results already) ends the
        # search, as any error of its process would: a measurement's error reaches its caller.
        self._ended.append(Ended(job, run_on(self.trainer, self.plan, self.study, job)))

    def wait(self, timeout_s: float) -> list[Ended]:
        ended, self._ended = self._ended, []
        return ended

    def running(self) -> list[Job]:
        return [ended.job for ended in self._ended]

    def close(self) -> None:
        self._stack.close()
