"""Screening in a real search: a configuration slowed down by a test hook stops in its second step
(at the step's deadline, before finishing it), before its minimum warm-up is done (``screened_out``,
its figures recorded, its time accounted as screening) instead of taking a full window; it counts
as a tried configuration and is never a finalist or the winner. One slowed less, clearly behind the
best but over the screening line, is measured and ends its window at the promotion line."""

from __future__ import annotations

from pathlib import Path

import pytest

import autotune
from autotune.measure import drift
from autotune.options import MeasureSettings
from tests.helpers import IN_PROCESS, SlowParams, write_space

pytestmark = pytest.mark.timeout(300)

# A window the slow configuration would spend many steps in: at least 6 measured steps.
WINDOW = MeasureSettings(
    settle_steps=3, max_settle_steps=4, min_measure_steps=6, measure_steps=8, max_seconds=30.0
)


@pytest.mark.parametrize("ratio", [0.5, 0.0], ids=["screening", "no screening"])
def test_a_slowed_configuration_is_not_promoted_to_a_full_window(
    tmp_path: Path, ratio: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The machine probe reads a steady machine (the trials run in this process): the verdict is the
    # test's sleeps', not the machine's speed at the moment.
    monkeypatch.setattr(drift, "probe_s", lambda device="cpu": 0.015)
    space = write_space(tmp_path, {"per_device_train_batch_size": [4, 8]})
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=2,
        storage=f"sqlite:///{tmp_path / 'screen.db'}",
        seq_len=16,
        **{**IN_PROCESS, "measure": MeasureSettings(**{**WINDOW.__dict__, "screen_ratio": ratio})},
        callbacks=[SlowParams({"per_device_train_batch_size": 4}, seconds=1.0)],
        enqueue=[{"per_device_train_batch_size": 8}, {"per_device_train_batch_size": 4}],
    )
    by_batch = {t.params["per_device_train_batch_size"]: t for t in result.trials}
    fast, slow = by_batch[8], by_batch[4]
    assert fast.state == "COMPLETE" and fast.attrs["measured_steps"] >= WINDOW.min_measure_steps
    if ratio == 0:  # the control: without screening the slow one takes its full window
        assert slow.state == "COMPLETE" and slow.attrs["measured_steps"] >= WINDOW.min_measure_steps
        return
    assert slow.state == "PRUNED" and slow.reason == "screened_out"
    # An eager trial: one steady step after the first decides, before the warm-up's 3.
    # Its first step was already slower than a step at the line, so its second was judged at the
    # line's duration (the deadline) instead of finished: each step sleeps 1 s (far more than a
    # step's own work, on a loaded machine too), so a finished second step would make the two take
    # over 2 s.
    assert (slow.message or "").startswith("screened out in step 2, stopped after")
    assert "measured_steps" not in slow.attrs and slow.attrs["screen_steps"] == 2
    assert slow.attrs["screen_step_stopped_s"] < 1.0 and slow.attrs["screen_s"] < 2.0
    assert slow.attrs["screen_reference_tokens_per_s"] == pytest.approx(fast.attrs["tokens_per_s"])
    assert slow.attrs["screen_tokens_per_s"] < 0.5 * fast.attrs["tokens_per_s"]
    assert slow.attrs["trained"] is True  # a tried configuration: it spent the budget
    assert result.best is not None and result.best.number == fast.number
    breakdown = result.study.user_attrs["time_breakdown"]["phases"]
    # The enqueued trials are this search's: both accounted, the slow one's steps as screening.
    assert result.study.user_attrs["time_breakdown"]["jobs"] == 2
    assert breakdown["screening_s"] == pytest.approx(slow.attrs["screen_s"], rel=1e-6)
    assert breakdown["setup_s"] == pytest.approx(fast.attrs["setup_s"] + slow.attrs["setup_s"], rel=1e-6)


@pytest.mark.parametrize("line", [0.9, 0.0], ids=["promotion line", "no promotion line"])
def test_a_configuration_clearly_behind_does_not_earn_a_full_window(tmp_path: Path, line: float) -> None:
    # Steps dominated by sleeps, so the ratio holds on a loaded machine: the slow configuration runs
    # at 0.4-0.55x the fast one's speed, over the screening line (0.3) and far under the
    # promotion line (0.9). The windows would run to max_steps (their target is out of reach).
    window = MeasureSettings(
        **{**WINDOW.__dict__, "target_rel_ci": 1e-6, "screen_ratio": 0.3, "promote_ratio": line}
    )
    space = write_space(tmp_path, {"optim": ["adamw_torch", "adamw_torch_fused"]})
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=2,
        storage=f"sqlite:///{tmp_path / 'promote.db'}",
        seq_len=16,
        **{**IN_PROCESS, "measure": window},
        callbacks=[
            SlowParams({"optim": "adamw_torch_fused"}, seconds=0.2),
            SlowParams({"optim": "adamw_torch"}, seconds=0.5),
        ],
        enqueue=[{"optim": "adamw_torch_fused"}, {"optim": "adamw_torch"}],
    )
    by_optim = {t.params["optim"]: t for t in result.trials}
    fast, slow = by_optim["adamw_torch_fused"], by_optim["adamw_torch"]
    assert fast.state == "COMPLETE" and fast.attrs["measured_steps"] == window.measure_steps
    assert slow.state == "COMPLETE" and slow.reason is None  # measured: its figure stands
    assert slow.attrs["tokens_per_s"] < 0.7 * fast.attrs["tokens_per_s"]
    assert result.best is not None and result.best.number == fast.number
    if line == 0:  # the control: without the line the slow one takes its whole window
        assert slow.attrs["measured_steps"] == window.measure_steps and "not_promoted" not in slow.attrs
        return
    assert slow.attrs["measured_steps"] == window.min_measure_steps < window.measure_steps
    behind = slow.attrs["not_promoted"]
    assert behind["reference_tokens_per_s"] == pytest.approx(fast.attrs["tokens_per_s"])
    assert behind["upper_tokens_per_s"] < 0.9 * fast.attrs["tokens_per_s"]
    assert behind["promote_ratio"] == 0.9 and behind["steps"] == window.min_measure_steps
