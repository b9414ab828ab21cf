"""What an answer changes in the training math, and the shipped spaces that keep it."""

from __future__ import annotations

import pytest

from autotune.records import study_record
from autotune.space import load_space
from autotune.space.knobs import optimizer_family
from autotune.store.semantics import baseline_math, loss_compared, semantic_changes, study_changes

BASE = {
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "precision": "fp32",
    "optim": "adamw_torch",
}


def test_speed_only_differences_are_no_change():
    chosen = {"optim": "adamw_torch_fused", "attn_implementation": "eager", "torch_compile": "inductor"}
    assert semantic_changes(BASE, chosen) == []


def test_each_math_change_is_listed_with_a_hint():
    chosen = {
        "per_device_train_batch_size": 16,
        "gradient_accumulation_steps": 2,
        "precision": "bf16",
        "optim": "sgd",
    }
    changes = {c.what: c for c in semantic_changes(BASE, chosen)}
    assert set(changes) == {"precision", "optimizer", "effective batch per device"}
    assert changes["precision"].chosen == "bf16"
    assert changes["optimizer"].chosen == "sgd (sgd)" and "learning rate" in changes["optimizer"].hint
    batch = changes["effective batch per device"]
    assert batch.baseline.startswith("8 ") and batch.chosen.startswith("32 ") and "4.00x" in batch.chosen
    assert "scale the learning rate by 4.00x" in batch.hint and "2.00x by the square-root rule" in batch.hint


def test_same_effective_batch_in_another_split_is_no_change():
    assert semantic_changes(BASE, {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}) == []


def test_baseline_comes_from_the_measured_baseline_else_the_base_config():
    attrs = {"base_args": {"bf16": True, "per_device_train_batch_size": 4, "optim": "adafactor"}}
    assert baseline_math(study_record("s", attrs)) == {
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "precision": "bf16",
        "optim": "adafactor",
        "group_by_length": False,
    }
    attrs["baseline"] = {"params": {"per_device_train_batch_size": 2, "attn_implementation": "sdpa"}}
    assert baseline_math(study_record("s", attrs))["per_device_train_batch_size"] == 2


def test_derived_accumulation_is_read_from_the_applied_args():
    # Under a fixed global batch the accumulation is derived, not sampled: it is only in the args.
    changes = study_changes(
        study_record("s", {}),
        {"per_device_train_batch_size": 4},
        {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2},
    )
    assert changes == []
    changes = study_changes(
        study_record("s", {}), {"per_device_train_batch_size": 4}, {"gradient_accumulation_steps": 1}
    )
    assert [c.what for c in changes] == ["effective batch per device"]
    assert "0.50x" in changes[0].chosen


@pytest.mark.parametrize("name", ["quick", "cpu", "default"])
def test_shipped_spaces_keep_the_optimizer_family(name):
    optims = load_space(name).knobs["optim"]
    assert {optimizer_family(str(o)) for o in optims} == {"adamw"}
    assert set(optims) == {"adamw_torch", "adamw_torch_fused"}  # fused vs plain stays searchable


def test_the_optimizer_swap_is_an_opt_in_space():
    space = load_space("optimizers")
    assert {optimizer_family(str(o)) for o in space.knobs["optim"]} >= {"adamw", "sgd", "adafactor"}
    assert "opt-in" in space.description.lower()


def test_grouping_by_length_is_a_change_of_the_data_order():
    changes = semantic_changes({**BASE, "group_by_length": False}, {"group_by_length": True})
    assert [(c.what, c.baseline, c.chosen) for c in changes] == [
        ("data order", "as sampled", "grouped by length")
    ]
    assert semantic_changes({**BASE, "group_by_length": False}, {"group_by_length": False}) == []


def test_packing_is_a_change_of_the_rows_and_no_loss_comparison():
    changes = semantic_changes({**BASE, "packing": False}, {"packing": True})
    packed = [("packing", "one sample per row", "packed rows")]
    assert [(c.what, c.baseline, c.chosen) for c in changes] == packed
    assert not loss_compared(changes)
    assert semantic_changes(BASE, {"packing": False}) == []  # no SFTConfig: nothing packs
