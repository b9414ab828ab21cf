"""`RetryingRDBStorage`: optuna's `RDBStorage` whose calls ride out store outages
(`autotune.store.retry`: which errors pass, how long to retry, how a retried write is applied once).

Every method optuna's `_CachedStorage` wrapper and heartbeat thread call is retried: the reads and
the writes whose repetition is harmless as they are (`RETRIED_AS_IS`), trial creation by its
token, state changes by what they find stored. A write that fails for want of room raises
`StoreFull` at once; a heartbeat that does is kept (`RetryingRDBStorage.full`).
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import make_url

from autotune.errors import StoreFull
from autotune.store import bulk
from autotune.store.retry import CREATE_TOKEN_ATTR, TRANSIENT, T, retry_transient
from autotune.urls import sqlite_file


class _QuietFallback(logging.Filter):
    """optuna's RDB storage logs a warning, with the whole SQL statement, when a trial query fails
    with an operational error, then tries a slower query; on a lost connection that one fails
    too and the call is retried here. Those warnings would flood the terminal in an outage."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith("Caught an error from sqlalchemy") and TRANSIENT.search(text))


logging.getLogger("optuna.storages._rdb.storage").addFilter(_QuietFallback())

_calls = threading.local()  # an outer retried call retries the whole: inner calls run plainly


def _retried(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def retried(self: RetryingRDBStorage, *args: Any, **kwargs: Any) -> T:
        return self._retry(lambda attempt: method(self, *args, **kwargs))

    return retried


class RetryingRDBStorage(RDBStorage):
    """optuna's `RDBStorage` riding out store outages (see the module docstring).

    Args:
        url: the engine URL (with its driver and password).
        retry_s: how long one call retries transient errors before raising `StoreError`.
        shown: the store as messages name it (the URL with its password hidden).
        **kwargs: `RDBStorage`'s own.
    """

    def __init__(self, url: str, *, retry_s: float, shown: str, **kwargs: Any) -> None:
        self.retry_s = retry_s
        self.shown = shown
        self.new_trial_user_attrs: dict[str, Any] = {}
        self.full: StoreFull | None = None  # the last heartbeat that failed for want of room
        # What every call's error messages need of the URL, read once.
        self._password = make_url(url).password
        database = sqlite_file(url)
        self._database = None if database is None else str(database)
        super().__init__(url, **kwargs)

    @staticmethod
    def of(storage: Any) -> RetryingRDBStorage | None:
        """The `RetryingRDBStorage` behind `storage` (optuna wraps an RDB storage in its
        `_CachedStorage`, which a study's ``_storage`` is), or None."""
        backend = getattr(storage, "_backend", storage)
        return backend if isinstance(backend, RetryingRDBStorage) else None

    def stamp_new_trials(self, user_attrs: dict[str, Any]) -> None:
        """Write `user_attrs` in the same transaction that creates each trial optuna asks for (a
        worker's owner record): no moment exists where the trial is RUNNING but nobody's."""
        self.new_trial_user_attrs = copy.deepcopy(user_attrs)

    def _retry(self, call: Callable[[int], T]) -> T:
        if getattr(_calls, "active", False):
            return call(0)
        _calls.active = True
        try:
            return retry_transient(call, self.retry_s, self.shown, self._password, database=self._database)
        finally:
            _calls.active = False

    def record_heartbeat(self, trial_id: int) -> None:
        """optuna's heartbeat, from its thread: a write that fails because the store is full is
        kept in `full` (the trial raises it at its next step: `raise_if_full`) instead of ending
        the thread with a traceback; the next beat tries again."""
        try:
            self._retry(lambda attempt: RDBStorage.record_heartbeat(self, trial_id))
        except StoreFull as exc:
            self.full = exc
        else:
            self.full = None

    def raise_if_full(self) -> None:
        """Raise the `StoreFull` of the last heartbeat, if it failed so."""
        if self.full is not None:
            raise self.full

    def create_new_study(self, directions: Sequence[StudyDirection], study_name: str | None = None) -> int:
        def attempt(number: int) -> int:
            try:
                return RDBStorage.create_new_study(self, directions, study_name)
            except optuna.exceptions.DuplicatedStudyError:
                if number == 0 or study_name is None:
                    raise
                return RDBStorage.get_study_id_from_name(self, study_name)  # ours, on an earlier attempt

        return self._retry(attempt)

    def delete_study(self, study_id: int) -> None:
        def attempt(number: int) -> None:
            try:
                RDBStorage.delete_study(self, study_id)
            except KeyError:
                if number == 0:
                    raise

        self._retry(attempt)

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        return self._create_new_trial(study_id, template_trial)._trial_id

    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        token = uuid.uuid4().hex
        template = _template_with_token(template_trial, token, self.new_trial_user_attrs)
        return self._retry(lambda attempt: self._create_trial_once(study_id, template, token, attempt > 0))

    def _create_trial_once(
        self, study_id: int, template: FrozenTrial, token: str, retry: bool
    ) -> FrozenTrial:
        """optuna's trial creation, one transaction, without its own retries (which could create the
        trial twice); on a retry, the trial an earlier attempt committed is returned instead."""
        with _create_scoped_session(self.scoped_session) as session:
            if retry:
                attribute = models.TrialSystemAttributeModel
                found = (
                    session.query(attribute.trial_id)
                    .join(models.TrialModel, models.TrialModel.trial_id == attribute.trial_id)
                    .filter(models.TrialModel.study_id == study_id)
                    .filter(attribute.key == CREATE_TOKEN_ATTR, attribute.value_json == json.dumps(token))
                    .one_or_none()
                )
                if found is not None:
                    trial_model = models.TrialModel.find_or_raise_by_id(found[0], session)
                    return self._build_frozen_trial_from_trial_model(trial_model)
            models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
            trial = self._get_prepared_new_trial(study_id, template, session)
            frozen = copy.deepcopy(template)
            frozen.number = int(trial.number)  # a Column to mypy
            frozen.datetime_start = trial.datetime_start
            frozen._trial_id = int(trial.trial_id)
            return frozen

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        first_attempt = datetime.now()  # optuna stamps datetime_start with this host's clock

        def attempt(number: int) -> bool:
            try:
                changed = RDBStorage.set_trial_state_values(self, trial_id, state, values)
            except optuna.exceptions.UpdateFinishedTrialError:
                if number > 0 and self._landed(trial_id, state, values, first_attempt):
                    return True
                raise
            if not changed and number > 0 and state == TrialState.RUNNING:
                return self._landed(trial_id, state, values, first_attempt)
            return changed

        return self._retry(attempt)

    def _landed(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None, since: datetime
    ) -> bool:
        """Whether an earlier attempt's state change was committed after all."""
        stored = RDBStorage.get_trial(self, trial_id)
        if stored.state != state:
            return False
        if state == TrialState.RUNNING:
            return stored.datetime_start is not None and stored.datetime_start >= since
        return values is None or stored.values == list(values)


def _template_with_token(
    template: FrozenTrial | None, token: str, user_attrs: dict[str, Any] | None = None
) -> FrozenTrial:
    """The trial to create, holding the creation token: `template` (optuna's `add_trial` and
    `enqueue_trial`), or what optuna creates without one (a RUNNING trial starting now, with
    `user_attrs`)."""
    if template is None:
        return FrozenTrial(
            number=-1,
            state=TrialState.RUNNING,
            value=None,
            datetime_start=datetime.now(),
            datetime_complete=None,
            params={},
            distributions={},
            user_attrs=copy.deepcopy(user_attrs or {}),
            system_attrs={CREATE_TOKEN_ATTR: token},
            intermediate_values={},
            trial_id=-1,
        )
    template = copy.deepcopy(template)
    template.system_attrs = {**template.system_attrs, CREATE_TOKEN_ATTR: token}
    return template


# Calls whose repetition is harmless (reads; upserts; writes that ignore a duplicate key), retried
# as they are. With the methods above, every call optuna's `_CachedStorage` and heartbeat make.
RETRIED_AS_IS = (
    "set_study_user_attr",
    "set_study_system_attr",
    "get_study_id_from_name",
    "get_study_name_from_id",
    "get_study_directions",
    "get_study_user_attrs",
    "get_study_system_attrs",
    "get_trial_user_attrs",
    "get_trial_system_attrs",
    "get_all_studies",
    "set_trial_param",
    "_set_trial_param",
    "get_trial_param",
    "set_trial_intermediate_value",
    "set_trial_user_attr",
    "set_trial_system_attr",
    "get_trial_id_from_study_id_trial_number",
    "get_trial",
    "get_all_trials",
    "get_best_trial",
    "_get_best_trial_id",
    "_get_stale_trial_ids",
)
for _name in RETRIED_AS_IS:
    setattr(RetryingRDBStorage, _name, _retried(getattr(RDBStorage, _name)))
# Every trial read goes through `_get_trials` (`_CachedStorage` calls it): read in bulk, no ORM.
RetryingRDBStorage._get_trials = _retried(bulk.get_trials)  # type: ignore[method-assign]
