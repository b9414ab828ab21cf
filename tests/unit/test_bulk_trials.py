"""The bulk trial reader (`autotune.store.bulk`) returns what optuna's own `RDBStorage._get_trials`
returns, trial for trial, whatever the trial holds and whichever trials are asked for."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotune.store import bulk
from autotune.store.rdb import RetryingRDBStorage


def _study(url: str) -> optuna.Study:
    study = optuna.create_study(
        study_name="s",
        storage=url,
        directions=["maximize", "minimize"],
        sampler=optuna.samplers.RandomSampler(),
    )
    dists = {
        "bs": IntDistribution(1, 64, log=True),
        "lr": FloatDistribution(1e-5, 1e-1, log=True),
        "opt": CategoricalDistribution(["adamw", "sgd", None, 3]),
    }
    for i in range(30):
        state = [TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL][i % 3]
        study.add_trial(
            create_trial(
                state=state,
                values=[float(i), -math.inf if i == 3 else 0.5 * i] if state == TrialState.COMPLETE else None,
                params={
                    "bs": 2 ** (i % 6),
                    "lr": 10 ** -(1 + i % 4),
                    "opt": ["adamw", "sgd", None, 3][i % 4],
                },
                distributions=dists,
                user_attrs={"tokens_per_s": 1000.0 + i, "nested": {"a": [1, 2, {"b": None}]}, "s": "x" * i},
                system_attrs={"sys": i} if i % 2 else {},
                intermediate_values={0: 1.0, 5: math.nan, 7: math.inf} if i % 5 == 0 else {},
            )
        )
    for _ in range(3):  # running trials: what _CachedStorage asks for again by id
        trial = study.ask()
        trial.suggest_int("bs", 1, 64, log=True)
        trial.set_user_attr("worker", {"job": "j"})
    return study


def fields(trial: FrozenTrial) -> dict[str, Any]:
    """Every field of the trial, a NaN made comparable (NaN != NaN)."""
    out = dict(vars(trial))
    out["intermediate_values"] = {k: repr(v) for k, v in trial.intermediate_values.items()}
    return out


@pytest.mark.parametrize(
    ("states", "greater", "included"),
    [
        (None, -1, set()),
        ((TrialState.COMPLETE,), -1, set()),
        ((TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL), -1, set()),
        (None, 20, set()),
        (None, 20, {1, 5, 31}),
        (None, 40, set(range(0, 33))),
    ],
)
def test_the_bulk_reader_returns_optunas_trials(
    tmp_path: Path, states: tuple[TrialState, ...] | None, greater: int, included: set[int]
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = _study(url)
    storage = RDBStorage(url)
    study_id = storage.get_study_id_from_name(study.study_name)
    expected = RDBStorage._get_trials(storage, study_id, states, included, greater)
    got = bulk.get_trials(storage, study_id, states, included, greater)
    assert expected  # the case reads something
    assert [t.number for t in got] == [t.number for t in expected]
    for ours, theirs in zip(got, expected, strict=True):
        assert fields(ours) == fields(theirs)  # values, params, distributions, attrs, intermediate values


def test_a_large_id_list_is_read_as_a_range_and_filtered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = _study(url)
    storage = RDBStorage(url)
    study_id = storage.get_study_id_from_name(study.study_name)
    included = {3, 9, 12}
    expected = RDBStorage._get_trials(storage, study_id, None, included, 25)
    monkeypatch.setattr(bulk, "MAX_IN_LIST", 2)
    got = bulk.get_trials(storage, study_id, None, included, 25)
    assert [fields(t) for t in got] == [fields(t) for t in expected]


def test_a_missing_study_raises_as_optuna_does(tmp_path: Path) -> None:
    storage = RDBStorage(f"sqlite:///{tmp_path / 's.db'}")
    with pytest.raises(KeyError):
        RDBStorage._get_trials(storage, 99, None, set(), -1)
    with pytest.raises(KeyError):
        bulk.get_trials(storage, 99, None, set(), -1)


def test_autotunes_storage_reads_through_the_bulk_reader(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    expected = [fields(t) for t in _study(url).get_trials(deepcopy=False)]
    assert RetryingRDBStorage._get_trials.__wrapped__ is bulk.get_trials  # type: ignore[attr-defined]
    storage = RetryingRDBStorage(url, retry_s=1.0, shown=url)
    study = optuna.load_study(study_name="s", storage=storage)
    assert [fields(t) for t in study.get_trials(deepcopy=False)] == expected
