"""The Weights & Biases tracker: one W&B run per search, its trials as the run's history.

The project is ``WANDB_PROJECT`` (default ``autotune``), the entity and mode W&B's own
(``WANDB_ENTITY``, ``WANDB_MODE=offline``, ``WANDB_DIR``), as the Trainer's ``WandbCallback``
reads them. The run is named after the study and grouped by it (``group=STUDY``, job type
``search``): a continued study's searches sit together. Its config is the search's set-up (model,
space, budget, store). Each finished trial is one history row whose x-axis is ``trial`` (its
number; trials finish out of order with several workers): ``trial/tokens_per_s``,
``trial/samples_per_s``, ``trial/peak_memory_bytes`` (those it measured), ``trial/state``,
``trial/reason`` and its knobs as ``trial/KNOB``; the run's ``trials`` table holds them all at the
end. The answer is the run's summary: ``answer/verdict``, ``answer/rule``, ``answer/chosen``, the
chosen knobs as ``answer/config/KNOB``, ``answer/speedup`` (with ``answer/speedup_low`` and
``answer/speedup_high``, its 95% interval), ``answer/tokens_per_s``, ``answer/peak_memory_bytes``.

W&B's sampler of system metrics is off and its console capture too: the trials measure throughput
on this machine, and a sampler beside them would be measured with them.
"""

from __future__ import annotations

import os
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

DEFAULT_PROJECT = "autotune"


class WandbTracker(Tracker):
    """Logs a search to Weights & Biases (module docstring)."""

    name = "wandb"

    def __init__(self) -> None:
        self.run: Any = None
        self.rows: list[dict[str, Any]] = []

    def open(self, header: SearchHeader) -> None:
        import wandb

        study = str(header.study)
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            name=study,
            group=study,
            job_type="search",
            config=header.scalars(),
            reinit="create_new",  # a caller's own run (around `autotune.tune`) is left alone
            settings=wandb.Settings(console="off", x_disable_stats=True),
        )
        self.run.define_metric("trial")
        self.run.define_metric("trial/*", step_metric="trial")

    def trial(self, trial: TrialSummary) -> None:
        outcome = trial_outcome(trial)
        row: dict[str, Any] = {"trial": trial.number}
        row |= {f"trial/{key}": value for key, value in trial_metrics(trial).items()}
        row |= {"trial/state": outcome["state"], "trial/reason": outcome["reason"]}
        row |= {f"trial/{key}": param_value(value) for key, value in trial.params.items()}
        self.run.log(row)
        self.rows.append(row)

    def answer(self, result: Any) -> None:
        import wandb

        summary: dict[str, Any] = {f"answer/{key}": text for key, text in answer_text(result).items()}
        summary |= {f"answer/{key}": value for key, value in answer_metrics(result).items()}
        summary |= {f"answer/config/{key}": value for key, value in answer_params(result).items()}
        self.run.summary.update(summary)
        if self.rows:
            columns = sorted({key for row in self.rows for key in row}, key=_column_order)
            # a knob's column may hold "none" beside its numbers
            table = wandb.Table(columns=[c.removeprefix("trial/") for c in columns], allow_mixed_types=True)
            for row in sorted(self.rows, key=lambda r: r["trial"]):
                table.add_data(*(row.get(column) for column in columns))
            self.run.log({"trials": table})

    def close(self, failed: bool) -> None:
        if self.run is not None:
            self.run.finish(exit_code=1 if failed else 0)
            self.run = None


def _column_order(column: str) -> tuple[int, str]:
    """The trials table's columns: the number, the outcome, the figures, then the knobs."""
    first = ("trial", "trial/state", "trial/reason", "trial/tokens_per_s", "trial/samples_per_s")
    return (first.index(column), "") if column in first else (len(first), column)
