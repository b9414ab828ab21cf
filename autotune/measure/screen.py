"""Screening's terms: what a search trial is judged against (`ScreenReference`: the study's best
when it began, on throughput or on the user's predicted run), and the stop it ends with when even
its fastest step cannot compete (`ScreenedOut`, with what the trial records of it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ScreenReference:
    """What a search trial is screened against: the study's best when the trial began
    (`autotune.trial.measured.screen_reference`).

    Without the user's run length a trial is judged on throughput: it is screened out when its
    fastest step runs under `ratio` of `tokens_per_s`. With it (`run_tokens`), on that run's
    predicted time: when even its optimistic run, `run_tokens` at its fastest step's speed plus
    `setup_s` (and no compilation), takes longer than `run_s` / `ratio`. That is the same
    comparison of effective rates (tokens over run time), and it stops only a configuration that
    cannot win the run, whatever its compilation and set-up turn out to cost.

    Attributes:
        tokens_per_s: the best steady-state throughput measured (the study's trials and baseline).
        probe_s: the machine probe (`autotune.measure.drift`) taken after the best was measured
            (with `run_tokens`: the best run's); None where none was recorded (a store from before
            probes): the verdict is then not confirmed against the machine's drift.
        run_tokens: the tokens of the user's run; None: the trial is judged on throughput.
        run_s: the shortest predicted run of `run_tokens` measured in the study.
        setup_s: the least set-up a measured run took: the set-up a run of any configuration pays
            at best (model, data and Trainer are built alike for every configuration).
    """

    tokens_per_s: float
    probe_s: float | None = None
    run_tokens: float | None = None
    run_s: float | None = None
    setup_s: float = 0.0

    @property
    def judges_run(self) -> bool:
        return bool(self.run_tokens and self.run_s)

    def line_tokens_per_s(self, ratio: float, setup_s: float) -> float:
        """The speed a trial's fastest step must reach to stay in the search (screening line):
        `ratio` of the best throughput; with the run's length, the speed at which the run (at
        `setup_s` of set-up) takes `run_s` / `ratio`."""
        if not self.judges_run:
            return ratio * self.tokens_per_s
        allowed_s = float(self.run_s or 0.0) / ratio - setup_s
        return float(self.run_tokens or 0.0) / allowed_s if allowed_s > 0 else math.inf

    def optimistic_run_s(self, tokens_per_s: float, setup_s: float) -> float | None:
        """The predicted run of `run_tokens` at `tokens_per_s` and `setup_s` of set-up, without
        compilation; None without the run's length."""
        if not self.judges_run:
            return None
        return float(self.run_tokens or 0.0) / tokens_per_s + setup_s if tokens_per_s > 0 else math.inf


class ScreenedOut(RuntimeError):
    """Screening stopped the trial: even its fastest step is too slow to compete (see
    `ScreenReference`).

    Attributes:
        bound_tokens_per_s: the trial's optimistic throughput, its fastest step's.
        reference_tokens_per_s: the best throughput measured in the study when the trial began.
        ratio: the screening line, as a fraction of the reference.
        steps: the optimizer steps the trial ran (the last one stopped at its deadline when
            `stopped_s` is set).
        steps_s: the seconds those steps took (compilation included).
        stopped_s: the seconds the last step had run when its deadline stopped it (None: it ended).
        slowdown: how much slower the machine ran when the trial was stopped than when the
            reference was measured, by the probe (`drift.slowdown`); the trial's steps were judged
            that much faster.
        run_tokens, run_s, reference_run_s: judged on the user's run: its tokens, the trial's
            optimistic predicted run (seconds) and the best predicted run measured.
    """

    def __init__(
        self,
        bound_tokens_per_s: float,
        reference_tokens_per_s: float,
        ratio: float,
        steps: int,
        steps_s: float,
        stopped_s: float | None = None,
        slowdown: float = 1.0,
        run_tokens: float | None = None,
        run_s: float | None = None,
        reference_run_s: float | None = None,
    ) -> None:
        self.bound_tokens_per_s = bound_tokens_per_s
        self.reference_tokens_per_s = reference_tokens_per_s
        self.ratio = ratio
        self.steps = steps
        self.steps_s = steps_s
        self.stopped_s = stopped_s
        self.slowdown = slowdown
        self.run_tokens, self.run_s, self.reference_run_s = run_tokens, run_s, reference_run_s
        super().__init__(self._sentence())

    def _sentence(self) -> str:
        when = f"after {self.steps} steps: its fastest step ran at"
        if self.stopped_s is not None:  # the stopped step's speed is a bound: it would have taken longer
            when = f"in step {self.steps}, stopped after {self.stopped_s:.2f} s: no step ran faster than"
        speed = f"{self.bound_tokens_per_s:,.0f} tok/s"
        if self.slowdown > 1:
            speed += (
                f" ({self.bound_tokens_per_s * self.slowdown:,.0f} tok/s at the machine's speed when the"
                f" best was measured: its probe ran {self.slowdown:.2f}x slower now)"
            )
        if self.run_tokens and self.run_s is not None and self.reference_run_s is not None:
            return (
                f"screened out {when} {speed}: judged on the predicted run of {self.run_tokens:,.0f} "
                f"tokens, at least {self.run_s:,.1f} s with it (its set-up at the least measured, no "
                f"compilation), over {1 / self.ratio:g}x the best predicted run, "
                f"{self.reference_run_s:,.1f} s"
            )
        best = f"{self.reference_tokens_per_s:,.0f} tok/s"
        return f"screened out {when} {speed}, under {self.ratio:g}x the best measured {best}"

    def attrs(self) -> dict[str, Any]:
        optional = {
            "screen_step_stopped_s": self.stopped_s,
            "screen_slowdown": self.slowdown if self.slowdown > 1 else None,
            "screen_run_s": self.run_s,
            "screen_reference_run_s": self.reference_run_s,
        }
        return {
            "screen_tokens_per_s": self.bound_tokens_per_s,
            "screen_reference_tokens_per_s": self.reference_tokens_per_s,
            "screen_ratio": self.ratio,
            "screen_steps": self.steps,
            "screen_s": self.steps_s,
            **{key: value for key, value in optional.items() if value is not None},
        }
