"""The decisions benchmark's arithmetic and section, on stored figures made up here."""

from __future__ import annotations

import math
from typing import Any

from benchmarks.decisions import figures, holds, render


def _run(
    part: str, code: str, seed: int, claims: bool, stated: dict[str, Any] | None, **extra: Any
) -> dict[str, Any]:
    return {
        "part": part,
        "code": code,
        "seed": seed,
        "claims": claims,
        "stated": None if stated is None else {"trial": 1, "params": {"optim": "x"}, "speedup": stated},
        "wall_s": 60.0,
        "finalists_share": 0.25,
        "rounds": 3,
        "aa": {"pooled": math.log(1.07)},
        "verdict": "v",
        "baseline_search_tokens_per_s": 99.0,
        "baseline_rounds_tokens_per_s": 100.0,
        **extra,
    }


def test_figures_count_power_safety_coverage_cost_and_width() -> None:
    found = {"value": 1.3, "low": 1.15, "high": 1.47, "rounds": 3}
    missed = {"value": 1.2, "low": 0.9, "high": 1.6, "rounds": 2}
    runs = [
        _run("power", "after", 0, True, found, holds=True),
        _run("power", "after", 1, False, missed, holds=True),
        _run("power", "after", 2, True, found, holds=False),
        _run("aa", "after", 0, False, {"value": 0.9, "low": 0.8, "high": 1.0, "rounds": 2}),
        _run("aa", "after", 1, True, {"value": 1.05, "low": 1.02, "high": 1.08, "rounds": 4}),
        _run("power", "before", 0, False, missed),
    ]
    after = figures(runs, "after")
    assert after["power"] == (2, 3)  # claimed, with an interval above 1
    assert after["claims"] == (1, 2)
    assert after["coverage"] == (2, 3)
    assert after["share"]["median"] == 0.25
    assert after["half"]["max"] == math.log(1.6 / 1.2)
    assert after["half_in_band"]["n"] == 5  # every one at 7% pooled noise
    assert figures(runs, "before")["power"] == (0, 1)


def test_an_interval_holds_the_users_ratio_or_not() -> None:
    stated = {"value": 1.3, "low": 1.2, "high": 1.4}
    assert holds(stated, {"ratio": 1.25}) is True
    assert holds(stated, {"ratio": 1.45}) is False
    assert holds(stated, None) is None
    assert holds({"value": 1.3, "low": 0.0, "high": math.inf}, {"ratio": 1.3}) is None


def test_the_section_states_both_codes_against_the_bars() -> None:
    found = {"value": 1.3, "low": 1.15, "high": 1.47, "rounds": 3}
    data = {
        "command": "python -m benchmarks.decisions --before abc",
        "before_commit": "abc",
        "machine": {
            "date": "d",
            "commit": "def",
            "cpu": "c",
            "cores": 2,
            "native_bf16": True,
            "torch": "t",
            "transformers": "tr",
        },
        "runs": [_run("power", "after", 0, True, found, holds=True, excluded=1, without_exclusion=found)],
    }
    text = render(data)
    assert "| power: a 1.3x math-keeping speedup found" in text and "≥ 9/10" in text
    assert "before (abc)" in text and "after (def)" in text
    assert "1.30x (1.15-1.47x)" in text and "in 1 of the 1 searches" in text
