"""`--backend ray`: a search's trials run as Ray Tune trials, launched by
``Trainer.hyperparameter_search(backend="ray")``.

Each Ray trial asks the study itself, as an autotune worker does (`autotune.run.ray_trial`), so its
trial lands in the same SQL study with the same pre-checks, user attrs, constraints and owner, and
`show`, `export`, `report` and `resume` work unchanged. This module is the search's side:

- the Ray instance: a local one started for the search and shut down at the end (errors and
  Ctrl-C included), or a cluster joined with ``--ray-address`` (only this driver disconnects);
- resources per trial: one whole GPU, or all the CPU cores of a CPU machine (so trials on one
  machine measure the whole of it, one at a time);
- Ray's results folder in a temporary folder deleted after each round (trials write no
  checkpoint: they report only metrics);
- a Ray trial that fails (its actor died) is recorded on the optuna trial it ran, not raised as a
  `TuneError`; rounds go on until the study holds its budget, like the supervisor's loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import optuna

from autotune.errors import AutotuneError, UsageError

try:
    import ray
    import ray.tune
except ImportError:  # an optional extra: say how to get it, before anything is measured
    raise UsageError(
        "--backend ray needs Ray Tune, which is not installed", "pip install 'autotune[ray]'"
    ) from None
from autotune.progress import Reporter
from autotune.run.launcher import watchdog_seconds
from autotune.run.plan import Plan
from autotune.run.ray_trial import RAY_TRIAL_ATTR, RayLaunchTrainer
from autotune.run.worker import WorkerJob
from autotune.study.store import (
    FINISHED,
    fail_interrupted_trials,
    fail_running_trial,
    measured_count,
    summarize_trial,
)

# Rounds in a row that measure nothing (every Ray trial found only pre-checked trials, or died)
# after which the search stops.
MAX_EMPTY_ROUNDS = 3
# Set for the search's process while Ray runs: no usage report (no network), and Ctrl-C raised in
# the driver (Tune would otherwise swallow it and return normally, and the search would go on).
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "TUNE_DISABLE_SIGINT_HANDLER": "1",
    # Actors keep the search's working directory: relative paths (a SQLite file, a dataset) hold.
    "RAY_CHDIR_TO_TRIAL_DIR": "0",
    "RAY_AIR_NEW_OUTPUT": "0",
}


class RayTrialsFailed(AutotuneError):
    """Ray trials keep dying before they measure anything."""

    exit_code = 1


def run_ray_trials(
    plan: Plan,
    study: optuna.Study,
    target: int,
    reporter: Reporter,
    callbacks: Sequence[Any],
    debug: bool,
    should_stop: Callable[[], str | None],
) -> None:
    """Run Ray trials until the study holds `target` measured trials, or `should_stop` says why
    no more are worth starting."""
    address = plan.config.ray_address
    with _ray_env(), ray_instance(address) as started:
        resources = trial_resources()
        where = "a local Ray instance" if started else f"the Ray cluster at {address or 'this process'}"
        reporter.on_note(f"running trials on {where}, {_describe(resources)} per trial")
        job = WorkerJob(
            study_name=plan.study_name,
            storage_url=_absolute(plan.config.storage_url),
            budget=target,
            callbacks=tuple(callbacks),
            debug=debug,
            check_fingerprint=address is not None,  # other hosts must measure the same hardware
        )
        empty_rounds = 0
        while (missing := target - measured_count(study)) > 0:
            why = should_stop()
            if why is not None:
                reporter.on_note(why)
                return
            before = measured_count(study)
            errors = _round(plan, study, job, missing, resources, reporter)
            if measured_count(study) > before:
                empty_rounds = 0
                continue
            empty_rounds += 1
            if errors and empty_rounds >= MAX_EMPTY_ROUNDS:
                raise RayTrialsFailed(
                    f"{empty_rounds} rounds of Ray trials measured nothing: {errors[0]}",
                    "rerun with --backend optuna --debug to see the error in a worker",
                )
            if empty_rounds >= MAX_EMPTY_ROUNDS:
                reporter.on_note(f"stopped after {empty_rounds} rounds of Ray trials that measured nothing")
                return


def _round(
    plan: Plan,
    study: optuna.Study,
    job: WorkerJob,
    n_trials: int,
    resources: dict[str, float],
    reporter: Reporter,
) -> list[str]:
    """One `hyperparameter_search(backend="ray")` of `n_trials` Ray trials; the errors of those
    that died (their optuna trials are recorded as failed)."""
    events = _TrialEvents(study, reporter)
    results = tempfile.mkdtemp(prefix="autotune-ray-results-", dir=plan.config.output_dir)
    trainer = RayLaunchTrainer(job, results)
    # A backstop for the whole round: each trial is bounded by its own watchdog already.
    bound_s = n_trials * (watchdog_seconds(plan.config.measure.trial_timeout_s) + 60)
    tune_logger = logging.getLogger("ray.tune")
    level = tune_logger.level
    # Tune logs each dead trial's traceback; the study records it (and the reporter shows it).
    tune_logger.setLevel(logging.CRITICAL)
    try:
        trainer.hyperparameter_search(
            hp_space=lambda trial: {},  # the values come from the study, asked in each actor
            n_trials=n_trials,
            direction="maximize",
            backend="ray",
            resources_per_trial=resources,
            storage_path=results,
            name="autotune",
            verbose=0,
            progress_reporter=_Silent(),
            raise_on_failed_trial=False,  # a Ray trial that died is a recorded result
            callbacks=[events],
            time_budget_s=bound_s,
        )
    except Exception:
        # After the trials, transformers picks Ray's best trial, which fails when none reported a
        # feasible objective (all infeasible, skipped or dead). Every trial is in the study already.
        if not events.ended:
            raise
    finally:
        tune_logger.setLevel(level)
        remove_results(results)
    return events.settle()


class _TrialEvents(ray.tune.Callback):
    """Runs in the search's process: hands each finished trial to the reporter, collects the
    errors of Ray trials that died, and records them on the optuna trials they ran."""

    def __init__(self, study: optuna.Study, reporter: Reporter) -> None:
        self.study = study
        self.reporter = reporter
        self.shown = {t.number for t in study.get_trials(deepcopy=False, states=FINISHED)}
        self.ray_trials: set[str] = set()
        self.errors: dict[str, str] = {}
        self.ended = False

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.ray_trials.add(trial.trial_id)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._show_finished()

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.errors[trial.trial_id] = _error_text(trial)
        self._fail_orphans()
        self._show_finished()

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.ended = True

    def settle(self) -> list[str]:
        """After the round: no optuna trial of its (ended) Ray trials is left RUNNING."""
        self._fail_orphans(ended=self.ray_trials)
        fail_interrupted_trials(self.study)
        self._show_finished()
        return list(self.errors.values())

    def _fail_orphans(self, ended: set[str] | None = None) -> None:
        for trial in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            ray_trial = trial.user_attrs.get(RAY_TRIAL_ATTR)
            if ray_trial in self.errors:
                reason, message = _reason(self.errors[ray_trial])
            elif ended is not None and ray_trial in ended:
                reason, message = "crashed", "its Ray trial ended before the trial did"
            else:
                continue
            fail_running_trial(self.study, trial._trial_id, reason, message, trained=True)

    def _show_finished(self) -> None:
        for trial in self.study.get_trials(deepcopy=False, states=FINISHED):
            if trial.number not in self.shown:
                self.shown.add(trial.number)
                self.reporter.on_trial_end(summarize_trial(trial))


class _Silent(ray.tune.ProgressReporter):
    """Ray's progress table stays quiet: the search's reporter shows the trials."""

    def should_report(self, trials: list[Any], done: bool = False) -> bool:
        return False

    def report(self, trials: list[Any], done: bool, *sys_info: Any) -> None:
        return None


def _error_text(trial: Any) -> str:
    text = ""
    with contextlib.suppress(Exception):
        text = str(trial.get_pickled_error() or "")
    if not text and trial.error_file:
        with contextlib.suppress(OSError), open(trial.error_file, errors="replace") as handle:
            text = handle.read()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "the Ray trial failed without an error message"
    # A Python error in the actor carries its traceback: its last line says what happened.
    return (lines[-1] if "Traceback" in text else lines[0])[:300]


def _reason(error: str) -> tuple[str, str]:
    lowered = error.lower()
    if "sigkill" in lowered or "out of memory" in lowered or "oom" in lowered.split():
        return "killed", f"its Ray actor was killed: {error}"
    return "crashed", f"its Ray trial failed: {error}"


def _absolute(storage_url: str) -> str:
    """A SQLite URL with its file made absolute: Ray actors may run in another directory."""
    from autotune.study.urls import sqlite_file

    database = sqlite_file(storage_url)
    if database is None or database.is_absolute():
        return storage_url
    return storage_url.replace(str(database), str(database.resolve()), 1)


def trial_resources() -> dict[str, float]:
    """One whole GPU per trial (with the CPUs that come with it), or all the CPU cores of a CPU
    machine; on a cluster, what its smallest machine of the kind has, so every trial can start."""
    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    gpu_nodes = [r for r in nodes if r.get("GPU", 0) >= 1]
    if gpu_nodes:
        cpus = min(max(1, int(r.get("CPU", 1) // r["GPU"])) for r in gpu_nodes)
        return {"cpu": cpus, "gpu": 1}
    return {"cpu": max(1, min(int(r.get("CPU", 1)) for r in nodes))}


def _describe(resources: dict[str, float]) -> str:
    cpus = f"{resources['cpu']:g} CPU core(s)"
    return f"1 GPU and {cpus}" if resources.get("gpu") else cpus


@contextlib.contextmanager
def ray_instance(address: str | None) -> Iterator[bool]:
    """Ray for one search: joins the cluster at `address`, or starts a local instance (in a
    temporary folder) that is shut down at the end, also on errors and Ctrl-C. A Ray this process
    already runs (a Python caller's own ``ray.init``) is used as it is and left running. Yields
    whether a local instance was started here."""
    if ray.is_initialized():
        yield False
        return
    temp_dir = None if address else tempfile.mkdtemp(prefix="autotune-ray-")
    try:
        try:
            options: dict[str, Any] = {"_temp_dir": temp_dir} if temp_dir else {}
            ray.init(
                address=address,
                include_dashboard=False if address is None else None,
                log_to_driver=False,
                logging_level=logging.ERROR,  # its start-up notices are not the search's
                **options,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UsageError(
                f"cannot start or join Ray at {address or 'a local instance'}: {str(exc).splitlines()[0]}",
                "check --ray-address (HOST:PORT of the head, or ray://HOST:10001)",
            ) from None
        yield address is None
    finally:
        ray.shutdown()  # a joined cluster: only this driver disconnects (its actors end with it)
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


@contextlib.contextmanager
def _ray_env() -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in RAY_ENV}
    os.environ.update(RAY_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def remove_results(path: str) -> None:
    """Delete a round's Ray results folder (experiment state; no checkpoints are written)."""
    shutil.rmtree(path, ignore_errors=True)
