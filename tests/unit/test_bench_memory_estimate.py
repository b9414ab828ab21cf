"""The memory estimate benchmark (benchmarks/memory_estimate.py): both estimates of a trial against
its peak, and its RESULTS.md section."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import memory_estimate
from tests.unit.bench_helpers import section

MACHINE = {"date": "2026-11-25 10:00 UTC", "cpu": "Test CPU", "cores": 2, "commit": "abc1234"}
MACHINE |= {"python": "3.11", "torch": "2.13.0+cpu", "transformers": "5.24.0", "optuna": "5.0.0"}


def _row(
    error: float, probe_error: float, from_trials: list[int], compile: str = "off", children: int = 0
) -> dict[str, Any]:
    params = {"torch_compile": compile}
    return {"error": error, "probe_error": probe_error, "from_trials": from_trials, "params": params} | {
        "children_bytes": children
    }


def test_the_summary_compares_both_estimates_on_the_trials_estimated_from_peaks() -> None:
    rows = [_row(0.30, 0.30, []), _row(-0.05, 0.40, [0]), _row(0.10, -0.50, [0, 1])]
    summary = memory_estimate.summary(rows)
    assert summary["trials"] == 3 and summary["from_peaks"] == 2
    assert summary["from_peaks_error"] == pytest.approx({"mean_abs": 0.075, "worst_abs": 0.10})
    assert summary["from_peaks_probe_error"] == pytest.approx({"mean_abs": 0.45, "worst_abs": 0.50})
    assert summary["all_used_error"] == pytest.approx({"mean_abs": 0.15, "worst_abs": 0.30})
    assert summary["all_probe_error"] == pytest.approx({"mean_abs": 0.40, "worst_abs": 0.50})
    assert memory_estimate.summary([_row(0.2, 0.2, [])])["from_peaks_error"] is None


def test_eager_and_compiled_trials_apart_with_signed_errors_and_every_trials_workers() -> None:
    rows = [
        _row(-0.3, -0.3, [], "inductor", children=400 * 2**20),  # its workers count too
        _row(0.4, -0.3, [0], "inductor", children=60 * 2**20),
        _row(-0.1, -0.35, [0, 1], "inductor", children=100 * 2**20),
        _row(0.02, -0.1, [3]),
    ]
    summary = memory_estimate.summary(rows)
    groups = summary["by_compile"]
    assert groups["compiled"]["trials"] == 2
    assert groups["compiled"]["error"] == pytest.approx({"mean_abs": 0.25, "low": -0.1, "high": 0.4})
    assert groups["compiled"]["probe_error"] == pytest.approx({"mean_abs": 0.325, "low": -0.35, "high": -0.3})
    assert groups["compiled"]["children_bytes"] == [60 * 2**20, 400 * 2**20]
    assert groups["eager"]["trials"] == 1 and groups["eager"]["children_bytes"] == [0, 0]
    data = {"machine": MACHINE, "trials": 4, "seq_len": 128}
    text = section(memory_estimate, data | {"runs": [{"preset": "p", "summary": summary}]}, [])
    row = "| p | compiled | 2 | 25% (-10% to +40%) | 32% (-35% to -30%) | 60-400 MiB |"
    assert row in text, text


def test_the_section_shows_both_errors_and_claims_only_what_was_measured() -> None:
    rows = [_row(0.30, 0.30, []), _row(-0.05, 0.40, [0]), _row(0.10, -0.50, [0, 1])]
    runs = [
        {"preset": "tiny-gpt2", "summary": memory_estimate.summary(rows)},
        {"preset": "tiny-llama", "summary": memory_estimate.summary([_row(0.2, 0.2, [])])},
    ]
    data = {"machine": MACHINE, "trials": 12, "seq_len": 128, "runs": runs}
    claims: list[str] = []
    text = section(memory_estimate, data, claims)
    assert "| tiny-gpt2 | 3 | 2 | 8% (10%) | 45% (50%) | 15% (30%) | 40% (50%) |" in text
    assert "| tiny-llama | 1 | 0 | - | - | 20% (20%) | 20% (20%) |" in text
    assert len(claims) == 1 and "8% off its peak" in claims[0] and "45% (worst 50%)" in claims[0]
