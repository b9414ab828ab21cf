"""The trial's Trainer for a run: `AutotuneTrainer`, or composed over the user's own Trainer class
(the Python API's `autotune.tune` with a `Trainer` subclass), so that the user's overrides run where
the stock `Trainer`'s would while autotune applies and measures the trial."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from transformers import Trainer, TrainerCallback

from autotune.measure.callback import ThroughputCallback
from autotune.plan.resolved import Plan, base_training_args
from autotune.progress import Reporter
from autotune.trial.trainer import AutotuneTrainer
from autotune.workloads.user import UserWorkload


def build_trainer(
    plan: Plan,
    output_dir: str,
    reporter: Reporter,
    callbacks: Sequence[TrainerCallback] = (),
    debug: bool = False,
) -> AutotuneTrainer:
    """The `AutotuneTrainer` that runs a plan's trials (and benchmarks' measurements). For the
    Python API's own Trainer pieces (a `UserWorkload`): an instance of `trial_trainer_class` of the
    user's Trainer class, with their callbacks and their Trainer's attributes carried over."""
    user = plan.workload if isinstance(plan.workload, UserWorkload) else None
    trainer = trial_trainer_class(user.trainer_class if user is not None else None)(
        plan=plan,
        base_args=base_training_args(plan, output_dir),
        measurement=ThroughputCallback(plan.config.measure, plan.workload.seq_len, reporter),
        reporter=reporter,
        callbacks=[*(user.callbacks if user is not None else ()), *callbacks],
        debug=debug,
    )
    if user is not None:
        for name, value in user.trainer_attrs.items():
            setattr(trainer, name, value)
        trainer.callback_handler.processing_class = trainer.processing_class
    return trainer


@functools.cache
def trial_trainer_class(user_class: type | None) -> type[AutotuneTrainer]:
    """The class a trial's Trainer is for a user's Trainer class: `AutotuneTrainer` first (it
    applies and measures the trial), then the user's class, so that every method the user's class
    overrides (``compute_loss``, ``training_step``, ``create_optimizer``, ...) runs where the stock
    `Trainer`'s would. The user's ``__init__`` is not called (its arguments are unknown here): what it
    stored on the instance is set on the trial's Trainer instead (`UserWorkload.trainer_attrs`).

    Raises:
        TypeError: `user_class` is not a `Trainer` class.
    """
    if user_class is None or user_class is Trainer or issubclass(AutotuneTrainer, user_class):
        return AutotuneTrainer
    if not issubclass(user_class, Trainer):
        raise TypeError(f"{user_class.__name__} is not a transformers.Trainer class")

    def stock_init(self: Any, *args: Any, **kwargs: Any) -> None:
        Trainer.__init__(self, *args, **kwargs)

    skip_init = type(user_class.__name__, (user_class,), {"__init__": stock_init})
    return type(
        f"Autotune{user_class.__name__}",
        (AutotuneTrainer, skip_init),
        {"__module__": __name__, "__doc__": f"`AutotuneTrainer` over {user_class.__qualname__}."},
    )
