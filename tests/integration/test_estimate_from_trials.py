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
        held = trial.attrs["peak_memory_bytes"] - (trial.attrs.get("peak_children_bytes") or 0)
        return held - parts["baseline_bytes"] - parts["static_bytes"]

    # Batch 16 from batch 4's peak alone: proportional to it.
    estimate = second.attrs["memory_estimate"]
    assert estimate["activations_from_trials"] == [first.number]
    assert estimate["activation_bytes"] == max(0, round(measured_activations(first) * 16 / 4))
    assert estimate["probe_activation_bytes"] > 0
    # Batch 8 between the two: linear between their peaks.
    low, high = measured_activations(first), measured_activations(second)
    estimate = third.attrs["memory_estimate"]
    assert estimate["activations_from_trials"] == [first.number, second.number]
    assert estimate["activation_bytes"] == max(0, round(low + (high - low) * (8 - 4) / (16 - 4)))
    assert third.attrs["memory_estimate_bytes"] == estimate["total_bytes"]
