"""The MLflow tracker: a search as one MLflow run, each trial a run nested in it.

The tracking server is MLflow's own choice (``MLFLOW_TRACKING_URI``, as the Trainer's
``MLflowCallback`` reads it); the experiment is named after the study (``MLFLOW_EXPERIMENT_NAME``
names another). The search's run, named after the study, holds the search's set-up as tags and,
at the end, the answer: the metrics ``speedup`` (with ``speedup_low`` and ``speedup_high``, its
95% interval), ``tokens_per_s``, ``peak_memory_bytes`` and ``baseline_tokens_per_s``, the tags
``verdict``, ``rule`` and ``chosen``, the chosen knobs as parameters ``chosen.KNOB``, and the
whole answer as the artifact ``answer.json``. Each finished trial is a nested run ``trial N``: its
knobs as parameters, its figures as metrics, its ``state``, ``reason`` and ``message`` as tags.

It writes through `MlflowClient`, not the fluent API: a caller's own active run (a script that
calls `autotune.tune` inside ``mlflow.start_run()``) is left alone.
"""

from __future__ import annotations

import os
import time
from typing import Any

from autotune.progress import SearchHeader, TrialSummary
from autotune.trackers import (
    Tracker,
    answer_metrics,
    answer_params,
    answer_text,
    param_value,
    trial_metrics,
    trial_outcome,
)

# MLflow's limit on a tag's value.
TAG_LIMIT = 5000


class MLflowTracker(Tracker):
    """Logs a search to MLflow (module docstring)."""

    name = "mlflow"

    def __init__(self) -> None:
        self.client: Any = None
        self.experiment_id: str | None = None
        self.run_id: str | None = None
        self.study = ""

    def open(self, header: SearchHeader) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        self.study = str(header.study)
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or self.study
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = (
            found.experiment_id if found is not None else self.client.create_experiment(experiment)
        )
        tags = {f"autotune.{key}": str(value)[:TAG_LIMIT] for key, value in header.scalars().items()}
        run = self.client.create_run(self.experiment_id, run_name=self.study, tags=tags)
        self.run_id = run.info.run_id

    def trial(self, trial: TrialSummary) -> None:
        from mlflow.entities import Metric, Param, RunTag

        tags = {"mlflow.parentRunId": self.run_id, "autotune.store": self.study}
        run = self.client.create_run(self.experiment_id, run_name=f"trial {trial.number}", tags=tags)
        outcome = trial_outcome(trial)
        self.client.log_batch(
            run.info.run_id,
            metrics=[Metric(key, value, _now_ms(), 0) for key, value in trial_metrics(trial).items()],
            params=[Param(key, str(param_value(value))) for key, value in trial.params.items()],
            tags=[RunTag(key, value[:TAG_LIMIT]) for key, value in outcome.items()],
        )
        status = "FINISHED" if trial.state == "COMPLETE" else "FAILED" if trial.state == "FAIL" else "KILLED"
        self.client.set_terminated(run.info.run_id, status=status)

    def answer(self, result: Any) -> None:
        from mlflow.entities import Metric, Param, RunTag

        self.client.log_batch(
            self.run_id,
            metrics=[Metric(key, value, _now_ms(), 0) for key, value in answer_metrics(result).items()],
            params=[Param(f"chosen.{key}", str(value)) for key, value in answer_params(result).items()],
            tags=[RunTag(key, value[:TAG_LIMIT]) for key, value in answer_text(result).items()],
        )
        self.client.log_dict(self.run_id, result.answer.to_dict(), "answer.json")

    def close(self, failed: bool) -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")
            self.run_id = None


def _now_ms() -> int:
    return int(time.time() * 1000)
