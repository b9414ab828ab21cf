"""The search's header says when the model's weights are stored in half precision: every trial then
trains half-precision weights, and the precision knob's fp32 means no autocast."""

from __future__ import annotations

import pytest
from transformers import LlamaConfig

import autotune
from autotune.driver.study import header
from autotune.plan.build import plan_for
from autotune.workloads.workload import Workload

SHAPE = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4}


def _notes(dtype: str | None) -> list[str]:
    config = LlamaConfig(**SHAPE, vocab_size=128, dtype=dtype)
    plan = plan_for(
        autotune.RunConfig(model="mine", seq_len=16), Workload("mine", "causal-lm", config, 16), {}, False
    )
    return [note for note in header(plan, 0, 1).space_notes if note.startswith("weights:")]


@pytest.mark.parametrize(("dtype", "name"), [("bfloat16", "bf16"), ("float16", "fp16")])
def test_half_precision_weights_are_named_with_what_they_mean(dtype: str, name: str) -> None:
    assert _notes(dtype) == [
        f"weights: {name}, the model config's dtype (transformers builds and loads them in it): every "
        f"trial trains {name} weights, gradients and optimizer states; precision fp32 means no "
        "autocast, not fp32 weights"
    ]


@pytest.mark.parametrize("dtype", [None, "float32"])
def test_fp32_weights_need_no_note(dtype: str | None) -> None:
    assert _notes(dtype) == []
