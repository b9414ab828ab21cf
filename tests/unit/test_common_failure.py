"""The one failure a whole search ended with (`autotune.answer.failure.common_failure`)."""

from __future__ import annotations

from dataclasses import replace

from autotune.answer.failure import common_failure
from autotune.records import Failure, TrialRecord, measured_record
from autotune.store.outcomes import ERROR, OOM, UNAVAILABLE

MESSAGE = "AttributeError: 'TrainingArguments' object has no attribute 'loss_type'"


def _failed(number: int, reason: str = ERROR, message: str = MESSAGE, trained: bool = True) -> TrialRecord:
    return TrialRecord(
        number=number,
        params={},
        state="PRUNED",
        trained=trained,
        failure=Failure(reason=reason, message=message),
    )


def test_every_trial_failing_with_one_error_is_that_error() -> None:
    assert common_failure([_failed(0), _failed(1), _failed(2)]) == (ERROR, MESSAGE, 3)


def test_trials_a_precheck_stopped_did_not_run() -> None:
    skipped = _failed(3, UNAVAILABLE, "fp8 needs a CUDA GPU", trained=False)
    assert common_failure([_failed(0), skipped, _failed(1)]) == (ERROR, MESSAGE, 2)
    assert common_failure([skipped]) is None  # nothing ran


def test_a_measured_trial_or_a_second_failure_is_no_common_failure() -> None:
    measured = replace(measured_record({"tokens_per_s": 1000.0}), number=1, state="COMPLETE", trained=True)
    assert common_failure([_failed(0), measured]) is None
    assert common_failure([_failed(0), _failed(1, message="RuntimeError: something else")]) is None


def test_running_out_of_memory_everywhere_is_a_result_not_a_broken_search() -> None:
    assert (
        common_failure([_failed(0, OOM, "CUDA out of memory"), _failed(1, OOM, "CUDA out of memory")]) is None
    )


def test_no_trial_is_no_failure() -> None:
    assert common_failure([]) is None
