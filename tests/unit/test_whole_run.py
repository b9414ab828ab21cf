"""The whole-run check's pure parts: the verdict on a job's findings (`judged`), the trial it
fails (`with_whole_run`), the answer that falls to the next finalist and states the whole-run peak
and headroom (`decide`, `answer_lines`), and the longest samples the check draws."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from autotune import records
from autotune.answer import model
from autotune.answer.decide import decide
from autotune.driver.wholerun import judged
from autotune.errors import UsageError
from autotune.export.words import whole_run_text
from autotune.options import RunConfig
from autotune.records import WholeRun, WholeRunFindings, study_attrs
from autotune.store.outcomes import WHOLE_RUN_OVER_CAP, with_whole_run
from autotune.trial.whole_run_steps import check_args, largest_peaks, longest_indices
from tests.unit.test_answer import BASELINE_PARAMS, params, rounds, study, trial

MiB = 2**20
PEAKS = {"train": 500 * MiB, "eval": 700 * MiB, "save": 450 * MiB}


def found(**changes: Any) -> WholeRunFindings:
    """A whole-run job's findings (`AutotuneTrainer.whole_run_check`)."""
    base = {"step_peaks": dict(PEAKS), "train_samples": 8, "train_tokens": 128, "eval_samples": 8}
    return WholeRunFindings(**{**base, **changes})


# -- the verdict -----------------------------------------------------------------------------------


def test_a_step_over_the_cap_fails_the_check_at_that_step() -> None:
    check = judged(found(), 600 * MiB, 3, {"optim": "adamw_torch"})
    assert check.fits is False and check.failed_step == "eval"
    assert check.peak_bytes == 700 * MiB and check.headroom_bytes == -100 * MiB
    assert "its eval step peaked at 700 MiB, over the memory cap of 600 MiB" in (check.message or "")


def test_a_whole_run_under_the_cap_passes_with_its_headroom() -> None:
    check = judged(found(), 1024 * MiB, None, BASELINE_PARAMS)
    assert check.fits is True and check.failed_step is None and check.message is None
    assert check.headroom_bytes == 324 * MiB
    text = whole_run_text(check.to_dict())
    assert text.startswith(
        "peak 700 MiB (train 500 MiB on 8 samples of 128 tokens, eval 700 MiB on 8 samples"
    )
    assert text.endswith("324 MiB under the memory cap of 1.00 GiB")
    # without a cap the peak is still measured and stated (CPU, in practice)
    assert whole_run_text(judged(found(), None, 0, {}).to_dict()).endswith("no memory cap")


@pytest.mark.parametrize(("reason", "fits"), [("oom", False), ("killed", False), ("error", None)])
def test_a_step_that_failed_in_its_process(reason: str, fits: bool | None) -> None:
    peaks = {"train": 500 * MiB}
    check = judged(
        found(step_peaks=peaks, failed_step="eval", reason=reason, message="boom"), 2048 * MiB, 1, {}
    )
    assert check.fits is fits and check.failed_step == "eval" and check.reason == reason
    assert "its eval step" in (check.message or "") and "boom" in (check.message or "")


# -- the trial and the answer --------------------------------------------------------------------


def test_a_trial_that_fails_its_whole_run_is_infeasible_with_the_step() -> None:
    record = trial(3, params(attn_implementation="sdpa"), 1200.0)
    failed = with_whole_run(record, judged(found(), 600 * MiB, 3, record.params))
    assert failed.reason == WHOLE_RUN_OVER_CAP and failed.feasible is False
    assert failed.whole_run is not None and failed.whole_run.failed_step == "eval"
    assert "eval step" in (failed.message or "")
    passed = with_whole_run(record, judged(found(), 2048 * MiB, 3, record.params))
    assert passed.is_feasible and passed.reason is None and passed.whole_run is not None
    # a check that could not run (an error) is no memory verdict
    peaks = {"train": 500 * MiB, "eval": 550 * MiB}
    errored = judged(
        found(step_peaks=peaks, failed_step="save", reason="error", message="disk full"), 600 * MiB, 3, {}
    )
    assert with_whole_run(record, errored).is_feasible


def _checked(record: records.StudyRecord, *checks: WholeRun) -> records.StudyRecord:
    return replace(record, whole_run=checks)


def test_the_answer_falls_to_the_next_finalist_and_states_its_whole_run() -> None:
    cap = 1024 * MiB
    record = study([rounds(0, 1.3), rounds(1, 1.2)], memory_cap="1GiB")
    trials = [
        trial(0, params(attn_implementation="sdpa"), 1300.0),
        trial(1, params(optim="adamw_torch"), 1200.0),
    ]
    assert decide(record, trials).choice.trial == 0  # type: ignore[union-attr]
    first = judged(found(step_peaks={**PEAKS, "eval": 1100 * MiB}), cap, 0, trials[0].params)
    second = judged(found(), cap, 1, trials[1].params)
    checked = _checked(record, judged(found(), cap, None, BASELINE_PARAMS), first, second)
    read = [with_whole_run(t, checked.whole_run_of(t.number)) for t in trials]
    answer = decide(checked, read)
    assert answer.choice is not None and answer.choice.trial == 1
    assert answer.rule == model.BEATS_DEFAULTS
    assert answer.whole_run is not None and answer.whole_run.peak_bytes == 700 * MiB
    assert answer.whole_run.headroom_bytes == 324 * MiB
    assert answer.whole_run_note is not None and "trial 0 failed its whole-run check" in answer.whole_run_note
    assert "its eval step peaked at 1.07 GiB" in answer.whole_run_note
    # stored and read back with the answer
    assert model.Answer.from_dict(answer.to_dict()) == answer
    # a re-selection under a cap that holds trial 0's whole run hands it back again
    recapped = decide(checked, read, 1200 * MiB)
    assert recapped.choice is not None and recapped.choice.trial == 0
    assert recapped.whole_run is not None and recapped.whole_run.headroom_bytes == 100 * MiB


def test_defaults_that_fail_their_whole_run_are_not_handed_back() -> None:
    record = study([rounds(0, 1.005, [0.97, 1.03, 1.0])])
    trials = [trial(0, params(attn_implementation="sdpa"), 1005.0)]
    assert decide(record, trials).keeps_defaults
    defaults = judged(found(reason="oom", failed_step="save", message="CUDA out of memory"), None, None, {})
    answer = decide(_checked(record, defaults), trials)
    assert answer.choice is not None and answer.choice.trial == 0
    assert answer.whole_run_note is not None
    assert (
        "the defaults failed their whole-run check (its save step ran out of memory" in answer.whole_run_note
    )


def test_the_study_keeps_its_checks() -> None:
    check = judged(found(), 600 * MiB, 2, {"optim": "adamw_torch"})
    stored = records.study_record("s", study_attrs(whole_run=[check]))
    assert (
        stored.whole_run == (check,) and stored.whole_run_of(2) == check and stored.whole_run_of(None) is None
    )


def test_an_answer_without_a_check_says_why() -> None:
    record = study([rounds(0, 1.2)], run_config={"whole_run_check": False})
    answer = decide(record, [trial(0, params(attn_implementation="sdpa"), 1200.0)])
    assert answer.whole_run is None and answer.whole_run_note == "no whole-run check (--no-whole-run-check)"


# -- the trial process's part ------------------------------------------------------------------


def test_the_longest_samples_come_first() -> None:
    assert longest_indices([3, 9, 4, 9, 1], 3) == [1, 3, 2]
    assert longest_indices([3, 9], 5) == [1, 0, 1, 0, 1]  # read in a loop
    assert longest_indices(None, 3) == [0, 1, 2]  # all alike


def test_the_check_evaluates_and_saves_after_one_step() -> None:
    args = check_args({"per_device_train_batch_size": 4, "train_sampling_strategy": "group_by_length"}, None)
    assert args["max_steps"] == 1 and args["eval_strategy"] == "steps" and args["save_strategy"] == "steps"
    assert args["per_device_eval_batch_size"] == 4 and args["train_sampling_strategy"] == "sequential"
    assert check_args({}, 2)["per_device_eval_batch_size"] == 2


def test_each_steps_peak_is_the_largest_ranks() -> None:
    assert largest_peaks([{"train": 5, "eval": 2}, {"train": 3, "eval": 4, "save": 1}]) == {
        "train": 5,
        "eval": 4,
        "save": 1,
    }


def test_eval_batch_size_is_checked() -> None:
    with pytest.raises(UsageError, match="eval_batch_size must be at least 1"):
        RunConfig(eval_batch_size=0)
