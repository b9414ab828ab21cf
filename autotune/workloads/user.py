"""A workload made of a user's own Trainer pieces (`autotune.tune`): their model builder or model,
train dataset, data collator, Trainer subclass, callbacks and the attributes their Trainer carries.

A run configuration cannot name these objects, so a worker process cannot rebuild them from the
study's store: the supervisor writes the whole workload to a file with `cloudpickle` (`dump`), and
each worker reads it back (`load`) instead of resolving the stored run configuration's model and
data. Functions and classes defined in a script or a notebook travel by value; those of an
importable module by reference (the worker imports that module).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from autotune.errors import WorkloadError
from autotune.workloads.data import Cycled
from autotune.workloads.masking import MaskedSamples, SampleMasking, padding_collator
from autotune.workloads.sft import SftPieces, unpatched
from autotune.workloads.workload import QUANTIZED, Workload, without_cache


@dataclass
class UserWorkload(Workload):
    """A workload made of the caller's objects (see the module docstring).

    Attributes:
        model_init: builds a fresh model for each trial (0 arguments, or 1: it is given None).
        model: or a model to copy for each trial (its weights included), when no `model_init`.
        train_dataset: samples with ``input_ids`` (and ``attention_mask`` where padded).
        data_collator: the collator the user's Trainer uses (None: `default_data_collator`).
        built_class: the class of the user's model (its support flags drive availability rules).
        trainer_class: the user's `Trainer` class; each trial runs a class derived from
            `AutotuneTrainer` and this one (`autotune.trial.compose.trial_trainer_class`).
        trainer_attrs: attributes set on each trial's Trainer once it is built: the user's own
            (what their subclass's ``__init__`` stored), ``compute_loss_func``, ``processing_class``.
        callbacks: the user's Trainer callbacks, added to every trial's.
        sft: what a TRL `SFTTrainer` derived from its `SFTConfig` (`autotune.workloads.sft`), or None
            for any other Trainer. Its model carries TRL's patched forward (a closure over that
            model): each trial's copy drops it, and the trial patches its own model again.
    """

    model_init: Callable[..., torch.nn.Module] | None = None
    model: torch.nn.Module | None = None
    train_dataset: Any = None
    data_collator: Any = None
    built_class: type | None = None
    trainer_class: type | None = None
    trainer_attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    callbacks: tuple[Any, ...] = ()
    sft: SftPieces | None = None
    _lengths: dict[int, int] = dataclasses.field(default_factory=dict, repr=False)

    def model_class(self) -> type:
        return self.built_class or super().model_class()

    def build_model(self, model_kwargs: dict[str, Any]) -> torch.nn.Module:
        """A fresh model for one trial: `model_init`'s, or a copy of `model`, with the trial's
        attention implementation set."""
        if self.model_init is not None:
            from transformers.trainer_utils import number_of_arguments

            model = self.model_init() if number_of_arguments(self.model_init) == 0 else self.model_init(None)
        elif self.model is not None:
            model = copy.deepcopy(self.model)
            if self.sft is not None:
                unpatched(model)
        else:
            return super().build_model(model_kwargs)
        attention = model_kwargs.get("attn_implementation")
        if attention is not None:
            model.set_attn_implementation(attention)  # type: ignore[operator]
        if QUANTIZED in model_kwargs:
            # only from_pretrained quantizes, and the user's own model is built already
            raise WorkloadError(
                "base_weights=4bit: a model built by the user's model_init or given as an object "
                "cannot be quantized by autotune",
                "load it with from_pretrained(..., quantization_config=BitsAndBytesConfig(...)) yourself",
            )
        dtype = model_kwargs.get("dtype")
        if dtype is not None:  # base_weights=bf16
            model = model.to(getattr(torch, str(dtype)))
        return without_cache(model)

    def build_placeholder(self, model_kwargs: dict[str, Any]) -> torch.nn.Module | None:
        return None  # the user's model_init or model may not build on the meta device

    def dataset(self, seed: int) -> torch.utils.data.Dataset:
        """The user's samples read in a loop; with a stock masked-LM collator, each sample masked
        as it is read by its own seeded generator (`autotune.workloads.masking`), so that every
        trial trains on the same masks."""
        masking = SampleMasking.of_collator(self.data_collator)
        if masking is not None:
            return MaskedSamples(Cycled(self.train_dataset), masking, seed)
        return Cycled(self.train_dataset)

    def collator(self) -> Any:
        """The user's collator; for a stock masked-LM one, which `dataset` masks for, one that
        only pads."""
        from transformers import default_data_collator

        if SampleMasking.of_collator(self.data_collator) is not None:
            return padding_collator(self.data_collator.tokenizer, self.data_collator.pad_to_multiple_of)
        return self.data_collator or default_data_collator

    def tokens_in(self, first: int, count: int) -> int:
        n = len(self.train_dataset)
        return sum(self._length((first + i) % n) for i in range(count))

    def _length(self, index: int) -> int:
        if index not in self._lengths:
            sample = self.train_dataset[index]
            mask = sample.get("attention_mask")
            self._lengths[index] = int(sum(mask)) if mask is not None else len(sample["input_ids"])
        return self._lengths[index]

    @property
    def padded(self) -> bool:
        """Samples differ in length (among the first 256) and the collator is a stock transformers
        one: a custom collator's batches are the user's to make, so autotune never swaps it for a
        flattening one nor counts on its padding."""
        collator = self.data_collator
        if collator is not None and not type(collator).__module__.startswith(("transformers.", "trl.")):
            return False
        first = min(len(self.train_dataset), 256)
        return len({self._length(i) for i in range(first)}) > 1

    def sample_lengths(self) -> list[int] | None:
        if not self.padded:
            return None
        return [self._length(i) for i in range(len(self.train_dataset))]

    def trainer_support(self) -> dict[str, bool]:
        return self.sft.support() if self.sft is not None else {}

    def dataset_identity(self) -> str:
        ds = self.train_dataset
        return f"user:{type(ds).__name__}:{len(ds)}:{getattr(ds, '_fingerprint', '')}"

    def describe(self) -> dict[str, Any]:
        """As `Workload.describe`, plus the user's Trainer class (``trainer``): what marks a study
        of `autotune.tune`, whose model and data are not in the store."""
        trainer = self.trainer_class
        return {
            **super().describe(),
            "trainer": f"{trainer.__module__}.{trainer.__qualname__}" if trainer else "",
        }

    def pieces(self) -> dict[str, Any]:
        """What a worker needs of this workload, named as the user knows each piece: the first
        that cannot be pickled is the one to name."""
        named: dict[str, Any] = {
            "the Trainer's model_init": self.model_init,
            "the Trainer's model": self.model if self.model_init is None else None,
            "the Trainer's train_dataset": self.train_dataset,
            "the Trainer's data_collator": self.data_collator,
            "the Trainer's class": self.trainer_class,
            "the model's config": self.config,
        }
        for index, callback in enumerate(self.callbacks):
            named[f"callback {index} ({type(callback).__name__})"] = callback
        for name, value in self.trainer_attrs.items():
            named[f"the Trainer's attribute {name!r}"] = value
        return {name: value for name, value in named.items() if value is not None}


def dump(workload: UserWorkload, path: str) -> None:
    """Write `workload` to `path` for worker processes (`load` reads it).

    Raises:
        Exception: whatever `cloudpickle` raises for an object it cannot pickle (the file is then
            incomplete).
    """
    import cloudpickle

    with open(path, "wb") as handle:
        cloudpickle.dump(workload, handle)


def load(path: str) -> UserWorkload:
    """The workload `dump` wrote to `path` (a file this process's own supervisor wrote)."""
    import pickle

    with open(path, "rb") as handle:
        workload = pickle.load(handle)
    if not isinstance(workload, UserWorkload):
        raise TypeError(f"{path} holds a {type(workload).__name__}, not a user workload")
    return workload
