"""The catalogue of efficiency knobs: what each one is and its legal values (where it lands:
`autotune.space.mapping`).

Pure: no torch or transformers import, so space validation and `--help` stay fast.

A knob lands in `TrainingArguments` (``target="args"``), in the model-load kwargs
(``target="model"``, such as ``attn_implementation``) or in how batches are made (``target="data"``:
``padding_free`` picks the data collator); `autotune.space.mapping` maps a trial's values there.
The driver rebuilds `TrainingArguments` from those kwargs for every trial, so that everything
`TrainingArguments.__post_init__` derives (autocast, compile, tf32) really takes effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from autotune.space import availability
from autotune.space.availability import Hardware, ModelSupport

Value = bool | int | float | str

# fp8: torchao's float8 matmuls through accelerate, the rest in bf16 autocast (see `fp8_trial`).
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "bf16+tf32", "fp8")
OPTIMIZERS = (
    "adamw_torch",
    "adamw_torch_fused",
    "adafactor",
    "adamw_bnb_8bit",
    "paged_adamw_8bit",
    "adamw_torch_8bit",
    "sgd",
    "adagrad",
    "rmsprop",
)
COMPILE_BACKENDS = ("off", "inductor", "aot_eager", "cudagraphs", "eager")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
ATTENTION = ("eager", "sdpa", "flash_attention_2", "flex_attention")
# How the ranks of a trial share the model: replicated (DDP), sharded by FSDP2 (parameters
# resharded after the forward, or kept whole until the backward), or by DeepSpeed ZeRO stage 1-3.
STRATEGIES = ("ddp", "fsdp_full_shard", "fsdp_shard_grad_op", "zero1", "zero2", "zero3")

# The optimizer's update rule, for knobs that change training semantics: implementations within one
# family compute the same update (the fused AdamW kernel is AdamW), so switching between them is a
# speed choice. 8-bit optimizer states quantise the update: a family of their own.
OPTIMIZER_FAMILY = {
    "adamw_torch": "adamw",
    "adamw_torch_fused": "adamw",
    "adamw_bnb_8bit": "adamw_8bit",
    "paged_adamw_8bit": "adamw_8bit",
    "adamw_torch_8bit": "adamw_8bit",
    "adafactor": "adafactor",
    "sgd": "sgd",
    "adagrad": "adagrad",
    "rmsprop": "rmsprop",
}


@dataclass(frozen=True)
class Knob:
    """One efficiency knob.

    Attributes:
        name: the key used in space files, trial params and exports.
        target: ``"args"`` for a `TrainingArguments` field, ``"model"`` for a model-load kwarg,
            ``"data"`` for the way batches are collated.
        kind: ``"int"`` (positive integers), ``"bool"`` or ``"choice"`` (one of `choices`).
        choices: the legal values of a ``"choice"`` knob.
        changes_semantics: whether the knob changes the training math (optimizer family, precision,
            effective batch size) rather than only its speed.
        help: one line for `autotune knobs` and the knob reference (docs/reference/knobs.md).
        requires: ``(other knob, values)``: this knob only exists in trials where the other knob
            takes one of those values (a compile mode only with the inductor backend).
        ranks_only: the knob only exists in trials of more than one rank (DistributedDataParallel's
            own settings); a single-process space leaves it out.
        label: its short name in tables and trial lines (`short_name`); None: its name.
        measured_kind: whether its value is part of a configuration's kind for the memory
            estimate: what changes the peak that the estimate's probe does not try, so peaks are
            learned per value (`MEASURED_KIND_KNOBS`).
        available: why a value cannot run on this hardware for this model, or None
            (`autotune.space.availability`'s rule for it; `value_unavailable`); None: it always can.
        runs_on: (value, where it runs) for values that run on some GPUs only (`RUNS_ON`).
        unset: its value where its `TrainingArguments` field is left unset (None), as `read`
            takes it (the compile mode's ``default``).
    """

    name: str
    target: Literal["args", "model", "data"]
    kind: Literal["int", "count", "bool", "choice"]
    help: str
    choices: tuple[str, ...] = ()
    changes_semantics: bool = False
    requires: tuple[str, tuple[Value, ...]] | None = None
    ranks_only: bool = False
    label: str | None = None
    measured_kind: bool = False
    available: availability.Rule | None = None
    runs_on: tuple[tuple[Value, str], ...] = ()
    unset: Value | None = None

    def read(self, raw: Any) -> Value:
        """The knob's value that a `TrainingArguments` field value amounts to (None: `unset`)."""
        raw = getattr(raw, "value", raw)  # an enum once built (OptimizerNames)
        raw = self.unset if raw is None else raw
        if self.kind == "bool":
            return bool(raw)
        if self.kind in ("int", "count"):
            return int(raw)
        return str(raw)

    def check(self, value: object) -> str | None:
        """Return why `value` is not legal for this knob, or None if it is."""
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                return f"expected a positive integer, got {value!r}"
        elif self.kind == "count":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                return f"expected an integer >= 0, got {value!r}"
        elif self.kind == "bool":
            if not isinstance(value, bool):
                return f"expected true or false, got {value!r}"
        elif value not in self.choices:
            return f"{value!r} is not one of {', '.join(self.choices)}"
        return None


CATALOGUE: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "per_device_train_batch_size",
            "args",
            "int",
            "samples per device per micro-step",
            changes_semantics=True,
            label="bs",
        ),
        Knob(
            "gradient_accumulation_steps",
            "args",
            "int",
            "micro-steps per optimizer step (effective batch = batch x accumulation x ranks)",
            changes_semantics=True,
            label="ga",
        ),
        Knob(
            "precision",
            "args",
            "choice",
            "numeric format: fp32, tf32 matmuls, fp16 or bf16 autocast, bf16 with tf32, fp8 matmuls "
            "(torchao float8 through accelerate, compute capability 8.9+)",
            choices=PRECISIONS,
            changes_semantics=True,
            label="prec",
            available=availability.precision_rule,
            runs_on=(("fp8", "CUDA GPU of compute capability 8.9+ (Ada, Hopper, Blackwell) with torchao"),),
        ),
        Knob(
            "optim",
            "args",
            "choice",
            "optimizer implementation (TrainingArguments.optim)",
            choices=OPTIMIZERS,
            changes_semantics=True,
            label="optim",
            available=availability.optimizer_rule,
        ),
        Knob(
            "torch_compile",
            "args",
            "choice",
            "torch.compile backend, or off",
            choices=COMPILE_BACKENDS,
            label="compile",
            measured_kind=True,
            available=availability.compile_rule,
        ),
        Knob(
            "torch_compile_mode",
            "args",
            "choice",
            "inductor compile mode (only in trials that compile with inductor)",
            choices=COMPILE_MODES,
            requires=("torch_compile", ("inductor",)),
            label="mode",
            measured_kind=True,
            available=availability.compile_mode_rule,
            unset="default",
        ),
        Knob(
            "attn_implementation",
            "model",
            "choice",
            "attention kernel chosen when the model is built",
            choices=ATTENTION,
            label="attn",
            available=availability.attention_rule,
        ),
        Knob(
            "activation_checkpointing",
            "args",
            "bool",
            "recompute activations in the backward pass: less memory, more compute",
            label="ckpt",
            available=availability.checkpointing_rule,
        ),
        Knob(
            "checkpoint_every_n_layers",
            "args",
            "int",
            "with checkpointing on, recompute only every n-th layer (1: all): memory and speed in steps",
            requires=("activation_checkpointing", (True,)),
        ),
        Knob(
            "gradient_checkpointing_reentrant",
            "args",
            "bool",
            "with checkpointing on, torch's reentrant checkpoint (use_reentrant=True) or the "
            "non-reentrant one (transformers' default); under LoRA reentrant was reported about 2x slower",
            requires=("activation_checkpointing", (True,)),
            label="reentrant",
        ),
        Knob(
            "padding_free",
            "data",
            "bool",
            "flatten each batch into one row without padding (DataCollatorWithFlattening; on an SFTTrainer "
            "TRL's own, SFTConfig padding_free): no compute on padding; variable-length causal-LM data only",
            measured_kind=True,
            available=availability.padding_free_rule,
        ),
        Knob(
            "group_by_length",
            "args",
            "bool",
            "batch samples of similar length together (train_sampling_strategy=group_by_length): "
            "less padding, a different data order",
            changes_semantics=True,
            available=availability.group_by_length_rule,
        ),
        Knob(
            "dataloader_num_workers",
            "args",
            "count",
            "data loader worker processes (0 loads in the training process)",
            label="workers",
            measured_kind=True,
        ),
        Knob(
            "dataloader_pin_memory",
            "args",
            "bool",
            "page-locked host memory for faster copies to the GPU",
            label="pin",
            available=availability.pin_memory_rule,
        ),
        Knob(
            "torch_empty_cache_steps",
            "args",
            "count",
            "empty the device cache every N steps (0: never): less fragmentation, some speed",
            label="empty_cache",
            available=availability.empty_cache_rule,
        ),
        Knob(
            "data_parallel",
            "args",
            "choice",
            "how ranks share the model: ddp (replicated), fsdp_full_shard / fsdp_shard_grad_op (FSDP2), "
            "zero1-3 (DeepSpeed): sharding lowers each rank's peak, communication costs speed",
            choices=STRATEGIES,
            ranks_only=True,
            measured_kind=True,
            available=availability.strategy_rule,
        ),
        Knob(
            "ddp_find_unused_parameters",
            "args",
            "bool",
            "DDP walks the autograd graph every step for parameters without gradients (Trainer: on "
            "unless checkpointing); off is faster, and fails for a model that really has unused ones",
            ranks_only=True,
            requires=("data_parallel", ("ddp",)),
            label="ddp_unused",
        ),
        Knob(
            "ddp_bucket_cap_mb",
            "args",
            "int",
            "DDP gradient bucket size in MiB (torch: 25): larger buckets, fewer all-reduces, less overlap",
            ranks_only=True,
            requires=("data_parallel", ("ddp",)),
            label="ddp_bucket",
        ),
        Knob(
            "ddp_static_graph",
            "args",
            "bool",
            "DDP assumes the same graph every step: caches its bucketing, skips the unused-parameter search",
            ranks_only=True,
            requires=("data_parallel", ("ddp",)),
            label="ddp_static",
        ),
        Knob(
            "ddp_broadcast_buffers",
            "args",
            "bool",
            "DDP copies rank 0's buffers to every rank before each forward (torch: on)",
            ranks_only=True,
            requires=("data_parallel", ("ddp",)),
            label="ddp_bcast",
        ),
    )
}

# --- GPU-only knobs and per-batch padding ---------------------------------------------------------
# What a model's weights are loaded as: as the config or checkpoint says (`as_is`), in bf16 (pure
# bf16 training: weights, gradients and optimizer states), or quantized to 4 bits by bitsandbytes
# with bf16 compute, QLoRA's base (frozen: only adapters train on it).
BASE_WEIGHTS = ("as_is", "bf16", "4bit")
CATALOGUE.update(
    {
        k.name: k
        for k in (
            Knob(
                "base_weights",
                "model",
                "choice",
                "what the weights are loaded as: as_is (the config's dtype), bf16 (pure bf16 training), "
                "4bit (bitsandbytes NF4, QLoRA's frozen base: CUDA GPU, adapters only)",
                choices=BASE_WEIGHTS,
                changes_semantics=True,
                label="weights",
                measured_kind=True,
                available=availability.base_weights_rule,
                runs_on=(("4bit", "CUDA GPU with bitsandbytes, under adapters (--peft)"),),
            ),
            Knob(
                "use_liger_kernel",
                "args",
                "bool",
                "Liger's fused Triton kernels (RMSNorm, RoPE, SwiGLU, fused linear cross-entropy): "
                "less memory, speed measured (CUDA GPU, liger-kernel, supported model types)",
                label="liger",
                measured_kind=True,
                available=availability.liger_rule,
                runs_on=((True, "CUDA GPU with liger-kernel, for the model types it patches"),),
            ),
            Knob(
                "packing",
                "args",
                "bool",
                "TRL SFTConfig: pack several samples into each max_length row (no padding); the batches "
                "hold other samples than unpacked ones, which changes the math (SFTTrainer only)",
                changes_semantics=True,
                label="pack",
                measured_kind=True,
                available=availability.packing_rule,
            ),
            Knob(
                "activation_offloading",
                "args",
                "bool",
                "TRL SFTConfig: keep activations in CPU memory until the backward pass: less GPU "
                "memory, speed measured (SFTTrainer on a CUDA GPU only)",
                label="offload",
                measured_kind=True,
                available=availability.activation_offloading_rule,
                runs_on=((True, "CUDA GPU, TRL SFTTrainer"),),
            ),
            Knob(
                "pad_to_multiple_of",
                "data",
                "int",
                "round each padded batch's length up to a multiple (1: the longest sample): fewer "
                "shapes for a compiled model, aligned tensor cores; per-batch padded data only",
                label="pad_to",
                measured_kind=True,
                available=availability.pad_multiple_rule,
            ),
        )
    }
)

# DistributedDataParallel's own settings: TrainingArguments fields whose default (None) leaves them
# to the Trainer and torch.
DDP_KNOBS = tuple(name for name, knob in CATALOGUE.items() if knob.ranks_only and name.startswith("ddp_"))

# TRL `SFTConfig` fields: they exist on an `SFTTrainer`'s arguments only (the `trl` space).
SFT_KNOBS = ("packing", "activation_offloading")


def optimizer_family(optim: str) -> str:
    """The update rule an optimizer name implements (see `OPTIMIZER_FAMILY`)."""
    return OPTIMIZER_FAMILY.get(optim, optim)


# The knobs whose values are part of a configuration's kind for the memory estimate, beside the
# probe's kind: what changes a configuration's peak that the probe does not try (the data-loader
# workers are processes of their own, which the peak counts; a sharding strategy's gathered layers
# and buffers are not static bytes; fused kernels, the weights' format, a batch's padded length).
MEASURED_KIND_KNOBS = tuple(name for name, knob in CATALOGUE.items() if knob.measured_kind)


def short_name(name: str) -> str:
    """The short column name of a knob in tables and trial lines (its `Knob.label`)."""
    knob = CATALOGUE.get(name)
    return knob.label if knob is not None and knob.label else name


# Where the GPU-only values run, for `autotune knobs` (each knob's rule says why not, value by value).
RUNS_ON: dict[tuple[str, object], str] = {
    (knob.name, value): where for knob in CATALOGUE.values() for value, where in knob.runs_on
}


def value_unavailable(knob: str, value: object, hw: Hardware, model: ModelSupport) -> str | None:
    """Why one knob value cannot run here (None if it can). Rules on a single value only."""
    found = CATALOGUE.get(knob)
    rule = found.available if found is not None else None
    return rule(value, hw, model) if rule is not None else None


def combination_unavailable(
    values: Mapping[str, object], hw: Hardware, model: ModelSupport
) -> tuple[str, str] | None:
    """The first knob of a trial that cannot run here, with the reason; None if all can.

    Single-value rules first, then rules on combinations.
    """
    for knob, value in values.items():
        reason = value_unavailable(knob, value, hw, model)
        if reason is not None:
            return knob, reason
    precision = values.get("precision", "fp32")
    if values.get("attn_implementation") == "flash_attention_2" and precision in ("fp32", "tf32"):
        return (
            "attn_implementation",
            "flash_attention_2 runs in fp16 or bf16 only, not with precision " + str(precision),
        )
    multiple = values.get("pad_to_multiple_of", 1)
    if isinstance(multiple, int) and multiple > 1 and values.get("padding_free"):
        return ("pad_to_multiple_of", "padding-free batches are one flattened row: no padding to round up")
    return availability.sft_combination(values, model)
