"""The memory estimate benchmark (benchmarks/memory_estimate.py): both estimates of a trial against
its peak, and its RESULTS.md section."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import memory_estimate
import results_md

MACHINE = {"date": "2026-11-25 10:00 UTC", "cpu": "Test CPU", "cores": 2, "commit": "abc1234"}
MACHINE |= {"python": "3.11", "torch": "2.13.0+cpu", "transformers": "5.24.0", "optuna": "5.0.0"}


def _row(error: float, probe_error: float, from_trials: list[int]) -> dict[str, Any]:
    return {"error": error, "probe_error": probe_error, "from_trials": from_trials}


def test_the_summary_compares_both_estimates_on_the_trials_estimated_from_peaks() -> None:
    rows = [_row(0.30, 0.30, []), _row(-0.05, 0.40, [0]), _row(0.10, -0.50, [0, 1])]
    summary = memory_estimate.summary(rows)
    assert summary["trials"] == 3 and summary["from_peaks"] == 2
    assert summary["from_peaks_error"] == pytest.approx({"mean_abs": 0.075, "worst_abs": 0.10})
    assert summary["from_peaks_probe_error"] == pytest.approx({"mean_abs": 0.45, "worst_abs": 0.50})
    assert summary["all_used_error"] == pytest.approx({"mean_abs": 0.15, "worst_abs": 0.30})
    assert summary["all_probe_error"] == pytest.approx({"mean_abs": 0.40, "worst_abs": 0.50})
    assert memory_estimate.summary([_row(0.2, 0.2, [])])["from_peaks_error"] is None


def test_the_section_shows_both_errors_and_claims_only_what_was_measured() -> None:
    rows = [_row(0.30, 0.30, []), _row(-0.05, 0.40, [0]), _row(0.10, -0.50, [0, 1])]
    runs = [
        {"preset": "tiny-gpt2", "summary": memory_estimate.summary(rows)},
        {"preset": "tiny-llama", "summary": memory_estimate.summary([_row(0.2, 0.2, [])])},
    ]
    data = {"machine": MACHINE, "trials": 12, "seq_len": 128, "runs": runs}
    claims: list[str] = []
    text = results_md._memory_estimate(data, claims)
    assert "| tiny-gpt2 | 3 | 2 | 8% (10%) | 45% (50%) | 15% (30%) | 40% (50%) |" in text
    assert "| tiny-llama | 1 | 0 | - | - | 20% (20%) | 20% (20%) |" in text
    assert len(claims) == 1 and "within 8% of its peak" in claims[0] and "45% (worst 50%)" in claims[0]
    assert results_md._memory_estimate(None, claims) == ""
