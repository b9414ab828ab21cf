"""Workloads: the model to train (a built-in preset, a local directory or a hub id) and its data.

Every model is built from its config with random weights unless ``--pretrained`` asks for the real
ones: throughput and memory do not depend on weight values, so a folder holding only a
``config.json`` is enough and nothing is read or downloaded per trial. Data is the user's dataset
(`autotune.workloads.data`) or synthetic random tokens at the sequence length, as the Transformers
performance guides measure; every synthetic token is a real (non-padding) token.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from autotune.errors import WorkloadError
from autotune.workloads.data import Cycled, DataSource, PreparedData, prepare
from autotune.workloads.hub import is_local, quiet_loading, require_hub

Task = Literal["causal-lm", "masked-lm", "sequence-classification"]
TASKS: dict[str, Task] = {
    "causal-lm": "causal-lm",
    "masked-lm": "masked-lm",
    "seq-classification": "sequence-classification",
    "sequence-classification": "sequence-classification",
}


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
            building the model from `config` with random weights (``--pretrained``).
        trust_remote_code: let the config and model run code from the model's repository.
        data: the user's tokenized dataset; None: synthetic tokens.
    """

    name: str
    task: Task
    config: Any
    seq_len: int
    from_pretrained: bool = False
    trust_remote_code: bool = False
    data: PreparedData | None = None

    def _auto_class(self) -> Any:
        import transformers

        return getattr(transformers, _AUTO_CLASS[self.task])

    def model_class(self) -> type:
        """The model class the workload builds (its support flags drive availability rules)."""
        from transformers.models.auto import modeling_auto

        mapping = getattr(modeling_auto, _MAPPING[self.task])
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
        remote = {"trust_remote_code": True} if self.trust_remote_code else {}
        with quiet_loading():
            if self.from_pretrained:
                model = auto.from_pretrained(self.name, config=self.config, **remote, **model_kwargs)
            else:
                model = auto.from_config(self.config, **remote, **model_kwargs)
        # Cached generation state only costs memory in training.
        if hasattr(model.config, "use_cache"):
            model.config.use_cache = False
        return model

    def dataset(self, seed: int) -> torch.utils.data.Dataset:
        """The training samples: the user's data read in a loop, or synthetic tokens."""
        if self.data is not None:
            return Cycled(self.data.dataset)
        num_labels = int(getattr(self.config, "num_labels", 2))
        return SyntheticTokens(self.seq_len, int(self.config.vocab_size), self.task, num_labels, seed)

    def collator(self) -> Any:
        """The data collator of the task (padding, masking) or, for packed data, plain stacking."""
        from transformers import default_data_collator

        return self.data.collator if self.data is not None else default_data_collator

    def tokens_in(self, first: int, count: int) -> int:
        """Real (non-padding) tokens in samples ``first .. first + count - 1`` of `dataset`."""
        if self.data is not None:
            return self.data.tokens_in(first, count)
        return count * self.seq_len

    def dataset_identity(self) -> str:
        """What the samples are, for the study's fingerprint."""
        return self.data.identity if self.data is not None else "synthetic"

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
            "dataset": self.dataset_identity(),
            "dataset_samples": len(self.data) if self.data is not None else None,
        }


def resolve_workload(
    model: str,
    seq_len: int | None = None,
    *,
    task: str | None = None,
    pretrained: bool = False,
    trust_remote_code: bool = False,
    data: DataSource | None = None,
    tokenizer: str | None = None,
    pad_to_multiple_of: int | None = None,
) -> Workload:
    """Resolve ``--model`` (a preset name, then a local directory, then a hub id) and its data.

    Args:
        model: a preset, a local folder with a ``config.json`` (weights optional), or a hub id.
        seq_len: tokens per sample; default the preset's, else 512 (or the model's limit).
        task: ``causal-lm``, ``masked-lm`` or ``seq-classification``; default from the model.
        pretrained: load the real weights (else a random-weight model is built from the config).
        trust_remote_code: allow code from the model's repository.
        data: the user's dataset; None: synthetic tokens.
        tokenizer: tokenizer for `data`; default the model's.
        pad_to_multiple_of: classification batches are padded to a multiple of this.

    Raises:
        WorkloadError: nothing of that name, an unreachable hub, a task the model has no class
            for, a tokenizer the model cannot take, or a sequence length the model cannot take.
    """
    if task is not None and task not in TASKS:
        raise WorkloadError(f"unknown --task {task!r}", "use causal-lm, masked-lm or seq-classification")
    if model in PRESETS:
        preset = PRESETS[model]
        if pretrained:
            raise WorkloadError(f"--pretrained: preset {model} has no weights", "drop --pretrained")
        config = _preset_config(preset)
        chosen = TASKS[task] if task else preset.task
        workload = Workload(model, chosen, config, seq_len or preset.seq_len)
    else:
        config = load_config(model, trust_remote_code)
        chosen = TASKS[task] if task else _task_of(config)
        limit = _position_limit(config)
        default_len = min(512, limit) if limit else 512
        workload = Workload(
            model, chosen, config, seq_len or default_len, pretrained, trust_remote_code=trust_remote_code
        )
    workload.model_class()  # a task the architecture has no class for fails here, not in a trial
    _check_seq_len(workload)
    if data is not None:
        _attach_data(workload, data, tokenizer, pad_to_multiple_of)
    return workload


def _preset_config(preset: Preset) -> Any:
    from transformers import AutoConfig

    return AutoConfig.for_model(preset.model_type, **preset.config)


def load_config(model: str, trust_remote_code: bool = False) -> Any:
    """A model's config from a local folder, the local hub cache, or (bounded) the hub.

    Raises:
        WorkloadError: no config there, or a hub id that cannot be reached (in seconds).
    """
    from transformers import AutoConfig

    return _from_folder_or_hub(
        lambda **kw: AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code, **kw),
        model,
        "model",
        "--model",
        f"use a preset ({', '.join(PRESETS)}), a directory with config.json, or a hub id",
    )


def load_tokenizer(name: str, trust_remote_code: bool = False) -> Any:
    """A tokenizer from a local folder, the local hub cache, or (bounded) the hub."""
    from transformers import AutoTokenizer

    return _from_folder_or_hub(
        lambda **kw: AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code, **kw),
        name,
        "tokenizer",
        "--tokenizer",
        "pass --tokenizer with a folder holding tokenizer.json (or the model's tokenizer files)",
    )


def _from_folder_or_hub(load: Callable[..., Any], name: str, what: str, flag: str, hint: str) -> Any:
    with quiet_loading():
        if not is_local(name):
            try:
                return load(local_files_only=True)  # the cache first: no network, no retries
            except (OSError, ValueError):
                require_hub(what, name, flag)
        try:
            return load()
        except (OSError, ValueError) as exc:
            where = "a local directory" if is_local(name) else "a hub id"
            raise WorkloadError(f"cannot load {what} {name!r} as {where}: {_first_line(exc)}", hint) from None


def _attach_data(
    workload: Workload, source: DataSource, tokenizer_name: str | None, pad_to_multiple_of: int | None
) -> None:
    if tokenizer_name is None and workload.name in PRESETS:
        raise WorkloadError(
            f"--dataset needs a tokenizer: preset {workload.name} has none",
            "pass --tokenizer with a tokenizer folder or hub id",
        )
    tokenizer = load_tokenizer(tokenizer_name or workload.name, workload.trust_remote_code)
    vocab = int(getattr(workload.config, "vocab_size", 0) or 0)
    if vocab and len(tokenizer) > vocab:
        raise WorkloadError(
            f"the tokenizer has {len(tokenizer)} tokens, more than {workload.name}'s vocab_size {vocab}",
            "pass the model's own tokenizer with --tokenizer, or a config with a larger vocab_size",
        )
    with quiet_loading():
        workload.data = prepare(
            source, tokenizer, workload.task, workload.seq_len, pad_to_multiple_of, workload.trust_remote_code
        )
    if workload.task == "sequence-classification":
        config = workload.config
        if workload.data.num_labels and workload.data.num_labels != config.num_labels:
            config.num_labels = workload.data.num_labels
        if getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = tokenizer.pad_token_id  # batched classification finds the last token


def _task_of(config: Any) -> Task:
    architectures = getattr(config, "architectures", None) or []
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return "sequence-classification"
    if any(a.endswith("ForMaskedLM") for a in architectures):
        return "masked-lm"
    return "causal-lm"


def _position_limit(config: Any) -> int | None:
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return int(limit) if limit else None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _check_seq_len(workload: Workload) -> None:
    limit = _position_limit(workload.config)
    if limit is not None and workload.seq_len > limit:
        raise WorkloadError(
            f"--seq-len {workload.seq_len} is longer than {workload.name}'s {limit} positions",
            f"use --seq-len {limit} or less",
        )


_AUTO_CLASS = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "sequence-classification": "AutoModelForSequenceClassification",
}
_MAPPING = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING",
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING",
}


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
        if self.task != "sequence-classification":  # masked LM on random tokens: predict them all
            sample["labels"] = input_ids.clone()
        else:
            sample["labels"] = torch.randint(0, self.num_labels, (), generator=generator)
        return sample

    def tokens_per_sample(self) -> int:
        """Real tokens in every sample (synthetic samples have no padding)."""
        return self.seq_len
