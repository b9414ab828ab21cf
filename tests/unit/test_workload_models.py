"""The models a worker builds besides its trial's: the placeholder a Trainer holds until the trial
builds its own (no storage, so no second full build), and the memory probe's model (the trial's
shape, tied embeddings tied)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from autotune.workloads.user import UserWorkload
from autotune.workloads.workload import Workload


def _tied() -> Qwen2Config:
    return Qwen2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=500,
        tie_word_embeddings=True,
    )


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_the_placeholder_is_the_trial_models_class_and_shape_without_storage() -> None:
    workload = Workload("folder", "causal-lm", _tied(), 16)
    real = workload.build_model({})
    placeholder = workload.build_placeholder({"attn_implementation": "eager"})
    assert placeholder is not None
    assert type(placeholder) is type(real) and _count(placeholder) == _count(real)
    assert all(p.is_meta for p in placeholder.parameters())
    assert placeholder.config._attn_implementation == "eager"


def test_a_users_own_model_gets_no_placeholder() -> None:
    model = AutoModelForCausalLM.from_config(_tied())
    workload = UserWorkload("mine", "causal-lm", model.config, 16, model=model)
    assert workload.build_placeholder({}) is None


def test_the_probe_model_ties_what_the_trial_model_ties() -> None:
    workload = Workload("folder", "causal-lm", _tied(), 16)
    real, probe = workload.build_model({}), workload.build_probe_model({})
    assert _count(probe) == _count(real)  # untied it held a second 500 x 32 embedding, and its gradient
    assert probe.get_output_embeddings().weight is probe.get_input_embeddings().weight
    assert all(not p.is_meta and not p.any() for p in probe.parameters())  # zero-filled, memory touched
