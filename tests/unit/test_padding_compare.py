"""Padding-free against the same configuration padded (`autotune.trial.padding`)."""

from __future__ import annotations

from autotune.trial.padding import padded_twin, why_not_faster

VALUES = {"per_device_train_batch_size": 8, "attn_implementation": "sdpa", "padding_free": True}


def test_the_twin_is_the_same_configuration_padded() -> None:
    padded = {**VALUES, "padding_free": False}
    candidates = [
        (0, {**padded, "per_device_train_batch_size": 4}, {"tokens_per_s": 9.0}),  # another batch
        (1, VALUES, {"tokens_per_s": 8.0}),  # padding-free itself
        (2, padded, {}),  # not measured
        (3, padded, {"tokens_per_s": 5.0, "padding_fraction": 0.4}),
    ]
    assert padded_twin(VALUES, candidates) == (3, candidates[3][2])
    assert padded_twin(VALUES, candidates[:3]) is None
    # The baseline names every knob, the trial only those searched: compared on the trial's.
    baseline = {**padded, "dataloader_num_workers": 0, "optim": "adamw_torch_fused"}
    assert padded_twin(VALUES, [(-1, baseline, {"tokens_per_s": 5.0})]) == (-1, {"tokens_per_s": 5.0})
    other = {**baseline, "attn_implementation": "eager"}
    assert padded_twin(VALUES, [(-1, other, {"tokens_per_s": 5.0})]) is None


def test_why_not_faster_names_the_padding_or_the_attention() -> None:
    little = why_not_faster(0.97, 0.05, "sdpa")
    assert little.startswith("padding-free ran at 0.97x the padded batches: they were only 5% padding")
    costly = why_not_faster(0.9, 0.4, "sdpa")
    assert "with sdpa attention the flattened row's attention is computed across all its texts" in costly
    assert "(40% of their tokens)" in costly
    assert "the model's default attention" in why_not_faster(0.9, None, None)
