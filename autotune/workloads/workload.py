"""Workloads: the model to train (a built-in preset, a local directory or a hub id) and its data.

Presets are built from a config with random weights: throughput does not depend on weight values,
and nothing is downloaded. Data is synthetic random tokens at the sequence length, as the
Transformers performance guides measure; every token is a real (non-padding) token.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from autotune.errors import WorkloadError

Task = Literal["causal-lm", "sequence-classification"]


@dataclass(frozen=True)
class Preset:
    """A built-in model: an architecture, a task, a config and a default sequence length."""

    model_type: str
    task: Task
    config: dict[str, Any]
    seq_len: int
    summary: str


PRESETS: dict[str, Preset] = {
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
        "GPT-2 architecture, 2 layers, width 64 (tests and CPU demos)",
    ),
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
        "Llama architecture (RoPE, SwiGLU, GQA), 2 layers, width 64",
    ),
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
        "BERT encoder with a 2-class head, 2 layers, width 64",
    ),
    "gpt2-124m": Preset(
        "gpt2",
        "causal-lm",
        {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "vocab_size": 50257},
        1024,
        "GPT-2 small (124M parameters), for GPUs",
    ),
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
        "Llama architecture at 1.1B parameters (the TinyLlama-1.1B shape), for GPUs",
    ),
}


@dataclass
class Workload:
    """A resolved model and its data source.

    Attributes:
        name: what the user passed to ``--model``.
        task: what the model is trained for.
        config: the model's `PretrainedConfig`.
        seq_len: tokens per sample.
        from_pretrained: load real weights from `name` (local directory or hub id) instead of
            building the model from `config` with random weights.
    """

    name: str
    task: Task
    config: Any
    seq_len: int
    from_pretrained: bool = False

    def _auto_class(self) -> Any:
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

        return AutoModelForCausalLM if self.task == "causal-lm" else AutoModelForSequenceClassification

    def model_class(self) -> type:
        """The model class the workload builds (its support flags drive availability rules)."""
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_CAUSAL_LM_MAPPING,
            MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING,
        )

        mapping = (
            MODEL_FOR_CAUSAL_LM_MAPPING
            if self.task == "causal-lm"
            else MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING
        )
        try:
            model_class: Any = mapping[type(self.config)]
            return model_class
        except KeyError:
            raise WorkloadError(
                f"{self.name}: no {self.task} model class for config type {type(self.config).__name__}"
            ) from None

    def build_model(self, model_kwargs: dict[str, Any]) -> torch.nn.Module:
        """A fresh model for one trial, built with the trial's model-load kwargs."""
        auto = self._auto_class()
        if self.from_pretrained:
            model = auto.from_pretrained(self.name, **model_kwargs)
        else:
            model = auto.from_config(self.config, **model_kwargs)
        # Cached generation state only costs memory in training.
        if hasattr(model.config, "use_cache"):
            model.config.use_cache = False
        return model

    def dataset(self, seed: int) -> SyntheticTokens:
        num_labels = int(getattr(self.config, "num_labels", 2))
        return SyntheticTokens(self.seq_len, int(self.config.vocab_size), self.task, num_labels, seed)

    def config_hash(self) -> str:
        """A hash of the model config: the workload part of a study's identity."""
        text = json.dumps(self.config.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "model_type": self.config.model_type,
            "task": self.task,
            "seq_len": self.seq_len,
            "config_hash": self.config_hash(),
            "from_pretrained": self.from_pretrained,
        }


def resolve_workload(model: str, seq_len: int | None = None) -> Workload:
    """Resolve ``--model``: a preset name, then a local directory, then a hub id.

    Raises:
        WorkloadError: nothing of that name, or a sequence length the model cannot take.
    """
    from transformers import AutoConfig

    if model in PRESETS:
        preset = PRESETS[model]
        config = AutoConfig.for_model(preset.model_type, **preset.config)
        workload = Workload(model, preset.task, config, seq_len or preset.seq_len)
    else:
        try:
            config = AutoConfig.from_pretrained(model)
        except (OSError, ValueError) as exc:
            where = "a local directory" if Path(model).exists() else "a preset, a local directory or a hub id"
            raise WorkloadError(
                f"cannot load model {model!r} as {where}: {str(exc).splitlines()[0]}",
                f"use a preset ({', '.join(PRESETS)}), a directory with config.json, or a hub id "
                "with network access",
            ) from None
        task = _task_of(config)
        workload = Workload(model, task, config, seq_len or 512, from_pretrained=True)
    _check_seq_len(workload)
    return workload


def _task_of(config: Any) -> Task:
    architectures = getattr(config, "architectures", None) or []
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return "sequence-classification"
    return "causal-lm"


def _check_seq_len(workload: Workload) -> None:
    limit = getattr(workload.config, "max_position_embeddings", None) or getattr(
        workload.config, "n_positions", None
    )
    if limit is not None and workload.seq_len > limit:
        raise WorkloadError(
            f"--seq-len {workload.seq_len} is longer than {workload.name}'s {limit} positions",
            f"use --seq-len {limit} or less",
        )


class SyntheticTokens(torch.utils.data.Dataset):
    """Random token sequences, generated on demand from (seed, index): no memory held per sample.

    Causal LM samples carry ``labels = input_ids``; classification samples a random label.
    """

    # Long enough that no trial reaches the end of an epoch (which would restart the data loader
    # inside the measured window), small enough that any sampler over it is cheap to build.
    length = 1 << 20

    def __init__(self, seq_len: int, vocab_size: int, task: Task, num_labels: int, seed: int) -> None:
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.task = task
        self.num_labels = num_labels
        self.seed = seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        input_ids = torch.randint(0, self.vocab_size, (self.seq_len,), generator=generator)
        sample = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if self.task == "causal-lm":
            sample["labels"] = input_ids.clone()
        else:
            sample["labels"] = torch.randint(0, self.num_labels, (), generator=generator)
        return sample

    def tokens_per_sample(self) -> int:
        """Real tokens in every sample (synthetic samples have no padding)."""
        return self.seq_len
