"""`search()`: one call from a run configuration to a finished study.

cli -> config -> plan (space, workload, hardware) -> supervisor over an executor (each job one
`Trainer.hyperparameter_search` trial on the shared optuna study) -> store.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

from transformers import TrainerCallback

from autotune.driver.result import SearchResult
from autotune.driver.study import finish, open_study
from autotune.executors.warm import start_forkserver_for
from autotune.logs import quiet_libraries
from autotune.options import RunConfig, run_config, with_option_keywords
from autotune.plan.build import plan_search
from autotune.preflight import check_before_creating
from autotune.progress import LoggingReporter, Reporter
from autotune.trackers import tracking


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
        config: the run configuration (default `RunConfig()`).
        overrides: run options that replace the config's: every field of `RunConfig` and of
            `MeasureSettings` by its name (``search(model="tiny-llama", trials=4, measure_steps=10)``),
            as docs/reference/options.md lists them; the keywords of this signature.
        reporter: receives progress events; the default prints nothing. The trackers of
            ``report_to`` (`autotune.trackers`) see them beside it.
        callbacks: extra Trainer callbacks added to every trial.
        enqueue: knob values to run first (optuna `enqueue_trial`), e.g. a baseline.
        debug: keep tracebacks of failed trials in their user attrs.

    Raises:
        UsageError: an unknown option, a bad option value (its `field` names the option), space,
            model or storage URL.
        StoreError: the store cannot be opened, or the study is not a throughput study.
    """
    config = run_config(config, **overrides)
    reporter = reporter or LoggingReporter()
    # The trial machinery (torch, the Trainer) is imported once the input is known to be good: a
    # bad model, space or store fails in seconds.
    check_before_creating(config)  # nothing created yet: a bad address or folder fails in one line
    with tracking(config, reporter) as tracked:  # the trackers of report_to, beside the reporter
        return _search(config, tracked, callbacks, enqueue, debug)


def _search(
    config: RunConfig,
    reporter: Reporter,
    callbacks: Sequence[TrainerCallback],
    enqueue: Sequence[Mapping[str, Any]],
    debug: bool,
) -> SearchResult:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun / accelerate launch
        from autotune.driver.group import search_in_group

        return search_in_group(config, reporter, callbacks, enqueue, debug)
    start_forkserver_for(config.model, config.isolation)  # its imports overlap this process's planning
    plan = plan_search(config)
    with quiet_libraries():
        study, done_before, remaining = open_study(plan, reporter, enqueue)
        if remaining:
            from autotune.driver.trials import run_trials

            run_trials(plan, study, remaining, reporter, callbacks, debug)
    return finish(study, config, done_before, reporter)


search.__signature__ = with_option_keywords(inspect.signature(search))  # type: ignore[attr-defined]
