"""A TRL `SFTTrainer`'s trial: what `SFTTrainer.__init__` derives from its `SFTConfig`, redone with
the trial's config (the trial Trainer skips that ``__init__``: `autotune.trial.compose`).

Before the model is built (`trial_rows`, `prepare_trial`): padding-free (TRL's own collator flag, from the
``padding_free`` knob or a best-fit packing), the collator, the dataset packed by TRL's own
``_prepare_dataset`` when the trial packs, and Liger's kernels without their fused cross-entropy
(which would drop TRL's fused LM head). Once it is built (`patch_model`): TRL's fused LM head on
that model, and activation offloading around its steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from autotune.space.defaults import sft_padding_free
from autotune.space.knobs import Value
from autotune.workloads.data import Cycled
from autotune.workloads.sft import sft_data_args
from autotune.workloads.user import UserWorkload


def prepare_trial(trainer: Any, workload: UserWorkload, choices: dict[str, Value]) -> None:
    """Set `trainer`'s collator and Liger's settings for its trial's `SFTConfig` (``trainer.args``,
    rebuilt already) and the trial's data knobs (`choices`)."""
    args = trainer.args
    for name, value in sft_data_args(type(args), choices).items():
        setattr(args, name, value)
    if args.use_liger_kernel:
        args.liger_kernel_config = {**(args.liger_kernel_config or {}), "fused_linear_cross_entropy": False}
    trainer.padding_free = sft_padding_free(vars(args))
    pieces = workload.sft
    if pieces is not None and pieces.own_collator:
        trainer.data_collator = dataclasses.replace(
            workload.data_collator,
            padding_free=trainer.padding_free,
            pad_to_multiple_of=args.pad_to_multiple_of,
        )


def trial_rows(trainer: Any, workload: UserWorkload) -> tuple[Any, list[int] | None]:
    """The trial's training rows, read in a loop: the user's, or packed by TRL's own
    ``_prepare_dataset`` where the trial packs and their config did not; with each row's length
    where they differ (None: packed rows, all ``max_length`` long)."""
    args, pieces = trainer.args, workload.sft
    if args.packing and pieces is not None and not pieces.packed and not trainer._skip_prepare_dataset:
        prepare = trainer._prepare_dataset  # TRL's own packing, as SFTTrainer.__init__ runs it
        rows = workload.train_dataset
        packed = prepare(rows, trainer.processing_class, args, True, trainer._formatting_func, "train")
        return Cycled(packed), None
    return Cycled(workload.train_dataset), workload.sample_lengths()


def patch_model(trainer: Any, model: Any) -> Any:
    """`model` (the trial's, fresh) with TRL's fused LM head, which `SFTTrainer.compute_loss`
    calls, and `trainer`'s activation-offloading context for it."""
    from trl.models import get_act_offloading_ctx_manager
    from trl.trainer.utils import add_fused_lm_head

    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    add_fused_lm_head(base, outputs=("log_probs", "entropy", "is_top1"))
    offloading = trainer.args.activation_offloading
    trainer.maybe_activation_offload_context = (
        get_act_offloading_ctx_manager(model=model) if offloading else contextlib.nullcontext()
    )
    return model
