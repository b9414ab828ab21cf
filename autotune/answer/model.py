"""What a study answers, typed: the configuration to use (`Choice`), how sure that is (`Interval`,
`AA`), why (the rule constants) and what else was close (`Answer`).

An `Answer` is decided once from the stored records (`autotune.answer.decide`), stored with the
study as its dict (`Answer.to_dict`), and read back by `autotune.answer.decide.study_answer`.
Pure: no optuna, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from autotune.records import WholeRun


@dataclass(frozen=True)
class Interval:
    """A figure with its 95% interval (`low` and `high` None: no interval, one measurement)."""

    value: float
    low: float | None = None
    high: float | None = None
    rounds: int = 1

    def describe(self, unit: str = "x", digits: int = 2) -> str:
        text = f"{self.value:.{digits}f}{unit}"
        if self.low is not None and self.high is not None and self.rounds >= 1:
            low, high = f"{self.low:.{digits}f}", f"{self.high:.{digits}f}"
            over = f"{self.rounds} rounds" if self.rounds > 1 else "1 round"
            text += f" (95% interval {low}-{high}{unit} over {over})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "rounds": self.rounds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Interval | None:
        if not data:
            return None
        return cls(float(data["value"]), data.get("low"), data.get("high"), int(data.get("rounds") or 1))


@dataclass(frozen=True)
class Choice:
    """A configuration the answer speaks of: the answer itself, or the alternative beside it.

    Attributes:
        trial: its trial number; None for the defaults (the baseline's configuration).
        params: its knob values.
        training_args: the `TrainingArguments` kwargs it applied (the defaults': what their knob
            values apply).
        model_kwargs: its model-load kwargs.
        tokens_per_s: its throughput: when re-measured, the rounds' (geometric) mean with its
            interval, the noise pooled over every contestant (`autotune.measure.rounds.level`);
            else the search window's (then `remeasured` is False).
        peak_memory_bytes: its peak: the re-measured median when re-measured.
        remeasured: whether the figures are the finalists' re-measurement.
        speedup: its paired speedup over the baseline, with its interval (None: no paired rounds).
        changes: its changes to the training math against the baseline, as text.
    """

    trial: int | None
    params: dict[str, Any]
    training_args: dict[str, Any]
    model_kwargs: dict[str, Any]
    tokens_per_s: Interval | None
    peak_memory_bytes: int | None
    remeasured: bool
    speedup: Interval | None = None
    changes: tuple[str, ...] = ()

    @property
    def is_defaults(self) -> bool:
        return self.trial is None

    @property
    def label(self) -> str:
        return "the defaults" if self.trial is None else f"trial {self.trial}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "trial": self.trial,
            "params": dict(self.params),
            "training_args": dict(self.training_args),
            "model_kwargs": dict(self.model_kwargs),
            "tokens_per_s": self.tokens_per_s.to_dict() if self.tokens_per_s else None,
            "peak_memory_bytes": self.peak_memory_bytes,
            "remeasured": self.remeasured,
            "speedup": self.speedup.to_dict() if self.speedup else None,
            "changes": list(self.changes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Choice:
        return cls(
            trial=data.get("trial"),
            params=dict(data.get("params") or {}),
            training_args=dict(data.get("training_args") or {}),
            model_kwargs=dict(data.get("model_kwargs") or {}),
            tokens_per_s=Interval.from_dict(data.get("tokens_per_s")),
            peak_memory_bytes=data.get("peak_memory_bytes"),
            remeasured=bool(data.get("remeasured")),
            speedup=Interval.from_dict(data.get("speedup")),
            changes=tuple(data.get("changes") or ()),
        )


# Why the answer is what it is (`Answer.rule`).
BEATS_DEFAULTS = "beats_defaults"  # re-measured: its speedup's interval lies above 1 + MIN_GAIN
KEEP_DEFAULTS = "keep_defaults"  # nothing beat the defaults measurably: the answer is the defaults
KEEPS_MATH = "keeps_math"  # a math-changing leader did not measurably beat the best math-keeping one
NOT_REMEASURED = "not_remeasured"  # the search window's best: no finalists' rounds to judge by
NO_TRIAL = "no_trial"  # nothing measured fits: the defaults (when measured) or nothing
DEFAULTS_OVER_CAP = "defaults_over_cap"  # the defaults' peak is over the cap: the best that fits
CHOSEN = "chosen"  # a trial the caller named (an export of one trial), not a decision


@dataclass(frozen=True)
class AA:
    """The instrument measured against itself, as the rounds' noise model sees it
    (`autotune.measure.rounds`): the baseline measured twice in each round of the finalists, in
    two positions of the rotated order, and its ratio to itself estimated by the model with its 95%
    interval. The interval must hold 1 (a configuration is as fast as itself): where it does, the
    model's noise accounts for what the instrument shows; where it does not, every interval the
    answer states was widened by `scale`.

    Attributes:
        offset: the log of the baseline's ratio to itself (first measurement over second).
        spread: the standard error of that log ratio.
        rounds: the rounds both were measured in.
        largest: the largest per-round |log ratio| of the two.
        pooled: the noise of one measurement (standard deviation of a log score), pooled over
            every contestant of the rounds (None: no residual degree of freedom yet).
        pooled_df: its degrees of freedom.
        low, high: the 95% interval of the ratio (None: none).
        scale: the widening of every interval the check asked for (1: none).
        slope: the drift along a round's positions the model estimated, per position (log terms;
            None: not estimated).
        excluded: the measurements the model left out as disturbed (and the rounds measured again).
    """

    offset: float
    spread: float
    rounds: int
    largest: float
    pooled: float | None = None
    pooled_df: int = 0
    low: float | None = None
    high: float | None = None
    scale: float = 1.0
    slope: float | None = None
    excluded: int = 0

    @property
    def ratio(self) -> float:
        return math.exp(self.offset)

    @property
    def holds(self) -> bool | None:
        """Whether the A/A interval holds 1 (None: no interval)."""
        if self.low is None or self.high is None:
            return None
        return self.low <= 1 <= self.high

    @property
    def mean_difference(self) -> float:
        """The A/A difference as a fraction: the offset's size (0.02: 2%)."""
        return math.exp(abs(self.offset)) - 1

    @property
    def largest_difference(self) -> float:
        return math.exp(self.largest) - 1

    def describe(self) -> str:
        text = f"the baseline measured twice in each of {self.rounds} rounds: {self.ratio:.3f}x itself"
        if self.low is not None and self.high is not None:
            text += f" (95% interval {self.low:.3f}-{self.high:.3f}x)"
            if self.holds:
                text += ", which holds 1: the noise model accounts for it"
            else:
                text += f", which does not hold 1: every interval is widened {self.scale:.2f}x"
        text += f"; at most {100 * self.largest_difference:.1f}% apart in a round"
        if self.pooled is not None:
            text += (
                f"; one measurement's noise, pooled over every contestant of the rounds: "
                f"{100 * (math.exp(self.pooled) - 1):.1f}% ({self.pooled_df} degrees of freedom)"
            )
        if self.slope is not None:
            text += (
                f"; a drift of {100 * (math.exp(self.slope) - 1):+.1f}% per position in a round, taken out"
            )
        if self.excluded:
            text += f"; {self.excluded} disturbed window(s) left out and measured again"
        return text

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> AA | None:
        if not data:
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known and value is not None})


@dataclass(frozen=True)
class Answer:
    """What a study answers: the configuration to use, how sure that is, and what else was close.

    Computed once when a search, a resume or a re-selection under another cap ends
    (`autotune.store.answer.decide`), stored with the study, and rendered by the search's end,
    ``autotune show``, every ``autotune export`` format, ``autotune report``, `SearchResult` and
    `tune`'s result.

    Attributes:
        rule: why this is the answer (`BEATS_DEFAULTS`, `KEEP_DEFAULTS`, `KEEPS_MATH`,
            `NOT_REMEASURED`, `NO_TRIAL`).
        verdict: the answer in one line.
        choice: the configuration handed back (None: nothing measured to hand back).
        alternative: the best measured configuration when it is not the answer, with its figures
            and what it changes; never pasted as the answer.
        alternative_gain: the alternative's paired speedup over the answer.
        baseline_tokens_per_s: the baseline's throughput as the figures were compared with it.
        memory_cap_bytes: the cap the choice was made under (None: the study's own, or none).
        objective: ``"tokens_per_s"``, or ``"run_time"`` with the user's run length.
        aa: the baseline measured against itself in the finalists' rounds (`AA`), the check of
            the noise model every interval above comes from; None: no rounds measured it twice.
        finalists_time: where the finalists' time went (`autotune.driver.accounting`: wall
            seconds, their share of the search, measurements, rounds, set-up/warm-up/window
            seconds); None: no finalists ran in the search that decided it.
        whole_run: the choice's whole-run check (`WholeRun`: its peak and headroom under the
            cap); None: not checked (`whole_run_note` says why).
        whole_run_note: why the choice has no whole-run check, or which configurations failed
            theirs before it; None: nothing to say.
    """

    rule: str
    verdict: str
    choice: Choice | None
    alternative: Choice | None = None
    alternative_gain: Interval | None = None
    baseline_tokens_per_s: float | None = None
    memory_cap_bytes: int | None = None
    objective: str = "tokens_per_s"
    aa: AA | None = None
    finalists_time: dict[str, Any] | None = None
    whole_run: WholeRun | None = None
    whole_run_note: str | None = None

    @property
    def keeps_defaults(self) -> bool:
        return self.choice is not None and self.choice.is_defaults

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "verdict": self.verdict,
            "choice": self.choice.to_dict() if self.choice else None,
            "alternative": self.alternative.to_dict() if self.alternative else None,
            "alternative_gain": self.alternative_gain.to_dict() if self.alternative_gain else None,
            "baseline_tokens_per_s": self.baseline_tokens_per_s,
            "memory_cap_bytes": self.memory_cap_bytes,
            "objective": self.objective,
            "aa": self.aa.to_dict() if self.aa else None,
            "finalists_time": dict(self.finalists_time) if self.finalists_time else None,
            "whole_run": self.whole_run.to_dict() if self.whole_run else None,
            "whole_run_note": self.whole_run_note,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Answer:
        return cls(
            rule=str(data["rule"]),
            verdict=str(data["verdict"]),
            choice=Choice.from_dict(data["choice"]) if data.get("choice") else None,
            alternative=Choice.from_dict(data["alternative"]) if data.get("alternative") else None,
            alternative_gain=Interval.from_dict(data.get("alternative_gain")),
            baseline_tokens_per_s=data.get("baseline_tokens_per_s"),
            memory_cap_bytes=data.get("memory_cap_bytes"),
            objective=str(data.get("objective") or "tokens_per_s"),
            aa=AA.from_dict(data.get("aa")),
            finalists_time=dict(data["finalists_time"]) if data.get("finalists_time") else None,
            whole_run=WholeRun.from_dict(data.get("whole_run")),
            whole_run_note=data.get("whole_run_note"),
        )
