"""`MeasureSettings`: how one trial is measured, each field a run option."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from autotune.errors import UsageError
from autotune.options.declare import option, resolve_aliases


@dataclass(frozen=True)
class MeasureSettings:
    """How one trial is measured (DESIGN.md, "Measurement protocol"): the settling steps run first
    and never scored, then the measured window. Each field is a run option declared with its help
    (docs/reference/options.md). Their names are not `TrainingArguments`' ``warmup_steps`` and
    ``max_steps`` (the run's learning-rate warm-up and length); those old names are deprecated
    keywords of the constructor (`autotune.options.declare.ALIASES`)."""

    settle_steps: int = option(
        3,
        help="Optimizer steps always run before the measured window and never scored (the trial's "
        "warm-up); settling goes on while step times still fall (compilation), up to "
        "{max_settle_steps}.",
        group="measurement",
    )
    max_settle_steps: int = option(
        20,
        help="Settling goes on while step times still fall (compilation) up to this many steps; where "
        "not given, raised to {settle_steps}.",
        group="measurement",
        flag=None,
    )
    eager_settle_steps: int | None = option(
        None,
        help="Where given, a configuration that compiles nothing settles for this many steps, "
        "whatever their times (a finalists' round: 2, the search has seen the configuration "
        "settle); not given: as any other, {settle_steps} and more while step times fall.",
        group="measurement",
        flag=None,
    )
    min_measure_steps: int = option(
        5,
        help="Measured steps before the stability rule may end the window; where not given, lowered "
        "to {measure_steps}.",
        group="measurement",
        flag=None,
    )
    measure_steps: int = option(
        30,
        help="The measured window ends after this many optimizer steps at the latest.",
        group="measurement",
    )
    max_seconds: float = option(
        60.0, help="... or after this many seconds of measured window.", group="measurement"
    )
    target_rel_ci: float = option(
        0.03,
        help="... or as soon as the 95% confidence half-width of tokens/s is below this fraction of it.",
        group="measurement",
        flag="--target-ci",
    )
    trial_timeout_s: float = option(
        900.0,
        help="Seconds a trial may train (warm-up included) before it ends with reason timeout at its "
        "next step.",
        group="measurement",
        flag="--trial-timeout",
    )
    screen_ratio: float = option(
        0.5,
        help="Screening: a search trial whose fastest step, from its second step on (a compiled "
        "trial: once its {settle_steps} are done), runs under this fraction of the best tokens/s "
        "the study has measured (its trials and its baseline) stops there, reason screened_out, "
        "instead of taking its full window; with {train_tokens} or {train_steps}, one whose run "
        "at that speed (its set-up at the least measured, no compilation) is predicted to take "
        "longer than the best predicted run divided by this fraction. A machine probe confirms "
        "the verdict first: where the machine runs slower than when the best was measured, the "
        "trial is judged that much faster (up to 4x). 0: every trial gets its full window (the promotion "
        "line is off too).",
        group="measurement",
    )
    promote_ratio: float = option(
        0.8,
        help="The promotion line: a search trial's window that, after {min_measure_steps} steps, measures it "
        "clearly under this fraction of the study's best (the upper end of its 95% interval is) "
        "ends there: the trial keeps its figure, less precise, and does not earn the rest of its "
        "window; 0: every trial that passed screening gets its full window.",
        group="measurement",
    )

    def __post_init__(self) -> None:
        if not 0 <= self.screen_ratio < 1:
            raise UsageError(
                f"screen_ratio must be in [0, 1), got {self.screen_ratio}",
                "use 0.5 (stop trials under half the best throughput) or 0 (no screening)",
                field="screen_ratio",
            )
        if not 0 <= self.promote_ratio < 1:
            raise UsageError(
                f"promote_ratio must be in [0, 1), got {self.promote_ratio}",
                "use 0.8 (end the windows of trials clearly under 0.8x the best) or 0 (full windows)",
                field="promote_ratio",
            )
        if self.trial_timeout_s <= 0:
            raise UsageError(
                f"trial_timeout_s must be positive, got {self.trial_timeout_s}", field="trial_timeout_s"
            )
        if self.eager_settle_steps is not None and self.eager_settle_steps < 1:
            raise UsageError(
                f"eager_settle_steps must be >= 1, got {self.eager_settle_steps}", field="eager_settle_steps"
            )
        if self.settle_steps < 1:
            raise UsageError(f"settle_steps must be >= 1, got {self.settle_steps}", field="settle_steps")
        if self.max_settle_steps < self.settle_steps:
            raise UsageError(
                f"max_settle_steps must be >= settle_steps, got {self.max_settle_steps} and "
                f"{self.settle_steps}",
                field=("max_settle_steps", "settle_steps"),
            )
        if self.measure_steps < 2:
            raise UsageError(
                f"measure_steps must be at least 2, got {self.measure_steps}",
                "a confidence interval needs two measured steps",
                field="measure_steps",
            )
        if not 2 <= self.min_measure_steps <= self.measure_steps:
            raise UsageError(
                f"need 2 <= min_measure_steps <= measure_steps, got min_measure_steps="
                f"{self.min_measure_steps}, measure_steps={self.measure_steps}",
                field=("min_measure_steps", "measure_steps"),
            )
        for name in ("max_seconds", "target_rel_ci"):
            if not getattr(self, name) > 0:
                raise UsageError(f"{name} must be positive, got {getattr(self, name)}", field=name)

    @property
    def step_budget(self) -> int:
        """The `TrainingArguments.max_steps` given to the Trainer: the window always ends before it."""
        return self.max_settle_steps + self.measure_steps + 1


def _taking_old_names(init: Any) -> Any:
    """`MeasureSettings`' constructor, also taking its fields' deprecated names (with a
    `FutureWarning` at the caller's line): ``MeasureSettings(max_steps=10)`` still works."""
    names = {f.name for f in dataclasses.fields(MeasureSettings)}

    @functools.wraps(init)
    def __init__(self: MeasureSettings, *args: Any, **values: Any) -> None:
        resolve_aliases(values, names, warn=2)
        init(self, *args, **values)

    return __init__


MeasureSettings.__init__ = _taking_old_names(MeasureSettings.__init__)  # type: ignore[method-assign]
