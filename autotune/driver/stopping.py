"""When a search should start no more trials although its budget is not met."""

from __future__ import annotations

from collections.abc import Callable

from autotune.plan.resolved import Plan
from autotune.store.session import StudyStore
from autotune.store.trials import distinct_params, measured_count


def stop_reason(plan: Plan, study: StudyStore, target: int) -> Callable[[], str | None]:
    """Why a search should start no more trials although its budget is not met, or None: the
    sampler keeps proposing trials that need no training, or every combination was tried."""
    max_skips = max(20, 5 * (target - measured_count(study)))
    skipped_before = _skipped_count(study)

    def reason() -> str | None:
        skipped = _skipped_count(study) - skipped_before
        if skipped >= max_skips:
            return f"stopped after {skipped} skipped trials: few combinations of this space run here"
        if distinct_params(study) >= plan.space.grid_size():
            return f"stopped: all {plan.space.grid_size()} combinations of the space were tried"
        return None

    return reason


def _skipped_count(study: StudyStore) -> int:
    return study.count() - measured_count(study)
