"""One Ray Tune trial of an autotune study, run inside its Ray actor.

`RayLaunchTrainer` is the small `Trainer` handed to ``Trainer.hyperparameter_search(backend="ray")``:
transformers pickles it to every Ray actor and calls its ``train(trial=...)``. There the actor does
what any trial process does (`autotune.trial.entry`): it rebuilds the run from the study's stored
configuration, builds the `AutotuneTrainer` and runs one optuna trial of the shared study, with the
same pre-checks, user attrs, constraints and owner (this actor's process). Then it reports the
measured tokens/s to Ray as ``objective`` (so Ray's result table and best trial are autotune's) and
leaves ``self.objective`` set, so transformers neither evaluates nor writes a checkpoint.

A watchdog thread bounds the trial: past the supervisor's watchdog time it records the trial as
``hung`` and kills the actor (Ray records that Ray trial as errored; the search goes on).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
from typing import Any

import torch
from transformers import Trainer, TrainingArguments

from autotune.progress import Reporter
from autotune.records import RAY_TRIAL_KEY
from autotune.store.outcomes import HUNG, TrialOutcome, fail_running_trial
from autotune.store.owner import this_process
from autotune.store.session import StudyStore
from autotune.store.trials import running_trials_of
from autotune.trial.entry import run_job
from autotune.trial.job import Job, TrialDone

JOB_KEY = "autotune_job"  # a Ray trial's config: the id of the job it runs


def _placeholder_model() -> torch.nn.Module:
    # hyperparameter_search needs a model_init; the trials build their own models in the actors.
    return torch.nn.Linear(1, 1)


class RayLaunchTrainer(Trainer):
    """The `Trainer` that launches Ray trials (see the module docstring).

    Args:
        jobs: the jobs of this round by id; each Ray trial runs the one its config names.
        output_dir: scratch folder for this Trainer's arguments (nothing is written there).
    """

    def __init__(self, jobs: dict[str, Job], output_dir: str) -> None:
        self.jobs = jobs
        # use_cpu: this Trainer never trains; it must not make a CUDA context in the search's process.
        args = TrainingArguments(output_dir=output_dir, report_to=[], save_strategy="no", use_cpu=True)
        super().__init__(model_init=_placeholder_model, args=args)  # type: ignore[arg-type]

    def __reduce__(self) -> tuple[Any, ...]:
        # Ray pickles this Trainer to every actor: send only what the actor needs and build the
        # rest there. The whole object would carry this process's accelerator state, which after
        # earlier in-process trials holds objects that do not pickle (weak references).
        return (type(self), (self.jobs, self.args.output_dir))

    def train(  # type: ignore[override]
        self, resume_from_checkpoint: Any = None, trial: Any = None, **kwargs: Any
    ) -> None:
        """Run one trial of the study in this Ray actor and report it to Ray."""
        import ray.tune

        context = ray.tune.get_context()
        job = self.jobs[trial[JOB_KEY]]
        metrics = run_trial_in_actor(job, context.get_trial_id(), context.get_trial_dir())
        self.objective: float | None = metrics[
            "objective"
        ]  # not None: transformers then reports nothing itself
        ray.tune.report(metrics)


class _TagRayTrial(Reporter):
    """Records on each optuna trial it starts which Ray trial runs it (the driver uses the link to
    record a Ray trial that died as that optuna trial's result)."""

    def __init__(self, study: StudyStore, ray_trial_id: str) -> None:
        self.study = study
        self.ray_trial_id = ray_trial_id

    def on_trial_start(self, number: int, params: dict[str, Any]) -> None:
        self.study.storage.set_trial_user_attr(self.study.trial_id(number), RAY_TRIAL_KEY, self.ray_trial_id)


def run_trial_in_actor(job: Job, ray_trial_id: str, trial_dir: str | None = None) -> dict[str, Any]:
    """Run one trial job in this actor; the metrics reported to Ray.

    The trial's scratch folder goes under the study's output dir, else under Ray's trial folder,
    which Ray (or the search, for its local instance) removes even when this actor is killed.

    ``objective`` is the trial's tokens/s when it completed feasibly, NaN otherwise (Ray's best
    trial skips NaN); ``trial`` is its number (-1: none was trained, ``why`` says why).
    """
    watchdog = _Watchdog(job, job.watchdog_s or 0.0)
    try:
        study = StudyStore.open(job.storage_url, job.study_name, existing=True)
        done = run_job(job, _TagRayTrial(study, ray_trial_id), scratch_in=trial_dir)
    finally:
        watchdog.cancel()
    assert isinstance(done, TrialDone)  # a trial job's result; failures raise
    if not done.trained or done.number is None:
        return {"objective": math.nan, "trial": -1, "why": done.why}
    record = study.record(done.number)
    value, _ = study.outcome_of(done.number)
    return {
        "objective": float(value) if record.feasible and value is not None else math.nan,
        "trial": record.number,
        "state": record.state,
        "reason": record.reason or "",
        "tokens_per_s": record.tokens_per_s or math.nan,
        "peak_memory_bytes": record.peak_memory_bytes or 0,
    }


class _Watchdog:
    """Kills this actor when its trial runs past `seconds`, after recording the trial as hung."""

    def __init__(self, job: Job, seconds: float) -> None:
        self.job = job
        self.seconds = seconds
        self._done = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="autotune-ray-watchdog").start()

    def cancel(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.seconds):
            return
        message = f"no progress within {self.seconds:.0f} s: the watchdog killed its Ray actor"
        with contextlib.suppress(Exception):  # the kill below must happen whatever the store says
            study = StudyStore.open(self.job.storage_url, self.job.study_name, existing=True)
            for trial in running_trials_of(study, this_process()):
                fail_running_trial(study, trial.number, TrialOutcome.process_ended(HUNG, message))
        os.kill(os.getpid(), signal.SIGKILL)
