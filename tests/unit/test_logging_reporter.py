"""The ``autotune`` logger: what `search()` and `tune()` tell it without a reporter (`LoggingReporter`)."""

from __future__ import annotations

import logging
from dataclasses import replace
from types import SimpleNamespace

import pytest

from autotune.progress import LoggingReporter, SearchHeader
from autotune.records import Failure, TrialRecord, measured_record


def test_each_event_is_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="autotune")
    reporter = LoggingReporter()
    reporter.on_search_start(SearchHeader(model="tiny-gpt2", budget=4, device={"name": "CPU"}))
    reporter.on_trial_start(0, {"per_device_train_batch_size": 8})
    done = replace(measured_record({"tokens_per_s": 24700.0, "peak_memory_bytes": 653 * 2**20}), number=0)
    reporter.on_trial_end(done)
    failed = TrialRecord(
        number=1, params={}, state="PRUNED", failure=Failure(reason="oom", message="no room")
    )
    reporter.on_trial_end(failed)
    reporter.on_remeasure(-1, 2, 21000.0, None)
    reporter.on_remeasure(0, 2, None, "RuntimeError: boom")
    reporter.on_step("measure", 3, 0.1)  # steps are not logged
    reporter.on_note("the search stopped early")
    reporter.on_search_end(SimpleNamespace(verdict="trial 0 beats the defaults: 1.20x"))
    assert [r.levelno for r in caplog.records] == [logging.INFO] * 8
    assert [r.getMessage() for r in caplog.records] == [
        "search: model tiny-gpt2, budget 4",
        "trial 0: bs=8",
        "trial 0: 24.7k tok/s, peak 653 MiB",
        "trial 1: pruned (oom): no room",
        "round 2: the baseline at 21.0k tok/s",
        "round 2: trial 0 failed: RuntimeError: boom",
        "the search stopped early",
        "answer: trial 0 beats the defaults: 1.20x",
    ]
    assert {r.name for r in caplog.records} == {"autotune"}


def test_the_search_header_keeps_the_keys_trackers_have_logged() -> None:
    keys = ["model", "task", "seq_len", "space", "space_notes", "not_searched", "storage", "study"]
    keys += ["budget", "finished", "to_run", "device", "memory_cap"]
    header = SearchHeader(model="tiny-gpt2", budget=4, to_run=0, memory_cap=None)
    assert list(header.to_dict()) == keys
    assert SearchHeader.from_dict(header.to_dict()) == header
    assert header.scalars() == {"model": "tiny-gpt2", "budget": 4, "to_run": 0}
