"""The in-process vs isolated benchmark's statistics and its RESULTS.md section (benchmarks/isolation.py)."""

from __future__ import annotations

import cProfile
import pstats
from typing import Any

import pytest

from benchmarks import isolation
from benchmarks.report import summary as summarize
from tests.unit.bench_helpers import section


def test_summarize_gives_median_and_spread() -> None:
    assert summarize([3.0, 1.0, 2.0, 10.0]) == {"n": 4, "median": 2.5, "min": 1.0, "max": 10.0}
    assert summarize([]) == {"n": 0, "median": None, "min": None, "max": None}


def test_phase_durations_between_stamps_and_only_where_both_exist() -> None:
    stamps = {
        "asked": 10.0,
        "started": 10.25,
        "plan_start": 10.5,
        "plan_end": 11.0,
        "trainer_start": 11.0,
        "trainer_end": 11.5,
        "returned": 20.0,
        "reaped": 20.5,
    }
    phases = isolation.phase_durations(stamps)
    assert phases == {"start": 0.25, "prepare": 0.25, "plan": 0.5, "trainer": 0.5, "exit": 0.5}


def test_overhead_is_relative_to_in_process() -> None:
    assert isolation.overhead(115.0, 100.0) == pytest.approx(0.15)
    assert isolation.overhead(90.0, 100.0) == pytest.approx(-0.10)


def _busy(n: int) -> int:
    return sum(i * i for i in range(n))


def test_top_functions_ranks_by_cumulative_time() -> None:
    profiler = cProfile.Profile()
    profiler.runcall(lambda: [_busy(20_000) for _ in range(20)])
    top = isolation.top_functions(pstats.Stats(profiler), count=50, min_share=0.0)
    names = [row["function"] for row in top]
    assert any(name.endswith("(_busy)") for name in names)
    cumulative = [row["cumulative_s"] for row in top]
    assert cumulative == sorted(cumulative, reverse=True)
    busy = next(row for row in top if row["function"].endswith("(_busy)"))
    assert busy["calls"] == 20


def _data(process: list[float], none: list[float]) -> dict[str, Any]:
    walls = {"process": process, "none": none}
    summary = summarize
    in_run = {"tokens_per_s": 1000.0, "setup_s": 0.5, "warmup_s": 1.0, "window_s": 3.0}
    iso_run = {"tokens_per_s": 1000.0, "warmup_s": 2.0, "window_s": 3.0, "phases": {"measure": 5.75}}
    cell = {
        "tokens_per_s": summary([1000.0, 1200.0]),
        "peak": summary([2**29, 2**29 + 2**20]),
        "growth": summary([2**28]),
    }
    phases = {name: summary([0.1]) for name, _, _ in isolation.PHASES} | {"wall": summary([5.0])}
    return {
        "machine": {
            "date": "2026-01-01 00:00 UTC",
            "cpu": "cpu",
            "cores": 2,
            "gpu": None,
            "python": "3.11",
            "torch": "2",
            "transformers": "5",
            "optuna": "5",
            "commit": "abc",
        },
        "space": "quick",
        "paired": {
            "tiny-gpt2": {
                "seq_len": 256,
                "configs": {"defaults": {"in": cell, "iso": cell, "raw": {"in": [in_run], "iso": [iso_run]}}},
            }
        },
        "drift": {
            "tiny-gpt2": {
                "params": {"per_device_train_batch_size": 16},
                "in_first_peak": 2**29,
                "in_later_peak": 2**30,
                "in_later_position": 12,
                "iso_peaks": [2**29, 2**29],
            }
        },
        "forkserver": [{"first_worker_running_s": 3.0, "children_s": [3.0, 0.01, 0.02]}],
        "worker_phases": phases,
        "profile": {
            "phases": {"wall": 5.0, "measure": 4.0},
            "top": [{"function": "a.py:1(f)", "calls": 1, "cumulative_s": 4.0}],
        },
        "make_run": {
            "command": "autotune search --model tiny-gpt2",
            "runs": len(process),
            "walls_s": walls,
            "process": summary(process),
            "none": summary(none),
            "overhead": isolation.overhead(summary(process)["median"], summary(none)["median"]),
        },
    }


def test_section_says_whether_the_budget_is_met() -> None:
    claims: list[str] = []
    met = section(isolation, _data([110.0, 112.0, 150.0], [100.0, 100.0, 101.0]), claims)
    assert "+12.0%" in met and "is **met**" in met
    assert any("the 15% budget is met" in claim for claim in claims)
    missed = section(isolation, _data([130.0, 131.0, 132.0], [100.0, 100.0, 100.0]), [])
    assert "+31.0%" in missed and "**NOT met**" in missed


def test_section_shows_peaks_with_spread_and_the_drift_case() -> None:
    text = section(isolation, _data([1.0], [1.0]), [])
    assert (
        "| tiny-gpt2 | 256 | defaults | isolated | 2 | 1.1k (1.0k-1.2k) | 512 MiB (512 MiB-513 MiB) | "
        "256 MiB (256 MiB-256 MiB) |" in text
    )
    assert "| 512 MiB | 1024 MiB (measurement 12) | 512 MiB, 512 MiB |" in text
    assert "15 ms (10 ms-20 ms)" in text  # later workers' start, the first (the server's) left out


def test_set_up_inside_the_measurement_is_the_measurement_minus_warm_up_and_window() -> None:
    text = section(isolation, _data([1.0], [1.0]), [])
    assert "took 0.50 s (0.50 s-0.50 s) in-process and 0.75 s (0.75 s-0.75 s) in a worker" in text
    assert "*warm-up* 1.00 s (1.00 s-1.00 s) and 2.00 s (2.00 s-2.00 s)" in text


def test_a_run_cut_short_renders_what_it_measured() -> None:
    data = _data([110.0], [100.0])
    partial = {key: data[key] for key in ("machine", "space", "forkserver", "make_run")}
    text = section(isolation, partial, [])
    assert "`make run`: wall time" in text and "is **met**" in text
    assert "Drift" not in text and "Same configurations" not in text


def test_estimate_costs_are_shown_cold_and_warm() -> None:
    data = _data([1.0], [1.0])
    data["estimate"] = {
        "cold": summarize([2.0, 2.5, 3.0]),
        "same_kind": summarize([0.01]),
        "new_kind": summarize([0.5]),
    }
    text = section(isolation, data, [])
    assert "the first estimate 2.50 s (2.00 s-3.00 s), the same kind again 0.01 s" in text


def test_paired_claim_gives_the_ratio_and_peak_difference() -> None:
    claims: list[str] = []
    data = _data([1.0], [1.0])
    data["paired"]["tiny-gpt2"]["configs"]["defaults"]["iso"] = {
        "tokens_per_s": summarize([900.0]),
        "peak": summarize([2**29 - 100 * 2**20]),
        "growth": summarize([2**28 + 2**20]),
    }
    data["paired"]["tiny-gpt2"]["configs"]["defaults"]["in"] = {
        "tokens_per_s": summarize([1000.0]),
        "peak": summarize([2**29]),
        "growth": summarize([2**28]),
    }
    section(isolation, data, claims)
    assert "tiny-gpt2 defaults 0.90x tok/s, peak -100 MiB" in claims[0]
    assert "growth over its starting RSS is larger" in claims[0]


def test_overlapping_make_run_ranges_are_called_unsettled() -> None:
    overlapping = section(isolation, _data([20.0, 70.0, 110.0], [37.0, 41.0, 53.0]), [])
    assert "Fastest run of each (the least disturbed): -45.9%." in overlapping
    assert "cannot settle the budget" in overlapping
    apart = section(isolation, _data([60.0, 61.0, 62.0], [40.0, 41.0, 42.0]), [])
    assert "cannot settle" not in apart and "**NOT met**" in apart
