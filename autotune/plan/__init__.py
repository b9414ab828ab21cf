"""A run resolved once against this machine: `Plan` (`resolved`) and how one is made from a run
configuration or a stored study (`build`). The search and every trial process work from one."""

from autotune.plan.build import plan_for, plan_from_study, plan_search, workload_of
from autotune.plan.resolved import (
    Plan,
    base_training_args,
    baseline_values,
    data_notes,
    trial_world_size,
)

__all__ = [
    "Plan",
    "base_training_args",
    "baseline_values",
    "data_notes",
    "plan_for",
    "plan_from_study",
    "plan_search",
    "trial_world_size",
    "workload_of",
]
