"""The answer's verdict in one line, by the rule that decided it (`verdict_line`): what is handed
back, what it beats and by how much, and why a faster configuration is only named beside it."""

from __future__ import annotations

from autotune.answer.model import (
    DEFAULTS_OVER_CAP,
    KEEP_DEFAULTS,
    KEEPS_MATH,
    NOT_REMEASURED,
    Choice,
    Interval,
)
from autotune.measure.stats import MATH_GAIN


def verdict_line(rule: str, chosen: Choice, named: Choice | None, gain: Interval | None, paired: bool) -> str:
    speed = chosen.speedup.describe() if chosen.speedup and not chosen.is_defaults else None
    if rule == KEEP_DEFAULTS:
        best = f" (the best measured, {named.label}, {gain_text(named, gain)})" if named else ""
        return f"nothing beat the defaults measurably{best}: keep them"
    if rule == KEEPS_MATH and named is not None and chosen.is_defaults:
        return (
            f"keep the defaults: {named.label} is faster ({gain_text(named, gain)}) but changes the training "
            f"math, which takes a measured gain over {1 + MATH_GAIN:.2f}x: named as the alternative"
        )
    if rule == KEEPS_MATH and named is not None:
        text = f"{chosen.label} keeps the training math"
        if speed:
            text += f" and beats the defaults: {speed}"
        return (
            f"{text}; {named.label} is faster still ({gain_text(named, gain, 'than ' + chosen.label)}) "
            f"but changes the training math, which takes a measured gain over {1 + MATH_GAIN:.2f}x: "
            "named as the alternative"
        )
    if rule == NOT_REMEASURED:
        return f"{chosen.label}, the search window's best (not re-measured: its figures are one window's)"
    if rule == DEFAULTS_OVER_CAP:
        against = f" ({speed} the defaults' speed)" if speed else ""
        return (
            f"the defaults do not fit under the memory cap: {chosen.label} is the fastest that does{against}"
        )
    if chosen.is_defaults:
        return "keep the defaults"
    if speed and paired:
        text = f"{chosen.label} beats the defaults: {speed}"
        if named is not None and gain is not None and gain.value > 0:
            lead = Interval(
                1 / gain.value,
                1 / gain.high if gain.high else None,
                1 / gain.low if gain.low else None,
                gain.rounds,
            )
            text += (
                f"; it changes the training math, and beats {named.label}, which keeps it, by "
                f"{lead.describe()}: more than the {1 + MATH_GAIN:.2f}x a math change must gain"
            )
        return text
    return f"{chosen.label}, re-measured (the baseline was not re-measured beside it)"


def unpaid_math_change(named: Choice, keeper: Choice, lead: Interval | None) -> str:
    """Keep the defaults: the best that keeps the math did not beat them measurably, and the faster
    `named` changes the math without beating that one by `MATH_GAIN` (`lead`)."""
    by = f" by {lead.describe()}" if lead is not None else ""
    return (
        f"nothing that keeps the training math beat the defaults measurably (the best, {keeper.label}, "
        f"{gain_text(keeper, None)}): keep them; {named.label} is faster ({gain_text(named, None)}) but "
        f"changes the training math, and beats {keeper.label}, which keeps it,{by}: not measurably "
        f"the {1 + MATH_GAIN:.2f}x a math change must gain: named as the alternative"
    )


def gain_text(named: Choice, gain: Interval | None, over: str = "over the defaults") -> str:
    if gain is not None:
        return f"{gain.describe()} {over}"
    if named.speedup is not None:
        return f"{named.speedup.describe()} over the defaults"
    return "not compared"
