"""`MeasureSettings`: how one trial is measured, each field a run option."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import UsageError
from autotune.options.declare import option


@dataclass(frozen=True)
class MeasureSettings:
    """How one trial is measured (DESIGN.md, "Measurement protocol"). Each field is a run option
    declared with its help (docs/reference/options.md)."""

    warmup_steps: int = option(
        3,
        help="Optimizer steps always run before the measured window and never scored; warm-up goes on "
        "while step times still fall (compilation), up to {max_warmup_steps}.",
        group="measurement",
    )
    max_warmup_steps: int = option(
        20,
        help="Warm-up goes on while step times still fall (compilation) up to this many steps; where "
        "not given, raised to {warmup_steps}.",
        group="measurement",
        flag=None,
    )
    eager_warmup_steps: int | None = option(
        None,
        help="Where given, the warm-up of a configuration that compiles nothing is this many steps, "
        "whatever their times (a finalists' round: 2, the search has seen the configuration "
        "settle); not given: as any other's, {warmup_steps} and more while step times fall.",
        group="measurement",
        flag=None,
    )
    min_steps: int = option(
        5,
        help="Measured steps before the stability rule may end the window; where not given, lowered "
        "to {max_steps}.",
        group="measurement",
        flag=None,
    )
    max_steps: int = option(
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
        "trial: once its minimum warm-up is done), runs under this fraction of the best tokens/s "
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
        help="The promotion line: a search trial's window that, after {min_steps} steps, measures it "
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
        if self.eager_warmup_steps is not None and self.eager_warmup_steps < 1:
            raise UsageError(
                f"eager_warmup_steps must be >= 1, got {self.eager_warmup_steps}", field="eager_warmup_steps"
            )
        if self.warmup_steps < 1:
            raise UsageError(f"warmup_steps must be >= 1, got {self.warmup_steps}", field="warmup_steps")
        if self.max_warmup_steps < self.warmup_steps:
            raise UsageError(
                f"max_warmup_steps must be >= warmup_steps, got {self.max_warmup_steps} and "
                f"{self.warmup_steps}",
                field=("max_warmup_steps", "warmup_steps"),
            )
        if self.max_steps < 2:
            raise UsageError(
                f"max_steps must be at least 2, got {self.max_steps}",
                "a confidence interval needs two measured steps",
                field="max_steps",
            )
        if not 2 <= self.min_steps <= self.max_steps:
            raise UsageError(
                f"need 2 <= min_steps <= max_steps, got min_steps={self.min_steps}, "
                f"max_steps={self.max_steps}",
                field=("min_steps", "max_steps"),
            )
        for name in ("max_seconds", "target_rel_ci"):
            if not getattr(self, name) > 0:
                raise UsageError(f"{name} must be positive, got {getattr(self, name)}", field=name)

    @property
    def step_budget(self) -> int:
        """The `max_steps` given to the Trainer: the window always ends before it."""
        return self.max_warmup_steps + self.max_steps + 1
