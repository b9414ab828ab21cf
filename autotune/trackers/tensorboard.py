"""The TensorBoard tracker: a search's trials and answer as event files in ``TRACKER_DIR/STUDY``.

Each finished trial is one step, numbered as the trial: the scalars ``trial/tokens_per_s``,
``trial/samples_per_s``, ``trial/peak_memory_bytes`` (those it measured) and the text ``trial``
(its knobs, state and reason). Each measured trial is also one run of the HParams dashboard
(``STUDY/trial-N``: its knobs against its figures), which compares the trials side by side. The
answer is the text ``answer/verdict``, ``answer/chosen`` and ``answer/config`` and the scalars
``answer/speedup`` (with ``answer/speedup_low`` and ``answer/speedup_high``, its 95% interval),
``answer/tokens_per_s`` and ``answer/peak_memory_bytes``, at the step after the last trial. A
continued study writes beside its earlier event files, in the same folder: TensorBoard shows them
as one run.

The writer is torch's (``torch.utils.tensorboard``, which needs the tensorboard package), else
tensorboardX's.
"""

from __future__ import annotations

import os
from typing import Any

from autotune.progress import SearchHeader, TrialSummary, describe_params
from autotune.trackers import (
    Tracker,
    answer_metrics,
    answer_params,
    answer_text,
    param_value,
    trial_metrics,
    trial_outcome,
)

DEFAULT_DIR = "runs"


def summary_writer() -> Any:
    """The `SummaryWriter` class: torch's, else tensorboardX's."""
    try:
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter
    except ImportError:  # torch's writer needs the tensorboard package
        import tensorboardX

        return tensorboardX.SummaryWriter


def study_folder(tracker_dir: str | None, study: str) -> str:
    """Where a study's event files go: its own folder under `tracker_dir` (default ``runs``)."""
    root = os.path.expanduser(tracker_dir or DEFAULT_DIR)
    return os.path.join(root, study.replace(os.sep, "_"))


class TensorBoardTracker(Tracker):
    """Writes a search's trials and answer as TensorBoard event files (module docstring)."""

    name = "tensorboard"

    def __init__(self, tracker_dir: str | None) -> None:
        self.tracker_dir = tracker_dir
        self.folder: str | None = None
        self.writer: Any = None
        self.last_step = -1

    def open(self, header: SearchHeader) -> None:
        self.folder = study_folder(self.tracker_dir, str(header.study))
        self.writer = summary_writer()(log_dir=self.folder)
        described = ", ".join(f"{key} {value}" for key, value in header.scalars().items())
        self.writer.add_text("search", described, 0)

    def trial(self, trial: TrialSummary) -> None:
        step = trial.number
        self.last_step = max(self.last_step, step)
        metrics = trial_metrics(trial)
        for key, value in metrics.items():
            self.writer.add_scalar(f"trial/{key}", value, step)
        outcome = trial_outcome(trial)
        why = f" ({outcome['reason']}: {outcome['message']})" if outcome["reason"] else ""
        self.writer.add_text("trial", f"{describe_params(trial.params)}: {outcome['state']}{why}", step)
        if "tokens_per_s" in metrics:
            hparams = {key: param_value(value) for key, value in trial.params.items()}
            hparams["state"] = outcome["state"]
            figures = {f"hparam/{key}": value for key, value in metrics.items()}
            # torch's writer names the sub-run `run_name`, tensorboardX's `name`
            naming = "name" if type(self.writer).__module__.startswith("tensorboardX") else "run_name"
            self.writer.add_hparams(hparams, figures, **{naming: f"trial-{step}"})
        self.writer.flush()

    def answer(self, result: Any) -> None:
        step = self.last_step + 1
        for key, text in answer_text(result).items():
            self.writer.add_text(f"answer/{key}", text, step)
        params = answer_params(result)
        if params:
            self.writer.add_text("answer/config", describe_params(params), step)
        for key, value in answer_metrics(result).items():
            self.writer.add_scalar(f"answer/{key}", value, step)
        self.writer.flush()

    def close(self, failed: bool) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
