"""The trial a running search asked its study for, as the trial code handles it.

`Trainer.hyperparameter_search(backend="optuna")` hands the trial code an optuna `Trial`; a
replayed measurement hands it a `fixed_trial`, Ray a dict of values, a rank other than 0 of a
group none. The trial code asks these functions, not optuna, what it holds: whether it is a trial
of a stored study (`is_study_trial`), that study as a `StudyStore` (`study_of`), and it ends a trial
that trained nothing by raising `TrialPruned`, which the Trainer's optuna search records as pruned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna

from autotune.store.session import StudyStore

# Raised by the trial code to end a trial as PRUNED with its reason already recorded; any other
# exception fails the trial in optuna's loop.
TrialPruned = optuna.TrialPruned


def is_study_trial(trial: Any) -> bool:
    """Whether `trial` is a trial of a stored study (not a replay, a Ray dict or None)."""
    return isinstance(trial, optuna.Trial)


def study_of(trial: Any) -> StudyStore | None:
    """The study of a stored study's trial (None elsewhere: Ray dicts, replays, other ranks)."""
    return StudyStore(trial.study) if is_study_trial(trial) else None


def fixed_trial(params: Mapping[str, Any], number: int) -> Any:
    """A trial that suggests exactly `params` and belongs to no study: how a configuration is
    measured again outside the search's loop (the baseline, a finalist, a whole-run check)."""
    return optuna.trial.FixedTrial(dict(params), number)
