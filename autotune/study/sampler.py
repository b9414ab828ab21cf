"""The search's sampler (draft under measurement)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

_STARTED = (TrialState.COMPLETE, TrialState.PRUNED)
_SEEN = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)


class SpreadStart(BaseSampler):
    """First `startup` trials: every knob takes its least used value so far; then `then`."""

    def __init__(self, then: BaseSampler, startup: int, seed: int | None) -> None:
        self._then = then
        self._startup = startup
        self._rng = np.random.RandomState(seed)

    def _starting(self, study: Study) -> bool:
        return len(study._get_trials(deepcopy=False, states=_STARTED, use_cache=True)) < self._startup

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self._starting(study):
            return {}
        return self._then.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        return self._then.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        if not self._starting(study) or not isinstance(param_distribution, CategoricalDistribution):
            return self._then.sample_independent(study, trial, param_name, param_distribution)
        choices: Sequence[Any] = param_distribution.choices
        others = [
            t
            for t in study._get_trials(deepcopy=False, states=_SEEN, use_cache=False)
            if t.number != trial.number
        ]
        used = Counter(t.params[param_name] for t in others if param_name in t.params)
        fewest = min(used[c] for c in choices)
        least = [c for c in choices if used[c] == fewest]
        return least[self._rng.randint(len(least))]

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._then.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._then.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._rng.seed()
        self._then.reseed_rng()


def search_sampler(
    seed: int,
    startup: int = 10,
    spread: bool = False,
    multivariate: bool | None = None,
    group: bool = False,
    **tpe: Any,
) -> BaseSampler:
    """The sampler of one trial job."""
    base = optuna.samplers.TPESampler(
        seed=seed,
        constant_liar=True,
        n_startup_trials=startup,
        multivariate=multivariate,
        group=group,
        **tpe,
    )
    if spread:
        return SpreadStart(base, startup, seed)
    return base
