"""Applying a trial's knob values to the Trainer's pieces, and reading back what really ran.

Stock `Trainer.hyperparameter_search` applies a trial's values with a plain `setattr` on
`TrainingArguments`, after `model_init` and after activation checkpointing was decided. Anything
`TrainingArguments.__post_init__` derives (autocast from bf16/fp16, compile from the backend, tf32)
is then silently ignored, and checkpointing follows the previous trial. So a trial's arguments are
rebuilt from the pristine base kwargs plus the trial's (`rebuild_args`: ``__post_init__`` runs), in
place (``train()``'s local reference sees them), and the accelerator state is reset (the trial's
`Accelerator` takes the new mixed precision). Its data collator and sampler follow its data knobs;
what the ranks really ran (`strategy_applied`, `ddp_settings`) is read back from the Trainer.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch
from accelerate.state import AcceleratorState

from autotune.measure.ranks import distributed
from autotune.space.defaults import training_arguments
from autotune.space.knobs import Value
from autotune.space.mapping import trial_kwargs
from autotune.workloads.workload import Workload


def merged_args(base: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    """The trial's `TrainingArguments` kwargs over the base config's; checkpointing kwargs merge
    (a trial's ``every_n_layers`` keeps the base config's own keys, such as ``use_reentrant``)."""
    merged = {**base, **trial}
    key = "activation_checkpointing_kwargs"
    if isinstance(base.get(key), dict) and isinstance(trial.get(key), dict):
        merged[key] = {**base[key], **trial[key]}
    return merged


def applied_args(values: dict[str, Value]) -> dict[str, Any]:
    """The `TrainingArguments` kwargs a trial's knob values apply (stored with the trial)."""
    args_kwargs, _ = trial_kwargs(values)
    return args_kwargs


def rebuild_args(args: Any, kwargs: dict[str, Any]) -> None:
    """Make `args` the `TrainingArguments` of `kwargs`, in place (`Trainer.train()` holds a local
    reference to them across the trial), and free the trial's `Accelerator` (made in
    ``_hp_search_setup``) to take a new mixed precision; the process-level ``PartialState``
    (devices, process group) is kept."""
    fresh = training_arguments(type(args), **kwargs)  # the user's own class (SFTConfig) stays
    vars(args).clear()
    vars(args).update(vars(fresh))
    AcceleratorState._reset_state(reset_partial_state=False)


def trial_collator(workload: Workload, choices: dict[str, Value]) -> Any:
    """The trial's data collator: the workload's (padding each batch, to a multiple of
    ``pad_to_multiple_of`` where the trial says), or with ``padding_free`` one flattened row per
    batch with position ids that restart at every sample."""
    if choices.get("padding_free"):
        from transformers import DataCollatorWithFlattening

        return DataCollatorWithFlattening(return_position_ids=True, separator_id=-100)
    multiple = choices.get("pad_to_multiple_of")
    if multiple is None:
        return workload.collator()
    return padded_to_multiple(workload.collator(), int(multiple))


def padded_to_multiple(collator: Any, multiple: int) -> Any:
    """A copy of a padding collator (transformers' are dataclasses with ``pad_to_multiple_of``)
    that rounds each batch's length up to `multiple` (1: to the longest sample).

    Raises:
        ValueError: a multiple above 1 for a collator that does not pad (packed blocks, a
            collator of another kind); the availability rules keep such trials out.
    """
    pads = dataclasses.is_dataclass(collator) and "pad_to_multiple_of" in {
        f.name for f in dataclasses.fields(collator)
    }
    if not pads:
        if multiple == 1:  # stacking blocks of one length: nothing to round, as asked
            return collator
        raise ValueError(f"pad_to_multiple_of={multiple}: {type(collator).__name__} pads no batch")
    return dataclasses.replace(collator, pad_to_multiple_of=None if multiple == 1 else multiple)


def with_fp8(accelerator_args: dict[str, Any]) -> dict[str, Any]:
    """The `Accelerator` kwargs of an fp8 trial (`autotune.space.mapping.fp8_trial`): accelerate's
    ``mixed_precision="fp8"`` with torchao's float8 recipe (its Linear layers whose dimensions are
    multiples of 16 become ``Float8Linear``; the rest runs in bf16 autocast)."""
    from accelerate.utils import AORecipeKwargs

    handlers = [*accelerator_args.get("kwargs_handlers", []), AORecipeKwargs()]
    return {**accelerator_args, "mixed_precision": "fp8", "kwargs_handlers": handlers}


def fp8_layers(model: Any) -> int:
    """The model's torchao ``Float8Linear`` layers: proof that an fp8 trial trained in fp8
    (accelerate falls back to fp16 by itself on a GPU without fp8 tensor cores)."""
    return sum(type(module).__name__ == "Float8Linear" for module in model.modules())


def length_grouped_sampler(args: Any, lengths: list[int]) -> Any:
    """A ``group_by_length`` sampler over the known lengths of the samples the trial can reach (the
    data is read in a loop), so that it reads no sample to learn them and no epoch ends inside a
    measurement."""
    from transformers.trainer_pt_utils import LengthGroupedSampler

    group = args.train_batch_size * args.gradient_accumulation_steps
    reach = max(len(lengths), max(1, args.max_steps) * group * max(1, args.world_size))
    generator = torch.Generator()
    generator.manual_seed(int(args.seed))
    cycled = [lengths[i % len(lengths)] for i in range(reach)]
    return LengthGroupedSampler(group, lengths=cycled, generator=generator)


def real_tokens(batch: Any) -> Any:
    """The real (non-padding) tokens of one collated batch: its attention mask's ones, or every
    token of a batch without one (equal-length or flattened samples). A device tensor stays one."""
    mask = batch.get("attention_mask") if hasattr(batch, "get") else None
    if mask is not None:
        return mask.sum()
    return batch["input_ids"].numel()


def strategy_applied(trainer: Any) -> str | None:
    """How the ranks of the trial really shared the model (a ``data_parallel`` value), read from
    what the Trainer built; None in a single process."""
    if not distributed():
        return None
    wrapped = trainer.model_wrapped
    if getattr(trainer, "is_deepspeed_enabled", False):
        stage = wrapped.zero_optimization_stage() if hasattr(wrapped, "zero_optimization_stage") else 0
        return f"zero{stage}"
    from torch.distributed.fsdp import FSDPModule

    if isinstance(trainer.model, FSDPModule) or isinstance(wrapped, FSDPModule):
        plugin = getattr(trainer.accelerator.state, "fsdp_plugin", None)
        reshard = getattr(plugin, "reshard_after_forward", True)
        return "fsdp_full_shard" if reshard in (True, "FULL_SHARD") else "fsdp_shard_grad_op"
    if isinstance(wrapped, torch.nn.parallel.DistributedDataParallel):
        return "ddp"
    return "none"


def ddp_settings(model: Any) -> dict[str, Any] | None:
    """What the trial's DistributedDataParallel wrapper really runs with (None: not wrapped), read
    back from the wrapper and its reducer: proof that the DDP knobs took effect."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return None
    return {
        "find_unused_parameters": bool(model.find_unused_parameters),
        "bucket_cap_mb": model.bucket_bytes_cap / 2**20,
        "static_graph": bool(model.static_graph),
        # torch 2.13 keeps broadcast_buffers as forward_sync_buffers; earlier versions by its name
        "broadcast_buffers": bool(
            getattr(model, "forward_sync_buffers", getattr(model, "broadcast_buffers", True))
        ),
    }


def averages_over_items(model: Any) -> bool:
    """Whether a model's loss averages over ``num_items_in_batch`` when the Trainer passes it (so
    the Trainer must not divide it by the accumulation steps again): it says so
    (``accepts_loss_kwargs``), or its forward hands its kwargs to transformers' loss functions
    (``self.loss_function``). A forward that takes **kwargs but computes its own loss does not.
    A peft model's forward hands its kwargs to its base model's: the base model's says (as the
    stock Trainer reads it)."""
    get_base_model = getattr(model, "get_base_model", None)
    if callable(get_base_model):
        model = get_base_model()
    declared = getattr(type(model), "accepts_loss_kwargs", None)
    if isinstance(declared, bool):
        return declared
    forward = getattr(type(model), "forward", None)
    try:
        source = inspect.getsource(forward) if forward is not None else ""
    except (OSError, TypeError):
        return True  # cannot tell: as the Trainer assumes
    return "loss_function" in source or "num_items_in_batch" in source
