"""Where a knob's value lands: one trial's knob values mapped to (`TrainingArguments` kwargs,
model-load kwargs) by `trial_kwargs`, and the values that decide how batches are made picked out by
`data_choices`. A knob whose value is not a field of the same name has its mapper here (precision,
compilation, checkpointing, sharding, the weights' format). Pure: no torch or transformers import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotune.space.knobs import CATALOGUE, Value

# How a precision lands in TrainingArguments. tf32 is always set explicitly: with torch_compile on,
# TrainingArguments turns tf32 on by itself when it is left unset, which would blur fp32 and tf32.
_PRECISION_ARGS: dict[str, dict[str, Any]] = {
    "fp32": {"bf16": False, "fp16": False, "tf32": False},
    "tf32": {"bf16": False, "fp16": False, "tf32": True},
    "fp16": {"bf16": False, "fp16": True, "tf32": False},
    "bf16": {"bf16": True, "fp16": False, "tf32": False},
    "bf16+tf32": {"bf16": True, "fp16": False, "tf32": True},
    # TrainingArguments has no fp8 field: an fp8 trial's arguments are bf16's (accelerate's fp8 runs
    # every operation but the converted Linear layers in bf16 autocast), and its Accelerator is made
    # with mixed_precision="fp8" and torchao's recipe (`fp8_trial`, `autotune.trial.apply`).
    "fp8": {"bf16": True, "fp16": False, "tf32": False},
}


def _precision_args(value: Value) -> dict[str, Any]:
    return dict(_PRECISION_ARGS[str(value)])


def precision_of(args: Mapping[str, Any]) -> str:
    """The precision knob value a `TrainingArguments` kwargs dict amounts to."""
    bf16, fp16, tf32 = bool(args.get("bf16")), bool(args.get("fp16")), bool(args.get("tf32"))
    if bf16:
        return "bf16+tf32" if tf32 else "bf16"
    if fp16:
        return "fp16"
    return "tf32" if tf32 else "fp32"


def _empty_cache_args(value: Value) -> dict[str, Any]:
    return {"torch_empty_cache_steps": int(value) or None}  # 0 means never


# The `TrainingArguments` field (transformers >= 5; ``gradient_checkpointing_kwargs`` is its
# deprecated alias) that two knobs write a key of each: their dicts merge (`trial_kwargs`).
CHECKPOINTING_KWARGS = "activation_checkpointing_kwargs"


def _checkpoint_every_args(value: Value) -> dict[str, Any]:
    # transformers >= 5 checkpoints only every n-th decoder layer with this key (1: all of them).
    return {CHECKPOINTING_KWARGS: {"every_n_layers": int(value)}}


def _reentrant_args(value: Value) -> dict[str, Any]:
    # Passed on to torch.utils.checkpoint; transformers' own default is the non-reentrant one.
    return {CHECKPOINTING_KWARGS: {"use_reentrant": bool(value)}}


def _group_by_length_args(value: Value) -> dict[str, Any]:
    # Off leaves the sampler to the base config (trials read the data in order).
    return {"train_sampling_strategy": "group_by_length"} if value else {}


def _strategy_args(value: Value) -> dict[str, Any]:
    # FSDP2 through fsdp=True and its config (transformers 5 maps the old strategy strings to
    # reshard_after_forward the same way); ZeRO through an inline DeepSpeed config whose batch
    # sizes and clipping follow the TrainingArguments ("auto").
    strategy = str(value)
    if strategy.startswith("fsdp_"):
        reshard = strategy == "fsdp_full_shard"
        return {"fsdp": True, "fsdp_config": {"version": 2, "reshard_after_forward": reshard}}
    if strategy.startswith("zero"):
        auto = dict.fromkeys(("train_micro_batch_size_per_gpu", "gradient_accumulation_steps"), "auto")
        stage = int(strategy.removeprefix("zero"))
        return {"deepspeed": {**auto, "gradient_clipping": "auto", "zero_optimization": {"stage": stage}}}
    return {}


def _compile_args(value: Value) -> dict[str, Any]:
    # "off" is modelled explicitly: a None candidate would reach TrainingArguments as the string
    # 'None', and any backend value turns compile on.
    if value == "off":
        return {"torch_compile": False, "torch_compile_backend": None}
    return {"torch_compile": True, "torch_compile_backend": str(value)}


# QLoRA's quantization (Dettmers et al. 2023): NF4 with double quantization, bf16 compute. Kept as the
# plain dict `from_pretrained(quantization_config=...)` takes, so that trials store and export it.
QLORA_QUANTIZATION: dict[str, Any] = {
    "load_in_4bit": True,
    "bnb_4bit_quant_type": "nf4",
    "bnb_4bit_use_double_quant": True,
    "bnb_4bit_compute_dtype": "bfloat16",
}


def _base_weights_kwargs(value: Value) -> dict[str, Any]:
    if value == "bf16":
        return {"dtype": "bfloat16"}
    if value == "4bit":  # the layers bitsandbytes does not quantize (norms, embeddings) in bf16
        return {"quantization_config": dict(QLORA_QUANTIZATION), "dtype": "bfloat16"}
    return {}


def fp8_trial(values: Mapping[str, Value]) -> bool:
    """Whether a trial trains in fp8: its Accelerator takes ``mixed_precision="fp8"`` with torchao's
    float8 recipe, which no `TrainingArguments` field can say (its arguments are bf16's)."""
    return values.get("precision") == "fp8"


# Knobs whose value does not map one-to-one onto a TrainingArguments field of the same name.
_ARGS_MAPPERS: dict[str, Callable[[Value], dict[str, Any]]] = {
    "precision": _precision_args,
    "torch_compile": _compile_args,
    "torch_empty_cache_steps": _empty_cache_args,
    "checkpoint_every_n_layers": _checkpoint_every_args,
    "gradient_checkpointing_reentrant": _reentrant_args,
    "group_by_length": _group_by_length_args,
    "data_parallel": _strategy_args,
}
# The knobs of `TrainingArguments` whose field is not the knob's own (`_ARGS_MAPPERS`).
MAPPED_ARGS = frozenset(_ARGS_MAPPERS)
# Model knobs whose value does not land as a model-load kwarg of the same name.
_MODEL_MAPPERS: dict[str, Callable[[Value], dict[str, Any]]] = {"base_weights": _base_weights_kwargs}


def trial_kwargs(values: Mapping[str, Value]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Map one trial's knob values to (`TrainingArguments` kwargs, model-load kwargs). Knobs of
    the ``"data"`` target land in neither (see `data_choices`). Knobs that write keys of one dict
    (``activation_checkpointing_kwargs``: ``every_n_layers`` and ``use_reentrant``) merge them.

    Raises:
        KeyError: a name that is not in the catalogue (spaces are validated before this runs).
    """
    args: dict[str, Any] = {}
    model: dict[str, Any] = {}
    for name, value in values.items():
        knob = CATALOGUE[name]
        if knob.target == "data":
            continue
        if knob.target == "model":
            if name in _MODEL_MAPPERS:
                model.update(_MODEL_MAPPERS[name](value))
            else:
                model[name] = value
        elif name in _ARGS_MAPPERS:
            for key, mapped in _ARGS_MAPPERS[name](value).items():
                if key == CHECKPOINTING_KWARGS and key in args:
                    mapped = {**args[key], **mapped}
                args[key] = mapped
        else:
            args[name] = value
    return args, model


def data_choices(values: Mapping[str, Value]) -> dict[str, Value]:
    """The knob values of a trial that decide how its batches are made (``padding_free``,
    ``pad_to_multiple_of``)."""
    return {name: value for name, value in values.items() if CATALOGUE[name].target == "data"}
