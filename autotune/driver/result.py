"""What a search hands back: `SearchResult`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

from autotune.config import RunConfig
from autotune.progress import TrialSummary
from autotune.study.store import speedup_over_baseline


@dataclass
class SearchResult:
    """What a search leaves behind.

    Attributes:
        study: the optuna study (in the store, readable by optuna's CLI and dashboard).
        config: the run configuration used.
        trials: every finished trial of the study, best first.
        best: the best completed trial, or None if none completed.
        ran: how many trials this call measured (0 when the budget was already spent).
    """

    study: optuna.Study
    config: RunConfig
    trials: list[TrialSummary]
    best: TrialSummary | None
    ran: int

    @property
    def speedup_over_baseline(self) -> float | None:
        """The winner's throughput over the baseline's (see `autotune.study.store.speedup_over_baseline`)."""
        compared = speedup_over_baseline(self.study, self.best) if self.best is not None else None
        return compared[0] if compared else None

    @property
    def verdict(self) -> str | None:
        """How sure the answer is, when the finalists were re-measured."""
        winner = self.study.user_attrs.get("winner")
        return winner["verdict"] if winner and self.best and winner["number"] == self.best.number else None

    def best_config(self) -> dict[str, Any]:
        """The best trial as ``{"training_args": {...}, "model_kwargs": {...}}``."""
        if self.best is None:
            return {}
        return {
            "training_args": dict(self.best.attrs.get("training_args", {})),
            "model_kwargs": dict(self.best.attrs.get("model_kwargs", {})),
        }
