"""The verdict on a measured trial (`autotune.trial.judge`): a pure function of its record, the
memory cap, the baseline's record and the loss tolerance."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest

from autotune.records import Baseline, TrialRecord, measured_record
from autotune.store.outcomes import LOSS_DIVERGED, OVER_MEMORY_CAP
from autotune.trial.judge import Verdict, judge, non_finite_loss

MiB = 2**20
CAP = 1000 * MiB
TOLERANCE = 0.05


def _curve(losses: list[float], step_tokens: int = 100) -> list[list[float]]:
    return [[step_tokens * (i + 1), loss] for i, loss in enumerate(losses)]


BASELINE = Baseline(tokens_per_s=900.0, loss_curve=_curve([10.0] * 10)).as_trial()


def measured(
    peak_bytes: int | None = 500 * MiB, losses: list[float] | None = None, **attrs: Any
) -> TrialRecord:
    curve = _curve(losses if losses is not None else [10.0] * 10)
    return measured_record(
        {"tokens_per_s": 1000.0, "peak_memory_bytes": peak_bytes, "loss_curve": curve, **attrs}
    )


def test_a_trial_under_the_cap_with_the_baselines_loss_completes() -> None:
    verdict = judge(measured(), CAP, BASELINE, TOLERANCE)
    assert verdict == Verdict(loss_delta=0.0)
    assert (
        verdict.complete and verdict.state == "COMPLETE" and verdict.reason is None and verdict.message == ""
    )


def test_a_peak_over_the_cap_is_pruned_and_says_both_figures() -> None:
    verdict = judge(measured(peak_bytes=1500 * MiB), CAP, BASELINE, TOLERANCE)
    assert verdict.reason == OVER_MEMORY_CAP and verdict.state == "PRUNED" and not verdict.complete
    assert verdict.message == "peak memory 1500 MiB is over the cap of 1000 MiB"
    assert verdict.loss_delta is None  # not compared: the cap decides first


def test_the_cap_is_checked_before_the_loss() -> None:
    both = measured(peak_bytes=2 * CAP, losses=[10.0] * 5 + [20.0] * 5)
    assert judge(both, CAP, BASELINE, TOLERANCE).reason == OVER_MEMORY_CAP


@pytest.mark.parametrize(
    ("peak_bytes", "cap_bytes", "complete"),
    [
        (CAP, CAP, True),  # at the cap is under it
        (CAP + 1, CAP, False),  # one byte over is over
        (CAP - 1, CAP, True),
        (10 * CAP, None, True),  # no cap: nothing is over it
        (None, CAP, True),  # no peak measured: no verdict on memory
    ],
)
def test_the_cap_boundary(peak_bytes: int | None, cap_bytes: int | None, complete: bool) -> None:
    assert judge(measured(peak_bytes=peak_bytes), cap_bytes, BASELINE, TOLERANCE).complete is complete


def test_a_loss_worse_than_the_baselines_past_the_tolerance_diverged() -> None:
    # 10% worse over the second half of the shared tokens
    worse = measured(losses=[10.0] * 5 + [11.0] * 5)
    verdict = judge(worse, CAP, BASELINE, TOLERANCE)
    assert verdict.reason == LOSS_DIVERGED and verdict.state == "PRUNED"
    assert verdict.loss_delta == pytest.approx(0.1)
    assert verdict.message == (
        "the loss is 10.0% worse than the baseline's at equal tokens "
        "(95% interval 10.0% to 10.0% over 5 paired steps; tolerance 5%)"
    )
    # Within a wider tolerance it completes, its delta kept.
    within = judge(worse, CAP, BASELINE, 0.2)
    assert within.complete and within.loss_delta == pytest.approx(0.1)


def test_the_tolerance_boundary() -> None:
    at = measured(losses=[10.0] * 5 + [10.5] * 5)  # exactly 5% worse
    assert judge(at, CAP, BASELINE, 0.05).complete  # at the tolerance is within it
    assert judge(at, CAP, BASELINE, 0.0499).reason == LOSS_DIVERGED
    better = measured(losses=[10.0] * 5 + [5.0] * 5)  # a lower loss never diverges
    verdict = judge(better, CAP, BASELINE, TOLERANCE)
    assert verdict.complete and verdict.loss_delta == pytest.approx(-0.5)


def test_a_non_finite_loss_where_the_baselines_is_finite_diverged_without_a_delta() -> None:
    verdict = judge(measured(losses=[10.0] * 9 + [math.nan]), CAP, BASELINE, TOLERANCE)
    assert verdict.reason == LOSS_DIVERGED
    assert verdict.message == "the loss is not finite where the baseline's is"
    assert verdict.loss_delta is None  # inf is not stored


def test_without_a_baseline_curve_the_loss_is_not_judged() -> None:
    worse = measured(losses=[10.0] * 5 + [50.0] * 5)
    assert judge(worse, CAP, None, TOLERANCE) == Verdict()
    assert judge(worse, CAP, Baseline().as_trial(), TOLERANCE) == Verdict()
    assert judge(measured_record({}), CAP, BASELINE, TOLERANCE) == Verdict()  # nothing measured
    # A baseline whose loss is not finite gives no verdict either.
    broken = Baseline(loss_curve=_curve([math.nan] * 10)).as_trial()
    assert judge(worse, CAP, broken, TOLERANCE).complete


def test_a_non_finite_training_loss_on_any_rank_says_which() -> None:
    assert non_finite_loss([2.5, 2.4]) is None
    assert non_finite_loss([]) is None
    assert non_finite_loss([2.5, math.nan]) == "training loss became nan"
    assert non_finite_loss([math.inf, math.nan]) == "training loss became inf"  # the first one
    assert non_finite_loss(iter([-math.inf])) == "training loss became -inf"


def test_the_judge_imports_no_torch_and_no_optuna() -> None:
    code = "import sys, autotune.trial.judge; print(sorted({'torch', 'optuna'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
