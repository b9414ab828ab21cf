"""What a TRL `SFTTrainer` derives from its `SFTConfig`, as `autotune.tune` reads it off a constructed
one: whether its dataset is packed, whether it truncates, whether it built its own collator.

Each trial rebuilds the `SFTConfig` with its knob values and redoes what `SFTTrainer.__init__`
derives from it (`autotune.trial.sft`). Pure: TRL is never imported here; a class is known for an
`SFTConfig` by its ancestry, so a Trainer that is not TRL's costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def is_sft_config(args: Any) -> bool:
    """Whether `args` is TRL's `SFTConfig` (or a subclass of it), without importing TRL."""
    return is_sft_class(type(args))


def is_sft_class(args_class: type) -> bool:
    """Whether `args_class` is TRL's `SFTConfig` or a subclass of it."""
    return any(_is_trl(cls, "SFTConfig") for cls in args_class.__mro__)


def _is_trl(cls: type, name: str) -> bool:
    return cls.__name__ == name and cls.__module__.startswith("trl.")


@dataclass(frozen=True)
class SftPieces:
    """What an `SFTTrainer` derived from its config, that the trials' knobs must respect.

    Attributes:
        packed: its config packs, so its dataset holds packed rows already (they cannot be unpacked).
        truncates: its config's ``max_length`` is set (TRL truncates unpacked samples to it).
        own_collator: it built its own collator (TRL's `DataCollatorForLanguageModeling`), which each
            trial rebuilds padding-free or not; a custom collator is used as given.
        prepares: it prepares its dataset (TRL skips vision datasets and ``skip_prepare_dataset``),
            which packing needs.
    """

    packed: bool
    truncates: bool
    own_collator: bool
    prepares: bool = True

    def support(self) -> dict[str, bool]:
        """The `autotune.space.availability.ModelSupport` fields these decide."""
        return {
            "sft": True,
            "sft_packed": self.packed,
            "sft_truncates": self.truncates,
            "sft_collator": self.own_collator,
            "sft_prepares": self.prepares,
        }


def sft_pieces(trainer: Any) -> SftPieces | None:
    """What `trainer` (a constructed Trainer) derived from its `SFTConfig`; None: not one."""
    args = trainer.args
    if not is_sft_config(args):
        return None
    collator = trainer.data_collator
    own = _is_trl(type(collator), "DataCollatorForLanguageModeling")
    prepares = not getattr(trainer, "_skip_prepare_dataset", False)
    return SftPieces(bool(args.packing), args.max_length is not None, own, prepares)


def unpatched(model: Any) -> Any:
    """`model` without the forward TRL set on the instance (its fused LM head, a closure over the
    model it patched: a copy of that model would run the original's weights through it). The
    trial's own model is patched again (`autotune.trial.sft.patch_model`)."""
    inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    vars(inner).pop("forward", None)
    return model


def sft_data_args(args_class: type, params: dict[str, Any]) -> dict[str, Any]:
    """The `SFTConfig` fields of a configuration's data knobs (``padding_free``,
    ``pad_to_multiple_of``: TRL's collator reads them from its config); none for another class."""
    if not is_sft_class(args_class):
        return {}
    fields: dict[str, Any] = {}
    if "padding_free" in params:
        fields["padding_free"] = bool(params["padding_free"])
    if "pad_to_multiple_of" in params:
        multiple = params["pad_to_multiple_of"]
        fields["pad_to_multiple_of"] = None if multiple == 1 else multiple
    return fields
