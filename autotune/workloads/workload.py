"""Workloads: the model to train (a built-in preset, a local directory or a hub id) and its data.

Every model is built from its config with random weights unless ``--pretrained`` asks for the real
ones: throughput and memory do not depend on weight values, so a folder holding only a
``config.json`` is enough and nothing is read or downloaded per trial. Data is the user's dataset
(`autotune.workloads.data`) or synthetic random tokens at the sequence length
(`autotune.workloads.synthetic`). The presets, the tasks and the loading of configs and tokenizers
live in their own modules; their public names are re-exported here.
"""

from __future__ import annotations

import copy
import hashlib
import json
import tempfile
from dataclasses import dataclass
from typing import Any

import torch

from autotune.errors import WorkloadError
from autotune.workloads.adapters import apply_adapter, resolve_peft
from autotune.workloads.data import Cycled, DataSource, PreparedData, prepare
from autotune.workloads.hub import quiet_loading
from autotune.workloads.loading import load_config, load_tokenizer
from autotune.workloads.masking import MaskedSamples
from autotune.workloads.presets import PRESETS, Preset, preset_config
from autotune.workloads.synthetic import SyntheticTokens
from autotune.workloads.tasks import AUTO_CLASS, MODEL_MAPPING, TASKS, Task, task_of

# The model-load kwarg of a quantized base (`autotune.space.mapping.QLORA_QUANTIZATION`).
QUANTIZED = "quantization_config"

__all__ = [
    "PRESETS",
    "TASKS",
    "Preset",
    "SyntheticTokens",
    "Task",
    "Workload",
    "load_config",
    "load_tokenizer",
    "resolve_workload",
]


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
        peft: the peft adapter every model is built with (its config's kwargs, as
            `autotune.workloads.adapters.resolve_peft` resolved them); None: every weight trains.
        args_class: the class every trial builds its arguments with: the user's own subclass of
            `TrainingArguments` (TRL's `SFTConfig`); None: `TrainingArguments`.
    """

    name: str
    task: Task
    config: Any
    seq_len: int
    from_pretrained: bool = False
    trust_remote_code: bool = False
    data: PreparedData | None = None
    peft: dict[str, Any] | None = None
    args_class: type | None = None

    def trainer_support(self) -> dict[str, bool]:
        """`ModelSupport` fields that the Trainer's kind decides (TRL's ``sft...``): none here."""
        return {}

    def _auto_class(self) -> Any:
        import transformers

        return getattr(transformers, AUTO_CLASS[self.task])

    def _remote(self) -> dict[str, Any]:
        return {"trust_remote_code": True} if self.trust_remote_code else {}

    def model_class(self) -> type:
        """The model class the workload builds (its support flags drive availability rules)."""
        from transformers.models.auto import modeling_auto

        mapping = getattr(modeling_auto, MODEL_MAPPING[self.task])
        try:
            model_class: Any = mapping[type(self.config)]
            return model_class
        except KeyError:
            raise WorkloadError(
                f"{self.name}: no {self.task} model class for config type {type(self.config).__name__}"
            ) from None

    def build_model(self, model_kwargs: dict[str, Any]) -> torch.nn.Module:
        """A fresh model for one trial, built with the trial's model-load kwargs (a
        ``quantization_config``, the ``base_weights=4bit`` knob's, quantizes it as it loads)."""
        auto = self._auto_class()
        remote = self._remote()
        # from_pretrained writes a quantization config into the config it is given: not the workload's
        config = copy.deepcopy(self.config) if QUANTIZED in model_kwargs else self.config
        model_kwargs = load_kwargs(model_kwargs)
        with quiet_loading():
            if self.from_pretrained:
                model = auto.from_pretrained(self.name, config=config, **remote, **model_kwargs)
            elif QUANTIZED in model_kwargs:
                model = quantized_random_init(auto, config, model_kwargs, remote)
            else:
                model = random_init(auto, self.config, model_kwargs, remote)
        return self.adapted(without_cache(model))

    def adapted(self, model: Any) -> Any:
        """`model` with the workload's peft adapter applied (itself without one)."""
        return apply_adapter(model, self.peft) if self.peft else model

    def attach_adapter(self, kwargs: dict[str, Any], resolved: bool = False) -> None:
        """Build every model of this workload with the peft adapter of `kwargs`: as peft resolves
        it for this model (`resolve_peft`, on a model without storage), or as given where it is
        already `resolved` (a study's stored one).

        Raises:
            UsageError: peft cannot apply it to this model.
        """
        self.peft = None
        placeholder = None if resolved else self.build_placeholder({})
        self.peft = dict(kwargs) if placeholder is None else resolve_peft(placeholder, kwargs)

    def adapter_config(self) -> dict[str, Any] | None:
        """The peft adapter every trial trains (its config's kwargs), None: every weight."""
        return self.peft

    def build_placeholder(self, model_kwargs: dict[str, Any]) -> torch.nn.Module | None:
        """A model of the trial's class and config with no storage (on the meta device), for what a
        `Trainer` reads of its model before a trial builds its own (the class, the config, the
        forward's signature): a worker builds its model once, not twice (for a 0.5B model a full
        build, random initialisation or weights read from disk, is seconds). None where no such
        model can be made (a user's own model)."""
        auto = self._auto_class()
        remote = self._remote()
        with quiet_loading(), torch.device("meta"):
            return self.adapted(auto.from_config(self.config, **remote, **unquantized(model_kwargs)))

    def build_probe_model(self, model_kwargs: dict[str, Any]) -> torch.nn.Module:
        """A model of the trial's shape for a memory probe, whose weights' values do not matter:
        built without the random initialisation (for a model of 0.5B parameters that is most of
        its build time) and zero-filled, so its memory is touched as a trained model's is. A model
        loaded from its weights is loaded as the trial loads it."""
        if self.from_pretrained:
            return self.build_model(model_kwargs)
        from transformers.initialization import no_init_weights

        auto = self._auto_class()
        remote = self._remote()
        # from_config, not `random_init`: from_pretrained initialises what it builds whatever the
        # context says, and these weights are overwritten with zeros below.
        with quiet_loading(), no_init_weights():
            model = without_cache(auto.from_config(self.config, **remote, **unquantized(model_kwargs)))
        # no_init_weights skips transformers' whole `init_weights`, tying included: untied, the
        # probe would hold (and compute gradients of) a second embedding matrix the trial does not.
        tie: Any = getattr(model, "tie_weights", None)
        if callable(tie):
            tie()
        model = self.adapted(model)  # its adapter's parameters alone hold gradients, as in a trial
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.zero_()
        return model

    def dataset(self, seed: int) -> torch.utils.data.Dataset:
        """The training samples: the user's data read in a loop, or synthetic tokens. Every trial
        of a run of `seed` reads the same samples, masked-LM masks included (each sample masked
        by its own seeded generator, `autotune.workloads.masking`)."""
        if self.data is not None:
            if self.data.masking is not None:
                return MaskedSamples(Cycled(self.data.dataset), self.data.masking, seed)
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

    def sample_lengths(self) -> list[int] | None:
        """Real tokens of each sample of the data (before it is read in a loop); None: all
        samples are `seq_len` long."""
        return self.data.lengths if self.data is not None else None

    @property
    def padded(self) -> bool:
        """Whether samples differ in length (padded per batch): padding-free batches and length
        grouping then have padding to save."""
        return self.data is not None and len(set(self.data.lengths)) > 1

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
            "peft": self.adapter_config(),
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
    packing: str = "blocks",
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
        packing: ``"blocks"`` or ``"examples"`` for language-model text (`autotune.options.RunConfig`).

    Raises:
        WorkloadError: nothing of that name, an unreachable hub, a task the model has no class
            for, a tokenizer the model cannot take, or a sequence length the model cannot take.
    """
    if task is not None and task not in TASKS:
        raise WorkloadError(
            f"unknown task {task!r}", "use causal-lm, masked-lm or seq-classification", field="task"
        )
    if model in PRESETS:
        preset = PRESETS[model]
        if pretrained:
            raise WorkloadError(
                f"pretrained=True: preset {model} has no weights", "drop pretrained=True", field="pretrained"
            )
        config = preset_config(preset)
        chosen = TASKS[task] if task else preset.task
        workload = Workload(model, chosen, config, seq_len or preset.seq_len)
    else:
        config = load_config(model, trust_remote_code)
        chosen = TASKS[task] if task else task_of(config)
        limit = _position_limit(config)
        default_len = min(512, limit) if limit else 512
        workload = Workload(
            model, chosen, config, seq_len or default_len, pretrained, trust_remote_code=trust_remote_code
        )
    workload.model_class()  # a task the architecture has no class for fails here, not in a trial
    _check_seq_len(workload)
    if data is not None:
        _attach_data(workload, data, tokenizer, pad_to_multiple_of, packing)
    return workload


def _attach_data(
    workload: Workload,
    source: DataSource,
    tokenizer_name: str | None,
    pad_to_multiple_of: int | None,
    packing: str = "blocks",
) -> None:
    if tokenizer_name is None and workload.name in PRESETS:
        raise WorkloadError(
            f"dataset needs tokenizer: preset {workload.name} has none of its own",
            "give tokenizer (a folder or a hub id)",
            field=("dataset", "tokenizer"),
        )
    tokenizer = load_tokenizer(tokenizer_name or workload.name, workload.trust_remote_code)
    vocab = int(getattr(workload.config, "vocab_size", 0) or 0)
    if vocab and len(tokenizer) > vocab:
        raise WorkloadError(
            f"tokenizer {tokenizer_name or workload.name!r} has {len(tokenizer)} tokens, more than "
            f"{workload.name}'s vocab_size {vocab}",
            "give tokenizer the model's own, or use a config with a larger vocab_size",
            field="tokenizer",
        )
    with quiet_loading():
        workload.data = prepare(
            source,
            tokenizer,
            workload.task,
            workload.seq_len,
            pad_to_multiple_of,
            workload.trust_remote_code,
            packing=packing,
        )
    if workload.task == "sequence-classification":
        config = workload.config
        if workload.data.num_labels and workload.data.num_labels != config.num_labels:
            config.num_labels = workload.data.num_labels
        if getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = tokenizer.pad_token_id  # batched classification finds the last token


def _position_limit(config: Any) -> int | None:
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return int(limit) if limit else None


def _check_seq_len(workload: Workload) -> None:
    limit = _position_limit(workload.config)
    if limit is not None and workload.seq_len > limit:
        raise WorkloadError(
            f"seq_len={workload.seq_len} is longer than {workload.name}'s {limit} positions",
            f"use seq_len={limit} or less",
            field="seq_len",
        )


def without_cache(model: Any) -> Any:
    """`model` with generation's cache off: cached generation state only costs memory in training."""
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False
    return model


def random_init(
    auto: Any, config: Any, model_kwargs: dict[str, Any], remote: dict[str, Any]
) -> torch.nn.Module:
    """What ``auto.from_config(config)`` builds, random weights each initialised once.

    `from_config` runs every module's constructor, whose torch initialisation (kaiming for each
    `Linear`, on memory touched for the first time) transformers' `init_weights` then overwrites:
    most of a large model's build time is thrown away. `from_pretrained` with no weights (``None``
    and an empty state dict, as its documentation allows) builds the model on the meta device and
    initialises every parameter and buffer once with the model's own `_init_weights`, as it does
    for any weight a checkpoint lacks: the same parameters, buffers, distributions, ties and dtype
    as `from_config` (``tests/unit/test_workload_models.py`` compares them over many architectures),
    in well under half the time, since no weight is initialised twice. Where `from_config` resolves the
    class in a way this does not repeat (remote code, a composite config's text model, a config
    type the auto class maps to several classes), and for classes from outside transformers, whose
    `_init_weights` may not cover what their constructors initialise, it is `from_config` itself.
    """
    # not `or {}`: the truth of transformers' lazy mapping imports every model type's config
    # module, a large share of a worker's set-up
    mapping = getattr(auto, "_model_mapping", None)
    if mapping is None:
        mapping = {}
    model_class: Any = mapping.get(type(config), None)  # noqa: SIM910  (the lazy mapping's get wants it)
    resolved_alike = (
        isinstance(model_class, type)
        and model_class.__module__.startswith("transformers.")  # not a class registered from elsewhere
        and not remote
        and not getattr(config, "auto_map", None)
        and "text_config" not in (getattr(config, "sub_configs", None) or {})
    )
    if not resolved_alike:
        return auto.from_config(config, **remote, **model_kwargs)
    model: Any = model_class.from_pretrained(None, config=config, state_dict={}, **model_kwargs)
    model.config._name_or_path = config._name_or_path  # from_pretrained(None) writes "None"
    return model


def load_kwargs(model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The model-load kwargs as `from_pretrained` takes them: a stored quantization config (a
    plain dict, as trials record and export it) made a `BitsAndBytesConfig`."""
    quantization = model_kwargs.get(QUANTIZED)
    if not isinstance(quantization, dict):
        return dict(model_kwargs)
    from transformers import BitsAndBytesConfig

    return {**model_kwargs, QUANTIZED: BitsAndBytesConfig(**quantization)}


def unquantized(model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """`model_kwargs` without a quantization config: a model built from its config (a placeholder,
    a memory probe) is never quantized (only `from_pretrained` quantizes)."""
    return {key: value for key, value in model_kwargs.items() if key != QUANTIZED}


def quantized_random_init(
    auto: Any, config: Any, model_kwargs: dict[str, Any], remote: dict[str, Any]
) -> torch.nn.Module:
    """A random-weight model quantized as a user's checkpoint is: built by `random_init`, saved to a
    scratch folder and loaded back with the quantization config, so that transformers' quantizer
    (bitsandbytes) replaces its Linear layers exactly as it does for real weights. A model built
    with no weights to load is not quantized the same way (missing weights are only initialised)."""
    plain: Any = random_init(auto, config, unquantized(model_kwargs), remote)
    with tempfile.TemporaryDirectory(prefix="autotune-quantize-") as folder:
        plain.save_pretrained(folder)
        del plain
        model: Any = auto.from_pretrained(folder, config=config, **remote, **model_kwargs)
    return model
