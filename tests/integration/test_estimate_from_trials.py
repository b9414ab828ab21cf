"""A real search's later trial is estimated from an earlier trial's measured peak (each trial in its
own worker: what one worker measured reaches the next through the study)."""

from __future__ import annotations

from pathlib import Path

import autotune
from autotune.progress import TrialSummary
from tests.helpers import FAST_RUN, write_space


def test_a_later_trial_of_a_measured_kind_is_estimated_from_its_peak(tmp_path: Path) -> None:
    space = write_space(
        tmp_path, {"per_device_train_batch_size": [4, 8, 16], "attn_implementation": ["sdpa"]}
    )
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=3,
        storage=f"sqlite:///{tmp_path / 'peaks.db'}",
        seq_len=64,
        enqueue=[{"per_device_train_batch_size": b, "attn_implementation": "sdpa"} for b in (4, 16, 8)],
        **FAST_RUN,
    )
    first, second, third = sorted(result.trials, key=lambda t: t.number)
    assert "activations_from_trials" not in first.attrs["memory_estimate"]  # nothing trained yet: the probe's

    def measured_activations(trial: TrialSummary) -> int:
        parts = trial.attrs["memory_estimate"]
        return trial.attrs["peak_memory_bytes"] - parts["baseline_bytes"] - parts["static_bytes"]

    # Batch 16 from batch 4's peak alone: it, and the probe's bytes for 12 samples more (the probe's
    # figure at batch 16, stored beside, is 16 samples' worth; 2 bytes for its rounding).
    estimate = second.attrs["memory_estimate"]
    assert estimate["activations_from_trials"] == [first.number]
    per_sample = estimate["probe_activation_bytes"] / 16
    assert per_sample > 0
    expected = max(0, round(measured_activations(first) + 12 * per_sample))
    assert abs(estimate["activation_bytes"] - expected) <= 2, (estimate, expected)
    # Batch 8 between the two: linear between their peaks.
    low, high = measured_activations(first), measured_activations(second)
    estimate = third.attrs["memory_estimate"]
    assert estimate["activations_from_trials"] == [first.number, second.number]
    assert estimate["activation_bytes"] == max(0, round(low + (high - low) * (8 - 4) / (16 - 4)))
    assert third.attrs["memory_estimate_bytes"] == estimate["total_bytes"]
