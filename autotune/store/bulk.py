"""Reading a study's trials in bulk: optuna's `RDBStorage._get_trials`, without the ORM.

optuna builds an ORM object for every trial and every one of its attribute, parameter and value
rows (selectinload), then a `FrozenTrial` from them. On a study of 10,000 trials of autotune's
(38 user attributes each: about 500,000 rows) that took most of every command's time
(`benchmarks/large_store.py`). Here each table is read with one plain SELECT of the columns a
`FrozenTrial` needs, and the rows are grouped by trial: the same trials, several times faster.
`tests/unit/test_bulk_trials.py` checks the two readers agree trial for trial.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Container, Iterable
from functools import lru_cache
from typing import Any

import sqlalchemy
from optuna import distributions
from optuna.storages._rdb import models
from optuna.trial import FrozenTrial, TrialState

# Unfinished trials' ids passed in one IN list at most (SQLite's default limit is 32,766 variables).
MAX_IN_LIST = 500


@lru_cache(maxsize=4096)
def _distribution(text: str) -> distributions.BaseDistribution:
    return distributions.json_to_distribution(text)


def get_trials(
    storage: Any,
    study_id: int,
    states: Container[TrialState] | None,
    included_trial_ids: set[int],
    trial_id_greater_than: int,
) -> list[FrozenTrial]:
    """What `RDBStorage._get_trials` returns (its arguments, as `_CachedStorage` passes them)."""
    included = {i for i in included_trial_ids if i <= trial_id_greater_than}
    trials = models.TrialModel.__table__
    where: list[Any] = [trials.c.study_id == study_id]
    if states is not None:
        assert isinstance(states, Iterable)
        where.append(trials.c.state.in_(list(states)))
    wanted = None
    if included and trial_id_greater_than > -1:
        if len(included) > MAX_IN_LIST:  # a dialect's limit on bound variables: a range, then filtered
            where.append(trials.c.trial_id >= min(included))
            wanted = included
        else:
            where.append(
                sqlalchemy.or_(trials.c.trial_id.in_(included), trials.c.trial_id > trial_id_greater_than)
            )
    elif trial_id_greater_than > -1:
        where.append(trials.c.trial_id > trial_id_greater_than)
    studies = models.StudyModel.__table__
    with storage.engine.connect() as connection:
        found = connection.execute(
            sqlalchemy.select(studies.c.study_id).where(studies.c.study_id == study_id)
        ).first()
        if found is None:
            raise KeyError(models.NOT_FOUND_MSG)  # as optuna's reader raises
        out = _read(connection, trials, where)
    if wanted is not None:
        out = [t for t in out if t._trial_id in wanted or t._trial_id > trial_id_greater_than]
    return out


def _read(connection: Any, trials: Any, where: list[Any]) -> list[FrozenTrial]:
    rows = connection.execute(
        sqlalchemy.select(
            trials.c.trial_id,
            trials.c.number,
            trials.c.state,
            trials.c.datetime_start,
            trials.c.datetime_complete,
        )
        .where(*where)
        .order_by(trials.c.trial_id)
    ).all()
    if not rows:
        return []
    chosen = sqlalchemy.select(trials.c.trial_id).where(*where).scalar_subquery()

    def children(model: Any, *columns: str, order: str) -> dict[int, list[Any]]:
        table = model.__table__
        grouped: dict[int, list[Any]] = defaultdict(list)
        query = (
            sqlalchemy.select(table.c.trial_id, *(table.c[c] for c in columns))
            .where(table.c.trial_id.in_(chosen))
            .order_by(table.c[order])
        )
        for row in connection.execute(query):
            grouped[row[0]].append(row[1:])
        return grouped

    params = children(
        models.TrialParamModel, "param_name", "param_value", "distribution_json", order="param_id"
    )
    values = children(models.TrialValueModel, "objective", "value", "value_type", order="trial_value_id")
    user = children(models.TrialUserAttributeModel, "key", "value_json", order="trial_user_attribute_id")
    system = children(
        models.TrialSystemAttributeModel, "key", "value_json", order="trial_system_attribute_id"
    )
    steps = children(
        models.TrialIntermediateValueModel,
        "step",
        "intermediate_value",
        "intermediate_value_type",
        order="trial_intermediate_value_id",
    )
    to_value = models.TrialValueModel.stored_repr_to_value
    to_step = models.TrialIntermediateValueModel.stored_repr_to_intermediate_value
    out = []
    for trial_id, number, state, start, complete in rows:
        objectives = values.get(trial_id)
        trial_values: list[float] | None = None
        if objectives:
            trial_values = [0.0] * len(objectives)
            for objective, value, kind in objectives:
                trial_values[objective] = to_value(value, kind)
        dists = {name: _distribution(text) for name, _, text in params.get(trial_id, ())}
        out.append(
            FrozenTrial(
                number=number,
                state=state,
                value=None,
                values=trial_values,
                datetime_start=start,
                datetime_complete=complete,
                params={
                    name: dists[name].to_external_repr(value) for name, value, _ in params.get(trial_id, ())
                },
                distributions=dists,
                user_attrs={key: json.loads(text) for key, text in user.get(trial_id, ())},
                system_attrs={key: json.loads(text) for key, text in system.get(trial_id, ())},
                intermediate_values={step: to_step(v, kind) for step, v, kind in steps.get(trial_id, ())},
                trial_id=trial_id,
            )
        )
    return out
