"""The search-cost breakdown of the benchmarks (benchmarks/harness.py `PhaseClock`)."""

from __future__ import annotations

import pytest

from autotune.progress import SearchHeader
from autotune.records import trial_record
from benchmarks import harness


def test_phases_add_up_to_the_search_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(harness.time, "perf_counter", lambda: now[0])

    def at(t: float) -> None:
        now[0] = t

    clock = harness.PhaseClock()  # t = 0
    at(1.0)
    clock.on_search_start(SearchHeader())
    clock.on_note("measuring the baseline: bs=8")
    at(4.0)
    clock.on_note("baseline: 20.0k tok/s, peak 500 MiB")
    # A trained trial: 10 s, of which 2 s warm-up (1.5 s above steady state) and 5 s window.
    at(4.5)
    clock.on_trial_start(0, {})
    at(14.5)
    attrs = {"tokens_per_s": 1.0, "warmup_s": 2.0, "warmup_excess_s": 1.5, "window_s": 5.0}
    clock.on_trial_end(trial_record(0, {}, "COMPLETE", attrs))
    # A skipped trial: 0.5 s.
    at(15.0)
    clock.on_trial_start(1, {})
    at(15.5)
    clock.on_trial_end(trial_record(1, {}, "PRUNED", {"reason": "duplicate", "trained": False}))
    at(16.0)
    clock.on_note("re-measuring trials 0, the baseline in 3 interleaved rounds")
    at(26.0)
    clock.on_search_end(None)

    cost = clock.breakdown()
    assert cost["total_s"] == 26.0
    assert cost["baseline_s"] == 3.0
    assert cost["trials_window_s"] == 5.0
    assert cost["trials_compile_s"] == 1.5
    assert cost["trials_warmup_s"] == 0.5
    assert cost["trials_setup_s"] == 3.0
    assert cost["skipped_trials_s"] == 0.5
    assert cost["finalists_s"] == 10.0
    assert cost["trained_trials"] == 1 and cost["skipped_trials"] == 1
    parts = ("baseline_s", "trials_window_s", "trials_warmup_s", "trials_compile_s", "trials_setup_s")
    rest = ("skipped_trials_s", "finalists_s", "between_trials_s")
    assert sum(cost[p] for p in parts + rest) == pytest.approx(cost["total_s"])
