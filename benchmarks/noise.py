"""How far one measurement can be trusted (item 4).

- Repeats: a few configurations measured 10 times each, interleaved (A B C A B C ...), with the
  search's adaptive window and with a fixed 5-step window: coefficient of variation of tokens/s
  and of peak memory.
- Repeated searches: the same search run 10 times from scratch over a small space that every
  search measures completely, so only measurement noise can change its answer; how often each
  configuration wins, with the finalists' interleaved re-measurement and by the single window each
  trial got (what a search without re-measurement would have answered).
"""

from __future__ import annotations

import statistics
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from autotune.config import MeasureSettings, RunConfig
from autotune.driver.search import search
from autotune.progress import describe_params
from autotune.study.store import ranked_trials
from benchmarks.grid import SPACE
from benchmarks.harness import Bench
from benchmarks.report import fill, k, measured_on, pct, seconds, table

HERE = Path(__file__).resolve().parent

STABILITY_SPACE = str(HERE / "stability.yaml")
FIXED_WINDOW = MeasureSettings(min_steps=5, max_steps=5)


def cv(values: list[float]) -> float | None:
    """Coefficient of variation (sample standard deviation over mean)."""
    if len(values) < 2:
        return None
    return statistics.stdev(values) / statistics.fmean(values)


def repeats(model: str, configs: dict[str, dict[str, Any]], rounds: int) -> dict[str, Any]:
    """Measure each configuration `rounds` times, interleaved, with the adaptive and a fixed window."""
    out: dict[str, Any] = {}
    for window, settings in (("adaptive", MeasureSettings()), ("fixed_5_steps", FIXED_WINDOW)):
        with Bench(model, SPACE, measure=settings) as bench:
            tokens: dict[str, list[float]] = {name: [] for name in configs}
            peaks: dict[str, list[float]] = {name: [] for name in configs}
            growth: dict[str, list[float]] = {name: [] for name in configs}
            steps: dict[str, list[float]] = {name: [] for name in configs}
            for _ in range(rounds):
                for name, params in configs.items():
                    measured = bench.measure(params, verbatim=True)
                    if measured.tokens_per_s is None:
                        continue
                    tokens[name].append(measured.tokens_per_s)
                    steps[name].append(measured.window_s)
                    if measured.peak_memory_bytes:
                        peaks[name].append(measured.peak_memory_bytes)
                        if measured.rss_start_bytes:
                            growth[name].append(measured.peak_memory_bytes - measured.rss_start_bytes)
            out[window] = {
                name: {
                    "params": configs[name],
                    "n": len(tokens[name]),
                    "median_tokens_per_s": statistics.median(tokens[name]) if tokens[name] else None,
                    "cv_tokens_per_s": cv(tokens[name]),
                    "cv_peak_memory": cv(peaks[name]),
                    "cv_trial_memory_growth": cv(growth[name]),
                    "mean_window_s": statistics.fmean(steps[name]) if steps[name] else None,
                }
                for name in configs
            }
    return out


def repeated_searches(
    model: str, searches: int, finalist_rounds: int = 3, storage_dir: str | None = None
) -> dict[str, Any]:
    """Run the same complete search `searches` times (with `finalist_rounds` re-measurement rounds,
    the search's default unless given); count the winners."""
    winners: Counter[str] = Counter()
    single_window: Counter[str] = Counter()
    medians: dict[str, list[float]] = {}
    for index in range(searches):
        with tempfile.TemporaryDirectory(prefix="autotune-bench-", dir=storage_dir) as scratch:
            config = RunConfig(
                model=model,
                space=STABILITY_SPACE,
                trials=_space_size(),
                seed=index,
                storage=f"sqlite:///{scratch}/stability.db",
                measure_baseline=False,
                finalist_rounds=finalist_rounds,
            )
            result = search(config)
            if result.best is None:
                continue
            winners[describe_params(result.best.params)] += 1
            first = ranked_trials(result.study)[0]  # the best single window
            single_window[describe_params(first.params)] += 1
            for finalist in result.study.user_attrs.get("finalists", []):
                if finalist["number"] < 0:  # the baseline
                    continue
                trial = result.study.trials[finalist["number"]]
                medians.setdefault(describe_params(trial.params), []).append(finalist["median"])
    ranked = sorted(medians, key=lambda k: -statistics.median(medians[k]))
    gap = None
    if len(ranked) >= 2:
        gap = 1 - statistics.median(medians[ranked[1]]) / statistics.median(medians[ranked[0]])
    return {
        "searches": searches,
        "finalist_rounds": finalist_rounds,
        "winners": dict(winners.most_common()),
        "single_window_winners": dict(single_window.most_common()),
        "top": ranked[0] if ranked else None,
        "runner_up": ranked[1] if len(ranked) > 1 else None,
        "runner_up_slower_by": gap,
        "same_winner": winners.most_common(1)[0][1] if winners else 0,
        "same_single_window_winner": single_window.most_common(1)[0][1] if single_window else 0,
    }


def _space_size() -> int:
    from autotune.space import load_space

    return load_space(STABILITY_SPACE).grid_size()


def render(data: dict[str, Any]) -> str:
    headers = [
        "window",
        "configuration",
        "n",
        "median tok/s",
        "CV tok/s",
        "CV peak",
        "CV growth",
        "mean window",
    ]
    rows = [
        [
            window,
            name,
            row["n"],
            k(row["median_tokens_per_s"]),
            pct(row["cv_tokens_per_s"]),
            pct(row["cv_peak_memory"]),
            pct(row["cv_trial_memory_growth"]),
            seconds(row["mean_window_s"]),
        ]
        for window, configs in data["repeats"].items()
        for name, row in configs.items()
    ]
    s = data["searches"]
    return (
        fill(
            "noise",
            "section",
            measured_on=measured_on(data),
            table=table(headers, rows),
            searches=s["searches"],
            rounds=s.get("finalist_rounds", 3),
            winners=", ".join(f"`{k}` {v}x" for k, v in s["winners"].items()),
            single=", ".join(f"`{k}` {v}x" for k, v in s["single_window_winners"].items()),
            gap=pct(s["runner_up_slower_by"]),
        )
        + "\n"
    )


def claims(data: dict[str, Any]) -> list[str]:
    s = data["searches"]
    adaptive, fixed = data["repeats"]["adaptive"], data["repeats"]["fixed_5_steps"]
    mean_adaptive = sum((r["cv_tokens_per_s"] or 0.0) for r in adaptive.values()) / len(adaptive)
    mean_fixed = sum((r["cv_tokens_per_s"] or 0.0) for r in fixed.values()) / len(fixed)
    stability = fill(
        "noise",
        "stability",
        same=s["same_winner"],
        searches=s["searches"],
        same_single=s["same_single_window_winner"],
        gap=pct(s["runner_up_slower_by"]),
        target="." if s["same_winner"] >= 0.9 * s["searches"] else fill("noise", "below_target"),
    )
    spread = fill(
        "noise",
        "noise",
        worst=pct(max((r["cv_tokens_per_s"] or 0.0) for r in adaptive.values())),
        adaptive=pct(mean_adaptive),
        fixed=pct(mean_fixed),
        verdict=fill("noise", "not_narrower" if mean_adaptive >= mean_fixed else "narrower"),
    )
    return [stability, spread]
