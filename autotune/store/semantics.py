"""What an answer changes in the training math, compared with the baseline.

Speed-only knobs (compile, attention kernel, fused vs plain AdamW, checkpointing, data loading)
leave the math alone. Precision, the optimizer's update rule and the effective batch size do not:
a user adopting the answer must know, and usually retune something. The same changes decide what
the loss guard judges (`loss_compared`). Pure: reads stored values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from autotune.records import StudyRecord, TrialRecord
from autotune.space import precision_of
from autotune.space.defaults import base_knobs
from autotune.space.knobs import optimizer_family

BATCH, ACCUM = "per_device_train_batch_size", "gradient_accumulation_steps"
# The changes (`SemanticChange.what`) that alter which samples an optimizer step trains on.
EFFECTIVE_BATCH, DATA_ORDER = "effective batch per device", "data order"
# TRL's SFTConfig packing: several samples per row, so a batch holds other samples.
PACKING = "packing"
# The TrainingArguments knobs the math depends on (the base weights' format is a model kwarg).
MATH_KNOBS = (BATCH, ACCUM, "precision", "optim", "group_by_length")


@dataclass(frozen=True)
class SemanticChange:
    """One difference from the baseline that changes training, with what to do about it."""

    what: str
    baseline: str
    chosen: str
    hint: str

    def text(self) -> str:
        return f"{self.what}: {self.baseline} -> {self.chosen} ({self.hint})"

    def to_dict(self) -> dict[str, str]:
        return {**asdict(self), "text": self.text()}


def baseline_math(study: StudyRecord) -> dict[str, Any]:
    """The baseline's batch split, precision and optimizer: the measured baseline's values, else
    what the base config (or the `TrainingArguments` defaults) amounts to."""
    base = base_knobs(study.base_args)
    derived = {k: base[k] for k in MATH_KNOBS}
    if PACKING in base:  # an SFTConfig's (tune() on a TRL SFTTrainer)
        derived[PACKING] = base[PACKING]
    measured = study.baseline.params
    return {**derived, **{k: v for k, v in measured.items() if k in derived}}


def semantic_changes(baseline: Mapping[str, Any], chosen: Mapping[str, Any]) -> list[SemanticChange]:
    """The differences of `chosen` knob values from `baseline` that change the training math.

    A knob missing from `chosen` was not searched: the trial ran it at the baseline's value.
    """
    merged = {**baseline, **chosen}
    changes: list[SemanticChange] = []
    if merged["precision"] != baseline["precision"]:
        changes.append(
            SemanticChange(
                "precision",
                str(baseline["precision"]),
                str(merged["precision"]),
                "different rounding of activations and gradients: compare the loss curve with a "
                f"short {baseline['precision']} run before adopting it",
            )
        )
    old_family, new_family = optimizer_family(str(baseline["optim"])), optimizer_family(str(merged["optim"]))
    if old_family != new_family:
        changes.append(
            SemanticChange(
                "optimizer",
                f"{baseline['optim']} ({old_family})",
                f"{merged['optim']} ({new_family})",
                "a different update rule: retune the learning rate and schedule, or search with "
                "--keep-semantics",
            )
        )
    old_batch = int(baseline[BATCH]) * int(baseline[ACCUM])
    new_batch = int(merged[BATCH]) * int(merged[ACCUM])
    if old_batch != new_batch:
        ratio = new_batch / old_batch
        changes.append(
            SemanticChange(
                EFFECTIVE_BATCH,
                f"{old_batch} ({baseline[BATCH]} x {baseline[ACCUM]} accumulation)",
                f"{new_batch} ({merged[BATCH]} x {merged[ACCUM]} accumulation), {ratio:.2f}x",
                f"scale the learning rate by {ratio:.2f}x (linear rule; {ratio**0.5:.2f}x by the "
                f"square-root rule), and divide the number of steps by {ratio:.2f} for the same "
                "epochs; or fix it with --global-batch-size",
            )
        )
    weights = str(baseline.get("base_weights", "as_is")), str(merged.get("base_weights", "as_is"))
    if weights[0] != weights[1]:
        changes.append(
            SemanticChange(
                "base weights",
                weights[0],
                weights[1],
                "weights stored in another format: bf16 rounds every update (no fp32 master copy), "
                "4-bit freezes a quantized base under adapters; compare the loss curve with a short "
                "run before adopting it",
            )
        )
    if bool(merged.get("group_by_length")) != bool(baseline.get("group_by_length")):
        order = {True: "grouped by length", False: "as sampled"}
        changes.append(
            SemanticChange(
                DATA_ORDER,
                order[bool(baseline.get("group_by_length"))],
                order[bool(merged.get("group_by_length"))],
                "batches of similar-length samples: the loss curve is noisier per step; compare it with "
                "a short run before adopting it",
            )
        )
    if bool(merged.get(PACKING)) != bool(baseline.get(PACKING)):
        rows = {True: "packed rows", False: "one sample per row"}
        changes.append(
            SemanticChange(
                PACKING,
                rows[bool(baseline.get(PACKING))],
                rows[bool(merged.get(PACKING))],
                "a batch holds another number of samples, a step trains on other tokens: retune the "
                "learning rate and the steps; compare the loss curve with a short run before adopting it",
            )
        )
    return changes


def loss_compared(changes: Iterable[SemanticChange]) -> bool:
    """Whether a configuration's loss is judged against the baseline's at equal tokens
    (`autotune.trial.judge`): unless one of its `changes` alters which samples an optimizer step
    trains on (packing
    included). A changed effective batch has taken fewer (or more) optimizer steps at equal tokens,
    at a learning rate tuned for the baseline's batch, and a changed data order has trained on
    other samples: their loss differs by construction, not by numerics. The answer names both
    changes and how to adapt the learning rate; precision and the optimizer are judged."""
    return not any(change.what in (EFFECTIVE_BATCH, DATA_ORDER, PACKING) for change in changes)


def record_changes(study: StudyRecord, trial: TrialRecord) -> list[SemanticChange]:
    """`study_changes` of a trial's record."""
    return study_changes(study, trial.params, trial.training_args)


def study_changes(
    study: StudyRecord, params: Mapping[str, Any], training_args: Mapping[str, Any] | None = None
) -> list[SemanticChange]:
    """`semantic_changes` of a configuration of a study (its sampled `params`, and the
    `training_args` it applied, which hold values derived from them, such as the accumulation
    under a fixed global batch) against the study's baseline."""
    applied = dict(training_args or {})
    chosen = {k: v for k, v in params.items() if k in (*MATH_KNOBS, "base_weights", PACKING)}
    chosen.update({k: applied[k] for k in (BATCH, ACCUM, "optim") if k in applied})
    if "precision" not in chosen and any(k in applied for k in ("bf16", "fp16", "tf32")):
        chosen["precision"] = precision_of(applied)
    return semantic_changes(baseline_math(study), chosen)
