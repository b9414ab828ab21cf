"""The fastest trial's twin that keeps the training math (`math_keeping_twin`).

A search's fastest trial may change the training math (another optimizer, precision or effective
batch) and owe most of its speed to a knob that keeps it, such as checkpointing off. The answer
hands a math change back only where it measurably beats the best configuration that keeps the
math (`autotune.answer.decide`), so that configuration must have been measured. A sampler's few
trials may never have tried it: the search then tries the twin itself, one trial more, before
the finalists' rounds. Pure but for reading the study.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

from autotune.answer.choices import same_as_baseline
from autotune.answer.race import best_trial
from autotune.records import read_study, trial_record
from autotune.space.searchspace import SearchSpace
from autotune.store.semantics import MATH_KNOBS, baseline_math, record_changes, study_changes
from autotune.store.session import StudyStore
from autotune.store.trials import read_trials


@dataclass(frozen=True)
class Twin:
    """The trial to try: its sampled knob values, whose twin it is, and what it sets back."""

    params: dict[str, Any]
    of: int
    restored: tuple[str, ...]

    def note(self) -> str:
        kept = ", ".join(f"{k}={self.params[k]}" for k in self.restored)
        return (
            f"trial {self.of}, the fastest, changes the training math; its twin that keeps it "
            f"({kept}) was not tried: one trial more tries it"
        )


def math_keeping_twin(study: StudyStore, space: SearchSpace) -> Twin | None:
    """The fastest trial's configuration with the fewest of its math knobs set back to the
    baseline's values such that it keeps the training math, where the space holds it and no
    trial of the study has tried it (nor is it the baseline's). None: the fastest keeps the math,
    or no such configuration is left to try."""
    record = read_study(study)
    leader = best_trial(study)
    if leader is None or not record.baseline.params:
        return None
    if not record_changes(record, leader):
        return None
    base = baseline_math(record)
    sampled = {k: v for k, v in leader.params.items() if k in space.knobs}
    math = [k for k in MATH_KNOBS if k in sampled and sampled[k] != base[k]]
    tried = [t.params for t in read_trials(study)] + study.queued()
    for size in range(1, len(math) + 1):
        for restored in combinations(math, size):
            params = {**sampled, **{k: base[k] for k in restored}}
            if any(params[k] not in space.knobs[k] for k in restored):
                continue
            complete = space.complete(params)
            if study_changes(record, complete) or _tried(params, tried):
                continue
            if same_as_baseline(record, trial_record(-1, complete, "COMPLETE", {})):
                return None  # the baseline is the twin: it is measured already
            return Twin(params, leader.number, restored)
    return None


def _tried(params: dict[str, Any], tried: list[dict[str, Any]]) -> bool:
    return any(all(other.get(k) == v for k, v in params.items()) for other in tried)
