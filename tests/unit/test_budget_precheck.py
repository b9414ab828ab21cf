"""The budget pre-check: workers check the budget before they ask for a trial, so two can both see
room for the last one; of trials created concurrently, the earlier number trains, the later one
ends untrained (`over_budget`) and spends nothing."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
import pytest

from autotune.space.availability import Hardware, ModelSupport
from autotune.store.outcomes import NOT_TRAINED, OVER_BUDGET
from autotune.store.session import StudyStore
from autotune.store.trials import measured_count
from autotune.trial.errors import OverBudget
from autotune.trial.prechecks import precheck_trial

PLAN = SimpleNamespace(hardware=Hardware(), model=ModelSupport(name="GPT2LMHeadModel"), cap_bytes=None)
DIST = {"per_device_train_batch_size": optuna.distributions.IntDistribution(1, 512)}


def _study(measured: int) -> optuna.Study:
    """A study with `measured` finished trials that trained (batch sizes 1, 2, ...)."""
    study = optuna.create_study(direction="maximize")
    for number in range(measured):
        study.add_trial(
            optuna.trial.create_trial(
                params={"per_device_train_batch_size": number + 1},
                distributions=DIST,
                value=100.0,
                user_attrs={"tokens_per_s": 100.0, "feasible": True},
            )
        )
    return study


def _fixed(study: optuna.Study, batch: int) -> optuna.Trial:
    study.enqueue_trial({"per_device_train_batch_size": batch})
    trial = study.ask(fixed_distributions=DIST)
    assert trial.params == {"per_device_train_batch_size": batch}
    return trial


def _check(trial: optuna.Trial, budget: int | None) -> None:
    precheck_trial(trial, dict(trial.params), PLAN, {}, lambda finished: None, budget)


def test_of_two_trials_racing_for_the_last_place_the_earlier_trains_the_later_yields() -> None:
    study = _study(measured=3)  # a budget of 4: room for one more
    first, second = _fixed(study, 100), _fixed(study, 200)  # two workers both saw room
    _check(first, 4)  # the earlier number goes on
    with pytest.raises(OverBudget, match="the trials started before it hold the study's budget of 4"):
        _check(second, 4)
    assert OVER_BUDGET in NOT_TRAINED  # it spends nothing: the budget ends exact
    second.set_user_attr("reason", OVER_BUDGET)  # as the trainer stores a pre-check's end
    study.tell(second, state=optuna.trial.TrialState.PRUNED)
    first.set_user_attr("tokens_per_s", 100.0)
    study.tell(first, 100.0)
    assert measured_count(StudyStore(study)) == 4


def test_room_left_or_no_budget_given_trains() -> None:
    study = _study(measured=2)
    first, second = _fixed(study, 100), _fixed(study, 200)
    _check(second, 4)  # 2 measured + 1 started before it: room for it
    _check(second, None)  # no budget: a search that holds none (tune's in-process trials, Ray)
    _check(first, 3)


def test_a_finished_trial_that_trained_nothing_holds_no_place() -> None:
    study = _study(measured=1)
    reused = _fixed(study, 1)
    reused.set_user_attr("reason", "duplicate")
    study.tell(reused, state=optuna.trial.TrialState.PRUNED)
    _check(_fixed(study, 300), 2)  # one measured: room for one more
