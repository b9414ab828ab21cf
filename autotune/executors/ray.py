"""`--backend ray`: a search's trials run as Ray Tune trials, launched by
``Trainer.hyperparameter_search(backend="ray")``.

Each Ray trial asks the study itself, as an autotune worker does (`autotune.executors.ray_actor`), so its
trial lands in the same SQL study with the same pre-checks, user attrs, constraints and owner, and
`show`, `export`, `report` and `resume` work unchanged. This module is the search's side:

- the Ray instance: a local one started for the search and shut down at the end (errors and
  Ctrl-C included), or a cluster joined with ``--ray-address`` (only this driver disconnects);
- resources per trial: one whole GPU, or all the CPU cores of a CPU machine (so trials on one
  machine measure the whole of it, one at a time);
- Ray's results folder in a temporary folder deleted after each round (trials write no
  checkpoint: they report only metrics);
- a Ray trial that fails (its actor died) is a job that failed, which the search records on the
  optuna trial it ran, not a `TuneError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from autotune.errors import UsageError, first_line

try:
    import ray
    import ray.tune
except ImportError:  # an optional extra: say how to get it, before anything is measured
    raise UsageError(
        "backend='ray' needs Ray Tune, which is not installed",
        "pip install 'hf-autotune[ray]'",
        field="backend",
    ) from None
from autotune.executors.base import Ended, Executor, watchdog_seconds
from autotune.executors.processes import descendants
from autotune.executors.ray_actor import JOB_KEY, RayLaunchTrainer
from autotune.plan.resolved import Plan
from autotune.preflight import ADDRESS_HINT, probe_address
from autotune.progress import Reporter
from autotune.scratch import make_folder
from autotune.store.outcomes import CRASHED, KILLED
from autotune.store.session import FINISHED_STATES, StudyStore
from autotune.store.trials import trial_summaries
from autotune.trial.job import Job, JobFailed, JobResult, TrialDone
from autotune.urls import sqlite_file

# Set for the search's process while Ray runs: no usage report (no network), and Ctrl-C raised in
# the driver (Tune would otherwise swallow it and return normally, and the search would go on).
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "TUNE_DISABLE_SIGINT_HANDLER": "1",
    # Actors keep the search's working directory: relative paths (a SQLite file, a dataset) hold.
    "RAY_CHDIR_TO_TRIAL_DIR": "0",
    "RAY_AIR_NEW_OUTPUT": "0",
}


class RayExecutor(Executor):
    """Trial jobs as Ray Tune trials; ``measure`` jobs (baseline, finalists) in `local`.

    Trial jobs started between two waits run as one round: one
    ``Trainer.hyperparameter_search(backend="ray")`` whose Ray trials each run one job (a grid
    over the jobs' ids), queued by Tune when the cluster cannot run them all at once. `wait` runs
    the round to its end (each Ray trial is bounded by its actor's watchdog, the round by its
    time budget).
    """

    def __init__(self, plan: Plan, study: StudyStore, reporter: Reporter, local: Executor) -> None:
        self.plan = plan
        self.study = study
        self.reporter = reporter
        self.local = local
        self.capacity = max(1, plan.config.trials)  # Tune queues what the cluster cannot run at once
        self.queue: list[Job] = []
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(_ray_env())
        self._stack.enter_context(no_dead_worker_notices())
        address = plan.config.ray_address
        # A local instance's folder, which its reaper removes even if this process is killed:
        # the rounds' results folders go in it.
        self._local_folder = self._stack.enter_context(ray_instance(address))
        started = self._local_folder is not None
        self.resources = trial_resources()
        where = "a local Ray instance" if started else f"the Ray cluster at {address or 'this process'}"
        self._where = f"running trials on {where}, {_describe(self.resources)} per trial"

    def describe(self) -> str | None:
        return self._where

    def start(self, job: Job) -> None:
        if job.kind != "trial":  # measurements and the batch ladder run in local workers
            self.local.start(job)
            return
        address = self.plan.config.ray_address
        self.queue.append(
            dataclasses.replace(
                job,
                storage_url=_absolute(job.storage_url),
                check_fingerprint=address is not None,  # other hosts must measure the same hardware
                supervisor=None,  # an actor may run on another host: its own watchdog bounds it
                watchdog_s=watchdog_seconds(self.plan.config.measure.trial_timeout_s),
            )
        )

    def running(self) -> list[Job]:
        return [*self.local.running(), *self.queue]

    def wait(self, timeout_s: float) -> list[Ended]:
        if self.local.running():
            return self.local.wait(timeout_s)
        if not self.queue:
            return []
        jobs, self.queue = self.queue, []
        return self._round(jobs)

    def close(self) -> None:
        self.local.close()
        self._stack.close()

    def _round(self, jobs: list[Job]) -> list[Ended]:
        events = _TrialEvents(self.study, self.reporter)
        results = make_folder("autotune-ray-results-", self.plan.config.output_dir or self._local_folder)
        trainer = RayLaunchTrainer({job.job_id or "": job for job in jobs}, results)
        # A backstop for the whole round: each trial is bounded by its own watchdog already.
        bound_s = len(jobs) * (watchdog_seconds(self.plan.config.measure.trial_timeout_s) + 60)
        tune_logger = logging.getLogger("ray.tune")
        level = tune_logger.level
        # Tune logs each dead trial's traceback; the study records it (and the reporter shows it).
        tune_logger.setLevel(logging.CRITICAL)
        try:
            trainer.hyperparameter_search(
                hp_space=lambda trial: {JOB_KEY: ray.tune.grid_search([job.job_id for job in jobs])},  # type: ignore[dict-item]
                n_trials=1,  # once over the grid: one Ray trial per job
                direction="maximize",
                backend="ray",
                resources_per_trial=self.resources,
                storage_path=results,
                name="autotune",
                verbose=0,
                progress_reporter=_Silent(),
                raise_on_failed_trial=False,  # a Ray trial that died is a recorded result
                callbacks=[events],
                time_budget_s=bound_s,
            )
        except Exception:
            # After the trials, transformers picks Ray's best trial, which fails when none reported
            # a feasible objective (all infeasible, skipped or dead). Every trial is in the study.
            if not events.ended:
                raise
        finally:
            tune_logger.setLevel(level)
            remove_results(results)
        events.show_finished()
        return [Ended(job, events.result_of(job)) for job in jobs]


class _TrialEvents(ray.tune.Callback):
    """Runs in the search's process: hands each finished trial to the reporter and keeps what
    each Ray trial reported, or the error it died of."""

    def __init__(self, study: StudyStore, reporter: Reporter) -> None:
        self.study = study
        self.reporter = reporter
        self.shown = study.numbers(FINISHED_STATES)
        self.errors: dict[str, str] = {}  # job id -> error
        self.reported: dict[str, dict[str, Any]] = {}  # job id -> last result
        self.ended = False

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict, **info: Any
    ) -> None:
        self.reported[trial.config.get(JOB_KEY, "")] = dict(result)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        if trial.last_result:
            self.reported[trial.config.get(JOB_KEY, "")] = dict(trial.last_result)
        self.show_finished()

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.errors[trial.config.get(JOB_KEY, "")] = _error_text(trial)
        self.show_finished()

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.ended = True

    def result_of(self, job: Job) -> JobResult:
        key = job.job_id or ""
        if key in self.errors:
            return failure_of(self.errors[key])
        reported = self.reported.get(key)
        if reported is None or "trial" not in reported:
            return JobFailed(CRASHED, "its Ray trial ended before the trial did")
        number = int(reported["trial"])
        return TrialDone(number >= 0, number if number >= 0 else None, str(reported.get("why", "")))

    def show_finished(self) -> None:
        for trial in trial_summaries(self.study, FINISHED_STATES):
            if trial.number not in self.shown:
                self.shown.add(trial.number)
                self.reporter.on_trial_end(trial)


class _Silent(ray.tune.ProgressReporter):
    """Ray's progress table stays quiet: the search's reporter shows the trials."""

    def should_report(self, trials: list[Any], done: bool = False) -> bool:
        return False

    def report(self, trials: list[Any], done: bool, *sys_info: Any) -> None:
        return None


def _error_text(trial: Any) -> str:
    """Ray's text of a Ray trial that died: its pickled error, else its error file."""
    text = ""
    with contextlib.suppress(Exception):
        text = str(trial.get_pickled_error() or "")
    if not text and trial.error_file:
        with contextlib.suppress(OSError), open(trial.error_file, errors="replace") as handle:
            text = handle.read()
    return text.strip()


# Ray's words for an actor whose process ended without a Python error (its connection closed):
# Ray cannot tell a signal from an exit code there, and says so ("killed by the OOM killer ...").
_PROCESS_DIED = ("worker process has died", "actor died unexpectedly")
# Ray's memory monitor (its process-died text names "the OOM killer" only as a possible cause).
_MEMORY = ("low on memory", "ray.exceptions.outofmemoryerror")
_TRACEBACK_LINE = re.compile(r'^\s*File ".+", line \d+', re.MULTILINE)  # Ray drops "Traceback"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours the actor's name


def failure_of(error: str) -> JobFailed:
    """How a Ray trial that died ended, from Ray's text of it (kept whole in ``ray_error``).

    - Ray's memory monitor killed it: ``killed``;
    - a Python error in the actor: ``crashed``, with the error's last line;
    - its process ended under it (SIGKILL, most often the kernel's out-of-memory killer, or any
      death Python did not see): ``killed``, with its pid (Ray does not say which signal);
    - anything else: ``crashed``, with Ray's first line that is not its "Failure # N" header.
    """
    raw = error or None
    error = _ANSI.sub("", error)
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    lowered = error.lower()
    if not lines:
        return JobFailed(CRASHED, "its Ray trial failed without an error message")
    if any(words in lowered for words in _MEMORY):
        return JobFailed(KILLED, "Ray's memory monitor killed its actor: the node ran low on memory", raw)
    if "Traceback" in error or _TRACEBACK_LINE.search(error):
        return JobFailed(CRASHED, f"its Ray trial failed: {lines[-1][:300]}", raw)
    if any(words in lowered for words in _PROCESS_DIED):
        pid = re.search(r"\bpid:\s*(\d+)", error)
        which = f" (pid {pid.group(1)})" if pid else ""
        return JobFailed(
            KILLED,
            f"its Ray actor's process{which} ended without a Python error: on Linux most often "
            "SIGKILL from the kernel's out-of-memory killer (check `dmesg` on its node; Ray does "
            "not say which signal)",
            raw,
        )
    first = next((line for line in lines if not line.startswith("Failure #")), lines[0])
    return JobFailed(CRASHED, f"its Ray trial failed: {first[:300]}", raw)


def _absolute(storage_url: str) -> str:
    """A SQLite URL with its file made absolute: Ray actors may run in another directory."""
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
def ray_instance(address: str | None) -> Iterator[str | None]:
    """Ray for one search: joins the cluster at `address`, or starts a local instance (in a
    temporary folder) that is shut down at the end, also on errors and Ctrl-C. A Ray this process
    already runs (a Python caller's own ``ray.init``) is used as it is and left running. Yields
    the folder of a local instance started here (None: a cluster joined, or this process's own)."""
    if ray.is_initialized():
        yield None
        return
    if address:
        probe_address(address)  # and its token, before the study was created (`check_ray_head`)
    temp_dir = None if address else make_folder("autotune-ray-")
    before = {pid for pid, _ in descendants(os.getpid())}
    reaper: subprocess.Popen[bytes] | None = None
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
                f"cannot start or join Ray at {address or 'a local instance'}: {first_line(exc)}",
                ADDRESS_HINT,
                field="ray_address",
            ) from None
        if address is None:  # the daemons this search started: ended with it, even on SIGKILL
            daemons = [d for d in descendants(os.getpid()) if d[0] not in before]
            reaper = start_reaper(daemons, temp_dir)
        yield temp_dir
    finally:
        ray.shutdown()  # a joined cluster: only this driver disconnects (its actors end with it)
        if reaper is not None:
            reaper.kill()
            reaper.wait(10)
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


def start_reaper(daemons: list[tuple[int, str]], temp_dir: str | None) -> subprocess.Popen[bytes]:
    """Start `autotune.executors.ray_reaper` for this process and `daemons` (pid, start time)."""
    me = os.getpid()
    spec = {"search": [me, _start_time_of(me)], "daemons": daemons, "temp_dir": temp_dir}
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.executors.ray_reaper", json.dumps(spec)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _start_time_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        text = handle.read()
    return text[text.rfind(")") + 2 :].split()[19]


# What Ray's driver prints to stdout, whatever ``log_to_driver``, when a worker dies: the study
# records that trial (its reason, and Ray's own text in ``ray_error``).
DEAD_WORKER_NOTICE = "A worker died or was killed"


@contextlib.contextmanager
def no_dead_worker_notices() -> Iterator[None]:
    """Keep Ray's "(raylet) A worker died or was killed ..." lines off the terminal while the
    search runs; Ray's other notices (a trial no node can hold, ...) still reach it. Ray's driver
    prints them from a thread of its own through ``ray._private.worker.print_to_stdstream``,
    which has no switch of its own."""
    from ray._private import worker as ray_worker

    original = ray_worker.print_to_stdstream

    def printed(data: dict[str, Any], ignore_prefix: bool) -> None:
        lines = [line for line in data.get("lines", []) if not str(line).startswith(DEAD_WORKER_NOTICE)]
        if lines:
            original({**data, "lines": lines}, ignore_prefix)

    ray_worker.print_to_stdstream = printed
    try:
        yield
    finally:
        ray_worker.print_to_stdstream = original


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
