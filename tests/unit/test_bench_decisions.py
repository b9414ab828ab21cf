"""The decisions benchmark's arithmetic and section, on stored figures made up here."""

from __future__ import annotations

import math
from typing import Any

import pytest

from benchmarks.decisions import agreement, expected_hold, figures, holds, render


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
    assert after["expected"] == []  # no run records its user's noise: no chance is counted


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


def test_the_section_names_the_figures_kept_from_another_machine() -> None:
    found = {"value": 1.3, "low": 1.15, "high": 1.47, "rounds": 3}
    machine = {"date": "d", "commit": "def", "cpu": "here", "cores": 2, "native_bf16": True}
    runs = [{**_run("power", code, 0, True, found), "cpu": "here"} for code in ("before", "after")] + [
        {**_run("slow", code, 0, True, found), "cpu": "there"} for code in ("before", "after")
    ]
    data = {"command": "c", "before_commit": "abc", "runs": runs,
            "machine": {**machine, "torch": "t", "transformers": "tr"}}  # fmt: skip
    text = render(data)
    kept = "the slow searches of before, the slow searches of after on there"
    assert f"Kept from an earlier run on another machine: {kept}" in text
    assert "each part's before and after were measured on one machine" in text
    runs[-1]["cpu"] = "here"  # the slow search of after measured again here
    assert "the before and after of slow were measured on different machines" in render(data)
    for run in runs:
        run["cpu"] = "here"
    assert "another machine" not in render(data)


def test_agreement_judges_each_interval_by_the_other_searches_estimates_of_its_configuration() -> None:
    def stated(value: float, half: float) -> dict[str, Any]:
        return {"value": value, "low": value / half, "high": value * half, "rounds": 2}

    runs = [
        _run("power", "after", 0, True, stated(1.40, 1.12)),
        _run("power", "after", 1, True, stated(1.35, 1.12)),
        _run("power", "after", 2, True, stated(1.60, 1.05)),  # far from the others' 1.37
        _run("aa", "after", 0, False, stated(0.9, 1.2)),  # two of a configuration: not judged
        _run("aa", "after", 1, False, stated(0.9, 1.2)),
    ]
    found = agreement(runs)
    assert found["agreement"] == (2, 3)
    logs = [math.log(v) for v in (1.40, 1.35, 1.60)]
    mean = sum(logs) / 3
    assert found["between_sd"]["median"] == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in logs) / 2))
    assert found["stated_half"] == pytest.approx(math.log(1.12))


def test_an_honest_interval_is_expected_to_hold_a_noisy_users_ratio_less_often() -> None:
    stated = {"value": 1.4, "low": 1.4 / 1.1, "high": 1.4 * 1.1, "rounds": 2}
    extra = {"aa": {"pooled": 0.03, "pooled_df": 1000}, "rounds_looks": 1, "rounds_look": 1}
    exact = _run("power", "after", 0, True, stated, user={"ratio": 1.4, "se": 0.0}, **extra)
    noisy = _run("power", "after", 0, True, stated, user={"ratio": 1.4, "se": 0.1}, **extra)
    assert expected_hold(exact) == pytest.approx(0.95, abs=0.001)  # its own level, at many df
    search_se = math.log(1.1) / 1.96
    z = math.log(1.1) / math.hypot(search_se, 0.1)
    assert expected_hold(noisy) == pytest.approx(math.erf(z / math.sqrt(2)), abs=0.002)
    assert expected_hold(_run("power", "after", 0, True, stated, **extra)) is None  # no user
    runs = [{**noisy, "holds": True}, _run("power", "after", 1, True, stated, holds=True)]
    assert figures(runs, "after")["expected"] == [expected_hold(noisy)]  # the second has no user


def test_coverage_re_measures_only_the_codes_asked_for_and_judges_each_answer_by_its_codes_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse

    import benchmarks.decisions as decisions
    from autotune.progress import describe_params

    measured: list[list[str]] = []

    def rotated_rounds(model: str, contenders: dict[str, Any], rounds: int, *rest: Any, **kw: Any) -> Any:
        measured.append(list(contenders))

        def rate(name: str, r: int) -> float:
            return 100.0 if name == "defaults" else 130.0 + r

        return {name: {r: {"tokens_per_s": rate(name, r)} for r in range(rounds)} for name in contenders}

    monkeypatch.setattr(decisions, "rotated_rounds", rotated_rounds)
    defaults = {"optim": "adamw_torch_fused", "activation_checkpointing": True}
    stated = {"value": 1.3, "low": 1.25, "high": 1.36, "rounds": 2}

    def answer(code: str, params: dict[str, Any]) -> dict[str, Any]:
        run = _run("power", code, 0, True, stated)
        run["stated"]["params"] = params
        return {**run, "baseline_params": defaults}

    after = answer("after", {"activation_checkpointing": False})
    before = answer("before", {"optim": "adafactor"})
    old_key = f"{describe_params(defaults)} | {describe_params(before['stated']['params'])}"
    kept = {"users": {old_key: {"ratio": 0.9, "low": 0.8, "high": 1.0, "rounds": 3, "se": 0.05}}}
    aa = {**answer("after", {"optim": "adafactor"}), "part": "aa"}  # not searched in this run
    # the before code's answer of the configuration the after's users re-measure: not re-judged by them
    earlier = answer("before", {"activation_checkpointing": False})
    args = argparse.Namespace(code=["after"], only=["power", "coverage"], rounds=4, seconds=8.0)
    found = decisions.coverage([after, before, aa, earlier], args, kept)
    assert measured == [["defaults", describe_params(after["stated"]["params"])]]  # the after's only
    assert before["user"]["ratio"] == 0.9 and before["holds"] is False  # kept, and judged by it
    assert aa["user"]["ratio"] == 0.9  # the same configuration and defaults: the same user
    assert after["user"]["rounds"] == 4 and after["holds"] is True  # 1.30-1.33x: inside 1.25-1.36
    assert earlier["user"] is None and earlier["holds"] is None
    assert set(found["users"]) == {old_key, f"after | {describe_params(defaults)} | ckpt=off"}
