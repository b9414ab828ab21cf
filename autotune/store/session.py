"""`StudyStore`: a session on one stored study, the only holder of its optuna `Study`.

Every package above the store reads and writes a study through a `StudyStore`: its trials as
typed records (`autotune.records.TrialRecord`), its study-level facts through
`autotune.records.read_study` and `write_study` (which take the session as they take any object
with ``study_name``, ``user_attrs`` and ``set_user_attr``), its queue and the RUNNING trials of
dead processes through methods that say what they do. States are named by optuna's state names
(``"COMPLETE"``, ``"PRUNED"``, ``"FAIL"``, ``"RUNNING"``, ``"WAITING"``), so no caller needs
optuna's enum. optuna stays an implementation detail of this package: its RDB storage is the
schema, so optuna's own CLI and optuna-dashboard read the same store.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import StoreError, UsageError
from autotune.records import TrialRecord, read_study, read_trial
from autotune.records.trial import queued_params
from autotune.urls import display_url, sqlite_file

FINISHED_STATES = ("COMPLETE", "PRUNED", "FAIL")


def _states(names: Iterable[str]) -> tuple[TrialState, ...] | None:
    chosen = tuple(TrialState[name] for name in names)
    return chosen or None


class StudyStore:
    """One study of one store, opened by `create`, `load` or `open`.

    Attributes:
        storage: the optuna storage the study lives in (what `Trainer.hyperparameter_search` and
            the trial processes are handed, to reach the same study).
    """

    def __init__(self, study: optuna.Study) -> None:
        self._study = study
        self.storage: Any = study._storage

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def create(cls, storage: Any, name: str) -> StudyStore:
        """The study `name` in `storage`, created (maximizing throughput) where it is not there.

        Raises:
            StoreError: a study of that name exists but minimizes its objective: not an autotune one.
        """
        study = optuna.create_study(
            storage=storage, study_name=name, direction="maximize", load_if_exists=True
        )
        if study.direction != optuna.study.StudyDirection.MAXIMIZE:
            raise StoreError(
                f"study={name!r} exists but minimizes its objective: it is not an autotune one",
                "pick another study name",
                field="study",
            )
        return cls(study)

    @classmethod
    def load(cls, storage: Any, name: str) -> StudyStore:
        """The existing study `name` of an opened storage."""
        return cls(optuna.load_study(study_name=name, storage=storage))

    @classmethod
    def open(cls, url: str, name: str, existing: bool = False) -> StudyStore:
        """A stored study by its store's URL and its name, opened for reading (and writing).

        Raises:
            UsageError: no store or no study of that name there (the message lists those there
                are), or it was written by a newer autotune.
        """
        from autotune.store.storage import open_storage

        database = sqlite_file(url)
        if database is not None and not database.exists():  # reading must not create an empty store
            raise UsageError(
                f"no study store at {url}: {database} does not exist", "pass storage=URL", field="storage"
            )
        storage = open_storage(url, existing)
        names = study_names(storage)
        if name not in names:
            listed = ", ".join(names) or "none"
            raise UsageError(
                f"no study {name!r} in {display_url(url)} (studies there: {listed})", "see `autotune studies`"
            )
        opened = cls.load(storage, name)
        read_study(opened)  # refuses a store of a newer schema
        return opened

    @property
    def optuna_study(self) -> optuna.Study:
        """The optuna `Study` itself, for a user's own optuna tools (its visualisations, its
        dashboard, ``study.trials``). No package of autotune but this one reads it."""
        return self._study

    # -- what `autotune.records` reads and writes --------------------------------------------

    @property
    def study_name(self) -> str:
        return self._study.study_name

    @property
    def user_attrs(self) -> dict[str, Any]:
        return self._study.user_attrs

    def set_user_attr(self, key: str, value: Any) -> None:
        self._study.set_user_attr(key, value)

    # -- trials ------------------------------------------------------------------------------

    def frozen(self, states: Iterable[str] = ()) -> list[FrozenTrial]:
        """optuna's trial objects in `states` (all where none are named), numbered in order: for
        the store package's own readers; every other package reads `records`."""
        return self._study.get_trials(deepcopy=False, states=_states(states))

    def records(self, states: Iterable[str] = ()) -> list[TrialRecord]:
        """The records of the trials in `states` (all where none are named), as stored: a FAIL
        without a reason is read as it is (see `autotune.store.trials.read_trials` for the
        finished trials as the answer reads them)."""
        return [read_trial(t) for t in self.frozen(states)]

    def record(self, number: int) -> TrialRecord:
        """Trial `number`'s record, as stored."""
        return read_trial(self._study.get_trials(deepcopy=False)[number])

    def count(self, states: Iterable[str] = ()) -> int:
        """How many trials are in `states` (all where none are named)."""
        return len(self.frozen(states))

    def numbers(self, states: Iterable[str] = ()) -> set[int]:
        """The numbers of the trials in `states` (all where none are named)."""
        return {t.number for t in self.frozen(states)}

    def queued(self) -> list[dict[str, Any]]:
        """The values of the trials that wait in the queue or run: what they were enqueued with
        or have suggested so far."""
        return [queued_params(t) for t in self.frozen(("WAITING", "RUNNING"))]

    def enqueue(self, params: Mapping[str, Any], user_attrs: Mapping[str, Any] | None = None) -> None:
        """Queue a trial of these knob values (with these facts), unless one of the same values
        is queued or finished already."""
        self._study.enqueue_trial(
            dict(params), user_attrs=dict(user_attrs or {}) or None, skip_if_exists=True
        )

    def trial_id(self, number: int) -> int:
        """The storage's id of trial `number` (what its storage calls address it by)."""
        return int(self.storage.get_trial_id_from_study_id_trial_number(self._study._study_id, number))

    def param_importances(self) -> dict[str, float]:
        """How much each knob explains of the completed trials' objective, by optuna's default
        evaluator (PED-ANOVA in optuna 5: no extra dependency), largest first.

        Raises:
            Exception: what optuna raises where they cannot be computed.
        """
        from optuna.importance import get_param_importances

        return dict(get_param_importances(self._study))

    def outcome_of(self, number: int) -> tuple[float | None, dict[str, float]]:
        """Trial `number`'s objective value (None unless it completed) and its named constraint
        values (what optuna's constrained sampler reads)."""
        trial = self._study.get_trials(deepcopy=False)[number]
        return trial.value, dict(trial.constraints)

    def stale_trial_ids(self) -> set[int]:
        """The ids of RUNNING trials whose heartbeat is stale (none where the storage keeps no
        heartbeat)."""
        from optuna.storages._heartbeat import BaseHeartbeat

        storage = self.storage  # optuna wraps an RDBStorage in a cache that keeps its heartbeat API
        if isinstance(storage, BaseHeartbeat) and storage.get_heartbeat_interval() is not None:
            return set(storage._get_stale_trial_ids(self._study._study_id))
        return set()


def study_names(storage: Any) -> list[str]:
    """The names of the studies an opened storage holds, sorted."""
    return sorted(optuna.get_all_study_names(storage))


@contextlib.contextmanager
def quiet_store() -> Iterator[None]:
    """optuna's per-trial INFO logs silenced (warnings kept); the reporters show trials instead."""
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)
