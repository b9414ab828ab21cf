"""The ``trl-sft`` export: a YAML file that ``trl sft --config FILE`` takes as it is.

TRL's command line parses the file with its `TrlParser` over ``(ScriptArguments, SFTConfig,
ModelConfig, DatasetMixtureConfig)``: every key is a field of one of them, flat. The training
arguments are `SFTConfig` fields (a `TrainingArguments` field is one too); the model-load kwargs
that `ModelConfig` names (``attn_implementation``, ``dtype``) and the model go there; padding-free
batches and a padding multiple are `SFTConfig` fields. `SFTConfig` changes some of
`TrainingArguments`' defaults (checkpointing on, bf16, its learning rate): the file spells out the
values the trials ran with, so that TRL's defaults do not replace them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune.errors import UsageError
from autotune.export.formats import comment
from autotune.space.defaults import training_args_defaults

# The model-load kwargs `trl sft` takes as ModelConfig fields.
_MODEL_FIELDS = ("attn_implementation", "dtype")


def to_trl_sft(config: dict[str, Any]) -> str:
    """The config as ``trl sft --config FILE`` reads it (see the module docstring); the dataset is
    the user's to add (``dataset_name``), as a comment on top says.

    Raises:
        UsageError: TRL is not installed, or the configuration loads its model in a way `trl sft`
            has no field for (a quantization config).
    """
    import yaml

    sft_defaults = _sft_config_defaults()
    ta_defaults = training_args_defaults()
    args = dict(config["training_args"])
    # what the trials ran with, where SFTConfig's own default would say otherwise
    for key, default in sft_defaults.items():
        if key in ta_defaults and key not in args and default != ta_defaults[key]:
            args[key] = ta_defaults[key]
    args.pop("gradient_checkpointing", None)  # activation_checkpointing says it (transformers 5)
    args.setdefault("activation_checkpointing", ta_defaults.get("activation_checkpointing", False))
    params = config["expected"].get("params", {})
    if params.get("padding_free"):
        args["padding_free"] = True
    if config.get("pad_to_multiple_of"):
        args["pad_to_multiple_of"] = int(config["pad_to_multiple_of"])
    if config["expected"].get("device") == "cpu":
        args.setdefault("use_cpu", True)
    model_kwargs = dict(config["model_kwargs"])
    unknown = sorted(set(model_kwargs) - set(_MODEL_FIELDS))
    if unknown:
        raise UsageError(
            f"--format trl-sft: trl sft has no field for the model-load kwarg {unknown[0]!r}",
            "export with --format yaml and load the model in your own script",
        )
    model = {"model_name_or_path": str(config["expected"].get("model") or "your-model"), **model_kwargs}
    header = comment(config) + (
        "# trl sft --config THIS_FILE --dataset_name YOUR_DATASET (model_name_or_path: yours)\n"
    )
    if config.get("peft"):
        header += f"# peft adapter (ModelConfig's use_peft and lora_* fields): {config['peft']}\n"
    return header + yaml.safe_dump({**model, **args}, sort_keys=False)


def _sft_config_defaults() -> dict[str, Any]:
    """`SFTConfig`'s declared field defaults (TRL imported here only: it is slow to import)."""
    try:
        from trl import SFTConfig
    except ImportError:
        raise UsageError(
            "--format trl-sft needs TRL, which is not installed", "pip install 'hf-autotune[trl]'"
        ) from None
    return {f.name: f.default for f in dataclasses.fields(SFTConfig) if f.default is not dataclasses.MISSING}
