"""The search's time breakdown: per-job phases, the remainder between trials, the measured share."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest

from autotune.answer.instrument import finalists_time
from autotune.driver.accounting import PHASES, TimeAccount, breakdown, job_phases
from autotune.export.words import finalists_time_text
from autotune.progress import PHASE_NAMES, describe_time_breakdown
from autotune.records import measured_record
from autotune.store.session import StudyStore


def test_compile_is_counted_out_of_the_warm_up() -> None:
    phases = job_phases(measured_record({"setup_s": 2.0, "warmup_s": 5.0, "compile_s": 4.0, "window_s": 3.0}))
    assert phases == {"setup_s": 2.0, "compile_s": 4.0, "warmup_s": 1.0, "window_s": 3.0, "screening_s": 0.0}


def test_a_screened_out_trial_counts_its_steps_as_screening() -> None:
    phases = job_phases(measured_record({"setup_s": 1.5, "screen_s": 2.5, "screen_steps": 3}))
    assert phases == {"setup_s": 1.5, "compile_s": 0.0, "warmup_s": 0.0, "window_s": 0.0, "screening_s": 2.5}


def test_compile_never_exceeds_the_warm_up_and_missing_values_count_zero() -> None:
    assert job_phases(measured_record({"warmup_s": 1.0, "compile_s": 3.0, "setup_s": None})) == {
        "setup_s": 0.0,
        "compile_s": 1.0,
        "warmup_s": 0.0,
        "window_s": 0.0,
        "screening_s": 0.0,
    }


def test_phases_sum_to_the_slots_wall_time() -> None:
    jobs = [
        job_phases(measured_record({"setup_s": 1.0, "warmup_s": 2.0, "compile_s": 0.5, "window_s": 3.0}))
    ] * 2
    result = breakdown(10.0, 2, jobs, {"search_s": 9.0})
    assert set(result["phases"]) == set(PHASES)
    assert math.fsum(result["phases"].values()) == pytest.approx(20.0)
    assert result["phases"]["between_s"] == pytest.approx(8.0)
    assert result["measured_share"] == pytest.approx(6.0 / 20.0)
    assert result["stages"] == {"baseline_s": 0.0, "search_s": 9.0, "finalists_s": 0.0, "whole_run_s": 0.0}


def test_between_trials_is_never_negative() -> None:
    result = breakdown(1.0, 1, [job_phases(measured_record({"window_s": 1.0000001}))], {})
    assert result["phases"]["between_s"] == 0.0


def test_the_breakdown_in_one_line_names_every_phase_and_stage() -> None:
    jobs = [
        job_phases(measured_record({"setup_s": 1.0, "warmup_s": 2.0, "compile_s": 0.5, "window_s": 3.0}))
    ] * 2
    line = describe_time_breakdown(breakdown(10.0, 2, jobs, {"search_s": 9.0}))
    assert line is not None
    assert line.startswith("search time: 10.0 s x 2 slots, 30% of it measured (")
    for name in PHASE_NAMES.values():
        assert name in line
    assert "measured windows 6.0 s" in line and "between trials 8.0 s" in line
    assert "; stages: baseline 0.0 s, search 9.0 s, finalists 0.0 s" in line
    assert describe_time_breakdown(None) is None and describe_time_breakdown({}) is None


def test_the_measure_jobs_of_each_stage_are_summed_apart(tmp_path: Path) -> None:
    # The baseline's job and two finalists' jobs, told apart by the stage they ran in; the
    # answer states the finalists' part, and every export says it in one line.
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    account = TimeAccount(StudyStore(study), 1)
    job = {"tokens_per_s": 1.0, "setup_s": 1.0, "warmup_s": 2.0, "compile_s": 0.5, "window_s": 3.0}
    measure = account.measuring(lambda *args, **kwargs: measured_record(dict(job)))
    with account.stage("baseline"):
        measure({}, -1)
    with account.stage("finalists"):
        measure({}, 0, window={"measure_steps": 10})
        measure({}, -1)
    measure({}, 5)  # outside any stage: counted in the phases, in no stage
    stored = account.store(StudyStore(study))
    assert stored["by_stage"]["baseline"]["measurements"] == 1
    finalists = stored["by_stage"]["finalists"]
    assert finalists == {
        "measurements": 2,
        "setup_s": 2.0,
        "compile_s": 1.0,
        "warmup_s": 3.0,
        "window_s": 6.0,
    }
    assert len(account.jobs) == 4
    spent = finalists_time({**stored, "wall_s": 40.0, "stages": {"finalists_s": 10.0}})
    assert spent is not None and spent["share"] == pytest.approx(0.25) and spent["measurements"] == 2
    line = finalists_time_text(spent)
    assert line == (
        "finalists: 10.0 s, 25% of the search's 40.0 s: 2 measurements "
        "(set-up 2.0 s, compile 1.0 s, warm-up 3.0 s, windows 6.0 s)"
    )
    assert finalists_time({**stored, "stages": {"finalists_s": 0.0}}) is None and finalists_time(None) is None
