"""PEFT adapters (``--peft``): the model every trial trains is the built model with a peft adapter
(LoRA by default) applied by `peft.get_peft_model`, its base weights frozen.

A run's adapter is held as the keyword arguments of its peft config class (``peft_type`` picks the
class, LoRA by default): what ``--peft lora`` or a JSON/YAML file names (`load_peft`), then, once
applied to the model on the meta device, the config as peft resolved it (`resolve_peft`: the target
modules peft inferred for the architecture written out). That resolved form is stored with the
study, rebuilt by every worker, and exported as peft loads it (``LoraConfig(**exported)``).

peft is imported inside the functions: a run without an adapter never imports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from autotune.errors import UsageError, first_line
from autotune.files import read_mapping

LORA = "lora"
# peft's task type for each of autotune's tasks: it picks the PeftModel class (causal LM, sequence
# classification: the head is then trained too). Masked LM has none: a plain PeftModel.
PEFT_TASK_TYPE = {"causal-lm": "CAUSAL_LM", "sequence-classification": "SEQ_CLS"}
# The option's name stands alone where it means the option: the command line spells it as its flag.
_HINT = (
    "give peft='lora', or a JSON/YAML file of a PEFT config's fields (LoraConfig's; peft_type picks another)"
)


def load_peft(value: str, task: str) -> dict[str, Any]:
    """The peft config kwargs that ``--peft`` names: ``lora`` (peft's defaults for the
    architecture) or a JSON/YAML file of a config's fields (``peft_type``, default ``LORA``). The
    task type is the workload's where the file gives none.

    Raises:
        UsageError: neither ``lora`` nor a readable file of a mapping that builds a peft config.
    """
    if value.strip().lower() == LORA:
        data: dict[str, Any] = {"peft_type": "LORA"}
    else:
        data = _read_mapping(value)
        data.setdefault("peft_type", "LORA")
    if task in PEFT_TASK_TYPE:
        data.setdefault("task_type", PEFT_TASK_TYPE[task])
    peft_config(data)  # a bad field fails here, before any trial
    return data


def _read_mapping(path: str) -> dict[str, Any]:
    return read_mapping(path, "peft", "a PEFT config's fields", _HINT)


def peft_config(kwargs: Mapping[str, Any]) -> Any:
    """The peft config object of `kwargs` (its class from ``peft_type``).

    Raises:
        UsageError: peft is not installed, an unknown ``peft_type``, or fields its class refuses.
    """
    try:
        from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING
    except ImportError:
        raise UsageError("PEFT adapters need the PEFT library", "pip install 'peft>=0.21.2'") from None
    peft_type = str(kwargs.get("peft_type") or "LORA").upper()
    by_name: dict[str, Any] = {str(getattr(k, "value", k)): v for k, v in PEFT_TYPE_TO_CONFIG_MAPPING.items()}
    config_class = by_name.get(peft_type)
    if config_class is None:
        known = ", ".join(sorted(by_name))
        raise UsageError(f"unknown peft_type {peft_type!r}", f"use one of {known}", field="peft")
    try:
        return config_class(**{**kwargs, "peft_type": peft_type})
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"invalid peft config for {config_class.__name__}: {first_line(exc)}", _HINT, field="peft"
        ) from None


def apply_adapter(model: Any, kwargs: Mapping[str, Any]) -> Any:
    """`model` with the adapter of `kwargs` applied (`peft.get_peft_model`): its base weights
    frozen, the adapter's trainable."""
    from peft import get_peft_model

    return get_peft_model(model, peft_config(kwargs))


def exported_config(config: Any) -> dict[str, Any]:
    """A peft config as the keyword arguments that build it again (``LoraConfig(**exported)``):
    its ``to_dict()`` less what its class does not take, as JSON values (sets as sorted lists,
    enums as their values)."""
    # Not a nested config object either (a runtime config, which peft does not save): rebuilt from
    # its dict, it would be a dict where peft reads attributes.
    init = {
        f.name
        for f in dataclasses.fields(config)
        if f.init and not dataclasses.is_dataclass(getattr(config, f.name, None))
    }
    return {key: _plain(value) for key, value in config.to_dict().items() if key in init}


def _plain(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return getattr(value, "value", value)  # a str enum (PeftType, TaskType) as its value


def adapter_of(model: Any) -> dict[str, Any] | None:
    """The exported config of a PeftModel's active adapter; None for a model without one."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, Mapping) or not configs:
        return None
    active = getattr(model, "active_adapter", None)
    config = (
        configs.get(active) if isinstance(active, str) and active in configs else next(iter(configs.values()))
    )
    return exported_config(config)


def resolve_peft(placeholder: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The adapter config as peft resolves it for this model (the target modules it infers for
    the architecture written out): `kwargs` applied to `placeholder`, a model with no storage.

    Raises:
        UsageError: peft cannot apply the config to this model (no target modules it knows, a
            module name the model does not have).
    """
    try:
        adapted = apply_adapter(placeholder, kwargs)
    except UsageError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise UsageError(
            f"PEFT cannot apply the adapter to {type(placeholder).__name__}: {first_line(exc)}",
            "name the model's modules in target_modules of a peft file",
            field="peft",
        ) from None
    resolved = adapter_of(adapted)
    return resolved if resolved is not None else dict(kwargs)


def parameter_counts(model: Any) -> tuple[int, int]:
    """(trainable, total) parameters of a model: the trainable ones are those with gradients
    (an adapter's, where one is applied)."""
    total = trainable = 0
    for parameter in model.parameters():
        total += parameter.numel()
        if parameter.requires_grad:
            trainable += parameter.numel()
    return trainable, total
