"""What a search hands back: `SearchResult`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.answer.model import Answer
from autotune.answer.race import race_text
from autotune.options import RunConfig
from autotune.records import TrialRecord, read_study
from autotune.store.session import StudyStore


@dataclass
class SearchResult:
    """What a search leaves behind.

    Attributes:
        study: the study in its store (`StudyStore`: its trials as records, its study-level facts
            through `read_study`); optuna's CLI and dashboard read the same store, and
            ``optuna.load_study(study_name=study.study_name, storage=study.storage)`` opens it as
            an optuna study.
        config: the run configuration used.
        trials: every finished trial of the study, best first.
        best: the best measured trial (the one the finalists' re-measurement put first), or None
            if none completed. Not necessarily the answer: see `answer`.
        ran: how many trials this call measured (0 when the budget was already spent).
        answer: what the study hands back (`autotune.answer.decide.decide`): the configuration to
            use (the defaults when nothing beat them measurably), its verdict and figures, and the
            alternative beside it.
    """

    study: StudyStore
    config: RunConfig
    trials: list[TrialRecord]
    best: TrialRecord | None
    ran: int
    answer: Answer

    @property
    def speedup_over_baseline(self) -> float | None:
        """The speedup over the baseline of what the answer hands back (1.0 for the defaults): the
        paired re-measured ratio, else the search windows' ratio. None without a baseline."""
        choice = self.answer.choice
        return choice.speedup.value if choice is not None and choice.speedup is not None else None

    @property
    def verdict(self) -> str:
        """The answer in one line."""
        return self.answer.verdict

    @property
    def race(self) -> str | None:
        """How the finalists' re-measurement placed the best measured trial: its median, spread and
        lead over the runner-up (None when nothing was re-measured)."""
        return race_text(read_study(self.study), self.best)

    @property
    def remeasured(self) -> dict[int, float]:
        """Trial number -> its re-measured median tokens/s, for the finalists (not the baseline)."""
        return read_study(self.study).remeasured_tokens_per_s()

    @property
    def baseline_like(self) -> list[int]:
        """The trials that ran the baseline's own configuration (the baseline, not contestants)."""
        from autotune.answer.choices import same_as_baseline

        record = read_study(self.study)
        return [t.number for t in self.trials if same_as_baseline(record, t)]

    def best_config(self) -> dict[str, Any]:
        """What the answer hands back, as ``{"training_args": {...}, "model_kwargs": {...}}`` (the
        knobs' `TrainingArguments` kwargs and model-load kwargs; the defaults' when nothing beat
        them); empty when there is nothing to hand back."""
        choice = self.answer.choice
        if choice is None:
            return {}
        return {"training_args": dict(choice.training_args), "model_kwargs": dict(choice.model_kwargs)}
