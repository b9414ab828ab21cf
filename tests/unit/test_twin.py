"""The fastest trial's twin that keeps the training math (`autotune.driver.twin`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna

from autotune.driver.twin import math_keeping_twin
from autotune.space.searchspace import SearchSpace
from autotune.store.session import StudyStore

KNOBS: dict[str, tuple[Any, ...]] = {
    "activation_checkpointing": (True, False),
    "optim": ("adamw_torch_fused", "adafactor"),
    "precision": ("fp32", "bf16"),
}
BASELINE = {"activation_checkpointing": True, "optim": "adamw_torch_fused", "precision": "fp32"}


def _study(
    rows: list[tuple[dict[str, Any], float | None]], waiting: Sequence[dict[str, Any]] = ()
) -> optuna.Study:
    """A study of measured trials (params, tok/s; None: failed) beside `BASELINE` at 100 tok/s."""
    study = optuna.create_study(direction="maximize")
    distributions = {k: optuna.distributions.CategoricalDistribution(list(v)) for k, v in KNOBS.items()}
    for params, rate in rows:
        attrs = {"tokens_per_s": rate, "feasible": True, "peak_memory_bytes": 1} if rate else {}
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions=distributions,
                value=rate,
                state=optuna.trial.TrialState.COMPLETE if rate else optuna.trial.TrialState.FAIL,
                user_attrs=attrs,
            )
        )
    for params in waiting:
        study.enqueue_trial(params)
    study.set_user_attr("baseline", {"params": BASELINE, "tokens_per_s": 100.0, "peak_memory_bytes": 1})
    return study


SPACE = SearchSpace("t", "t.yaml", KNOBS)
FAST_ADAFACTOR = {"activation_checkpointing": False, "optim": "adafactor", "precision": "fp32"}
TWIN = {"activation_checkpointing": False, "optim": "adamw_torch_fused", "precision": "fp32"}


def test_a_leader_that_changes_the_optimizer_gets_its_twin_with_the_baselines_optimizer() -> None:
    study = _study([(FAST_ADAFACTOR, 150.0), (BASELINE | {"optim": "adafactor"}, 95.0)])
    twin = math_keeping_twin(StudyStore(study), SPACE)
    assert twin is not None and twin.of == 0
    assert twin.params == TWIN and twin.restored == ("optim",)
    assert "trial 0, the fastest, changes the training math" in twin.note()
    assert "optim=adamw_torch_fused" in twin.note()


def test_the_fewest_knobs_are_set_back_and_every_math_change_is_undone() -> None:
    # bf16 and adafactor: both change the math, so the twin sets both back (one alone would not do)
    leader = {"activation_checkpointing": False, "optim": "adafactor", "precision": "bf16"}
    twin = math_keeping_twin(StudyStore(_study([(leader, 200.0)])), SPACE)
    assert twin is not None and twin.params == TWIN and set(twin.restored) == {"optim", "precision"}


def test_no_twin_where_the_leader_keeps_the_math_or_the_twin_was_tried_or_is_queued() -> None:
    assert math_keeping_twin(StudyStore(_study([(TWIN, 150.0), (FAST_ADAFACTOR, 140.0)])), SPACE) is None
    tried = _study([(FAST_ADAFACTOR, 150.0), (TWIN, None)])  # tried, and failed: tried all the same
    assert math_keeping_twin(StudyStore(tried), SPACE) is None
    assert math_keeping_twin(StudyStore(_study([(FAST_ADAFACTOR, 150.0)], waiting=[TWIN])), SPACE) is None


def test_no_twin_where_it_is_the_baseline_or_outside_the_space() -> None:
    # adafactor with checkpointing on: set back, it is the baseline, which is measured already
    assert math_keeping_twin(StudyStore(_study([(BASELINE | {"optim": "adafactor"}, 150.0)])), SPACE) is None
    # a space without the baseline's optimizer holds no twin
    narrow = SearchSpace("n", "n.yaml", {**KNOBS, "optim": ("adafactor", "sgd")})
    assert math_keeping_twin(StudyStore(_study([(FAST_ADAFACTOR, 150.0)])), narrow) is None


def test_no_twin_without_a_measured_trial_or_a_baseline() -> None:
    assert math_keeping_twin(StudyStore(_study([(FAST_ADAFACTOR, None)])), SPACE) is None
    study = _study([(FAST_ADAFACTOR, 150.0)])
    study.set_user_attr("baseline", {})
    assert math_keeping_twin(StudyStore(study), SPACE) is None
