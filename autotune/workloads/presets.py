"""The built-in models: small configs for tests and CPU demos, and GPU-sized ones, built from scratch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.workloads.tasks import Task


@dataclass(frozen=True)
class Preset:
    """A built-in model: an architecture, a task, a config and a default sequence length."""

    model_type: str
    task: Task
    config: dict[str, Any]
    seq_len: int


PRESETS: dict[str, Preset] = {
    # GPT-2 architecture, 2 layers, width 64 (tests and CPU demos).
    "tiny-gpt2": Preset(
        "gpt2",
        "causal-lm",
        {
            "n_layer": 2,
            "n_head": 2,
            "n_embd": 64,
            "n_positions": 1024,
            "vocab_size": 2048,
            "bos_token_id": 0,
            "eos_token_id": 0,
        },
        128,
    ),
    # Llama architecture (RoPE, SwiGLU, GQA), 2 layers, width 64.
    "tiny-llama": Preset(
        "llama",
        "causal-lm",
        {
            "hidden_size": 64,
            "intermediate_size": 176,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 2048,
            "max_position_embeddings": 1024,
        },
        128,
    ),
    # BERT encoder with a 2-class head, 2 layers, width 64.
    "tiny-bert": Preset(
        "bert",
        "sequence-classification",
        {
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 128,
            "vocab_size": 2048,
            "max_position_embeddings": 512,
            "num_labels": 2,
        },
        128,
    ),
    # GPT-2 small (124M parameters), for GPUs.
    "gpt2-124m": Preset(
        "gpt2",
        "causal-lm",
        {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "vocab_size": 50257},
        1024,
    ),
    # Llama architecture at 1.1B parameters (the TinyLlama-1.1B shape), for GPUs.
    "llama-1b": Preset(
        "llama",
        "causal-lm",
        {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 22,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "vocab_size": 32000,
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-5,
        },
        2048,
    ),
}


def preset_config(preset: Preset) -> Any:
    """The preset's `PretrainedConfig`."""
    from transformers import AutoConfig

    return AutoConfig.for_model(preset.model_type, **preset.config)
