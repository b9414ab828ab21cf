"""The whole-run check: before the answer is final, what it may hand back runs once as a whole run.

A trial's window trains with evaluation and saving off, on the batches it happened to draw. A whole
run also meets the data's longest batch, evaluates and saves checkpoints: batch finders that never
look at those hand back batches that run out of memory in the real run. So after the finalists'
rounds, and before the answer is decided and stored, each configuration it may hand back runs in a
job of its own (a fresh worker under the cap, as a trial; `autotune.trial.whole_run_steps`): one optimizer
step on the longest batch, one evaluation step (``--eval-batch-size``, default the train batch), one
checkpoint save. Each step's peak is measured as a trial's is, and judged against the cap here
(`judged`).

- The defaults (the baseline's configuration) are checked once per study: defaults that fail are
  no answer to fall back on, as defaults over the cap are not (`autotune.answer.decide`).
- Then the answer as the records decide it now (`autotune.answer.decide.decide`): a trial not
  checked yet is checked; one that fails for memory (a step over the cap, out of memory, or its
  process killed) is infeasible from then on, reason ``whole_run_over_cap`` with the failed step
  (`autotune.store.outcomes.with_whole_run`), and the answer is decided again: the next finalist,
  checked in turn, at most `MAX_TRIAL_CHECKS` of them. A check that could not run for another
  reason (an error) is stated with the answer and decides nothing.

Every executor runs the job as it runs a measurement: forkserver workers, a torchrun group (every
rank runs the steps; each step's peak is the largest rank's), Ray (in local workers, as the
baseline), and a search under the user's launcher (every rank runs this loop; rank 0 decides).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from autotune.answer.decide import decide
from autotune.export.words import whole_run_text
from autotune.measure.ranks import distributed, from_rank_zero, is_rank_zero
from autotune.plan.resolved import Plan
from autotune.progress import Reporter, format_bytes
from autotune.records import BASELINE, WHOLE_RUN_STEPS, WholeRun, WholeRunFindings, add_whole_run, read_study
from autotune.store.outcomes import ERROR, KILLED, OOM
from autotune.store.session import StudyStore
from autotune.store.trials import read_trials

Check = Callable[..., WholeRunFindings]  # (params, number, verbatim=...) -> the job's findings

# Trials checked in one search at most: a failure that every configuration shares (an evaluation
# batch too large for any) must not check the whole study.
MAX_TRIAL_CHECKS = 4
# How a step that failed in its process fails the check for memory (else: it could not run).
MEMORY_REASONS = (OOM, KILLED)


def check_whole_run(check: Check, plan: Plan, study: StudyStore, reporter: Reporter) -> None:
    """Check the defaults (once per study), then the answer the records decide, until it passes,
    is the defaults, or `MAX_TRIAL_CHECKS` trials were checked (see the module docstring)."""
    if not plan.config.whole_run_check:
        return
    record = read_study(study) if is_rank_zero() else None
    defaults = from_rank_zero(
        dict(record.baseline.params)
        if record is not None and record.baseline.measured and record.whole_run_of(None) is None
        else None
    )
    if defaults is not None:
        _run(check, plan, study, reporter, None, defaults)
    for _ in range(MAX_TRIAL_CHECKS):
        target = from_rank_zero(_unchecked_answer(study) if is_rank_zero() else None)
        if target is None:
            return
        _run(check, plan, study, reporter, *target)


def _unchecked_answer(study: StudyStore) -> tuple[int, dict[str, Any]] | None:
    """The trial the records answer with now, when it has no whole-run check yet."""
    record = read_study(study)
    choice = decide(record, read_trials(study)).choice
    if choice is None or choice.trial is None or record.whole_run_of(choice.trial) is not None:
        return None
    return choice.trial, dict(choice.params)


def _run(
    check: Check,
    plan: Plan,
    study: StudyStore,
    reporter: Reporter,
    trial: int | None,
    params: dict[str, Any],
) -> None:
    label = "the defaults" if trial is None else f"trial {trial}"
    reporter.on_note(f"whole-run check of {label}: the longest batch, an evaluation step, a checkpoint save")
    started = time.monotonic()
    try:
        found = check(params, BASELINE if trial is None else trial, verbatim=trial is None)
    except Exception as exc:  # its process died, or could not start: a fact to state, not fatal
        if distributed():
            raise  # unless one rank alone failed and the others wait for it: end the group
        found = WholeRunFindings(
            failed_step="unknown", reason=getattr(exc, "reason", ERROR), message=str(exc)
        )
    result = judged(found, plan.cap_bytes, trial, params, time.monotonic() - started)
    if is_rank_zero():
        add_whole_run(study, result)
        reporter.on_note(f"whole-run check of {label}: {whole_run_text(result.to_dict())}")


def judged(
    found: WholeRunFindings,
    cap_bytes: int | None,
    trial: int | None,
    params: Mapping[str, Any],
    seconds: float | None = None,
) -> WholeRun:
    """The verdict on a whole-run job's findings (`AutotuneTrainer.whole_run_check`, or what its
    process's end said: ``failed_step``, ``reason``, ``message``) under `cap_bytes`: it fits when
    every step ran under the cap; a step over the cap, out of memory or killed fails it for memory
    (the first such step in run order); another failure leaves no verdict."""
    peaks = {step: int(peak) for step, peak in found.step_peaks.items() if peak is not None}
    failed, reason, message = found.failed_step, found.reason, found.message
    over = [step for step in WHOLE_RUN_STEPS if cap_bytes is not None and peaks.get(step, 0) > cap_bytes]
    fits: bool | None = True
    if over:
        fits, failed = False, over[0]
        message = (
            f"its {failed} step peaked at {format_bytes(peaks[failed])}, over the memory cap of "
            f"{format_bytes(cap_bytes)}"
        )
    elif reason in MEMORY_REASONS:
        fits = False
        message = f"its {failed} step ran out of memory ({reason}): {message}"
    elif reason is not None:
        fits = None
        message = f"its {failed} step failed ({reason}): {message}"
    return WholeRun(
        trial=trial,
        params=dict(params),
        step_peaks=peaks,
        fits=fits,
        failed_step=failed if fits is not True else None,
        reason=reason,
        message=message if fits is not True else None,
        cap_bytes=cap_bytes,
        train_samples=found.train_samples,
        train_tokens=found.train_tokens,
        eval_samples=found.eval_samples,
        memory_source=found.memory_source,
        seconds=seconds,
    )
