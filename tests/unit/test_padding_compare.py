"""Padding-free against the same configuration padded (`autotune.trial.padding`)."""

from __future__ import annotations

from autotune.records import trial_record
from autotune.trial.padding import padded_twin, why_not_faster

VALUES = {"per_device_train_batch_size": 8, "attn_implementation": "sdpa", "padding_free": True}


def test_the_twin_is_the_same_configuration_padded() -> None:
    padded = {**VALUES, "padding_free": False}
    candidates = [
        trial_record(0, {**padded, "per_device_train_batch_size": 4}, "COMPLETE", {"tokens_per_s": 9.0}),
        trial_record(1, VALUES, "COMPLETE", {"tokens_per_s": 8.0}),  # padding-free itself
        trial_record(2, padded, "COMPLETE", {}),  # not measured
        trial_record(3, padded, "COMPLETE", {"tokens_per_s": 5.0, "padding_fraction": 0.4}),
    ]
    assert padded_twin(VALUES, candidates) == candidates[3]
    assert padded_twin(VALUES, candidates[:3]) is None
    # The baseline names every knob, the trial only those searched: compared on the trial's.
    baseline = trial_record(
        -1,
        {**padded, "dataloader_num_workers": 0, "optim": "adamw_torch_fused"},
        "COMPLETE",
        {"tokens_per_s": 5.0},
    )
    assert padded_twin(VALUES, [baseline]) == baseline
    other = trial_record(
        -1, {**baseline.params, "attn_implementation": "eager"}, "COMPLETE", {"tokens_per_s": 5.0}
    )
    assert padded_twin(VALUES, [other]) is None


def test_why_not_faster_names_the_padding_or_the_attention() -> None:
    little = why_not_faster(0.97, 0.05, "sdpa")
    assert little.startswith("padding-free ran at 0.97x the padded batches: they were only 5% padding")
    costly = why_not_faster(0.9, 0.4, "sdpa")
    assert "with sdpa attention the flattened row's attention is computed across all its texts" in costly
    assert "(40% of their tokens)" in costly
    assert "the model's default attention" in why_not_faster(0.9, None, None)
