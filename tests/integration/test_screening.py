"""Screening in a real search: a configuration slowed down by a test hook stops after its minimum
warm-up (``screened_out``, its figures recorded, its time accounted as screening) instead of taking
a full window; it counts as a tried configuration and is never a finalist or the winner."""

from __future__ import annotations

from pathlib import Path

import pytest

import autotune
from autotune.config import MeasureSettings
from tests.helpers import IN_PROCESS, SlowParams, write_space

pytestmark = pytest.mark.timeout(300)

# A window the slow configuration would spend many steps in: at least 6 measured steps.
WINDOW = MeasureSettings(warmup_steps=2, max_warmup_steps=3, min_steps=6, max_steps=8, max_seconds=30.0)


@pytest.mark.parametrize("ratio", [0.5, 0.0], ids=["screening", "no screening"])
def test_a_slowed_configuration_is_not_promoted_to_a_full_window(tmp_path: Path, ratio: float) -> None:
    space = write_space(tmp_path, {"per_device_train_batch_size": [4, 8]})
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=2,
        storage=f"sqlite:///{tmp_path / 'screen.db'}",
        seq_len=16,
        **{**IN_PROCESS, "measure": MeasureSettings(**{**WINDOW.__dict__, "screen_ratio": ratio})},
        callbacks=[SlowParams({"per_device_train_batch_size": 4}, seconds=0.5)],
        enqueue=[{"per_device_train_batch_size": 8}, {"per_device_train_batch_size": 4}],
    )
    by_batch = {t.params["per_device_train_batch_size"]: t for t in result.trials}
    fast, slow = by_batch[8], by_batch[4]
    assert fast.state == "COMPLETE" and fast.attrs["measured_steps"] >= WINDOW.min_steps
    if ratio == 0:  # the control: without screening the slow one takes its full window
        assert slow.state == "COMPLETE" and slow.attrs["measured_steps"] >= WINDOW.min_steps
        return
    assert slow.state == "PRUNED" and slow.reason == "screened_out"
    assert (slow.message or "").startswith(f"screened out after {WINDOW.warmup_steps} steps: its fastest")
    assert "measured_steps" not in slow.attrs and slow.attrs["screen_steps"] == WINDOW.warmup_steps
    assert slow.attrs["screen_reference_tokens_per_s"] == pytest.approx(fast.attrs["tokens_per_s"])
    assert slow.attrs["screen_tokens_per_s"] < 0.5 * fast.attrs["tokens_per_s"]
    assert slow.attrs["trained"] is True  # a tried configuration: it spent the budget
    assert result.best is not None and result.best.number == fast.number
    breakdown = result.study.user_attrs["time_breakdown"]["phases"]
    # The enqueued trials are this search's: both accounted, the slow one's steps as screening.
    assert result.study.user_attrs["time_breakdown"]["jobs"] == 2
    assert breakdown["screening_s"] == pytest.approx(slow.attrs["screen_s"], rel=1e-6)
    assert breakdown["setup_s"] == pytest.approx(fast.attrs["setup_s"] + slow.attrs["setup_s"], rel=1e-6)
