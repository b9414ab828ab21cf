"""A run resolved once against this machine (`Plan`), and what follows from it alone: the baseline's
knob values, the `TrainingArguments` every trial starts from, what to say about the data. Read by
the search (the supervisor) and by every trial process alike; built by `autotune.plan.build`."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.measure.memory_model import dtype_name
from autotune.options import RunConfig
from autotune.space import SearchSpace
from autotune.space.availability import Hardware, ModelSupport
from autotune.space.defaults import knob_defaults
from autotune.space.knobs import CATALOGUE
from autotune.store.fingerprint import Fingerprint, fingerprint

if TYPE_CHECKING:  # the workload module imports torch; a plan's readers need not
    from autotune.workloads.workload import Workload


@dataclass
class Plan:
    """A run resolved against this machine: everything the trials need, decided once."""

    config: RunConfig
    space: SearchSpace
    workload: Workload
    hardware: Hardware
    model: ModelSupport
    base_args: dict[str, Any]
    study_name: str
    storage: Any
    not_searched: list[str] = dataclasses.field(default_factory=list)
    cap_bytes: int | None = None


def study_fingerprint(plan: Plan) -> Fingerprint:
    """What the plan's measurements are measurements of (`autotune.store.fingerprint`): stored
    with its study, compared on resume (imports torch and transformers for their versions)."""
    return fingerprint(
        workload=plan.workload,
        hardware=plan.hardware,
        space=plan.space,
        base_args=plan.base_args,
        memory_cap=plan.config.memory_cap,
    )


def trial_world_size(config: RunConfig) -> int:
    """Processes that train each trial together: the supervisor's torchrun groups
    (``--nproc-per-node``), or the launcher this process runs under (``WORLD_SIZE``)."""
    if config.nproc_per_node > 1:
        return config.nproc_per_node
    return int(os.environ.get("WORLD_SIZE", "1"))


def data_notes(plan: Plan, world_size: int = 1) -> list[str]:
    """What the user should know about the data: a dataset shorter than a trial is cycled."""
    data = plan.workload.data
    if data is None:
        return []
    space, base = plan.space, plan.base_args

    def largest(knob: str, default: int) -> int:
        values = space.knobs.get(knob) or [space.fixed.get(knob, base.get(knob, default))]
        return max(int(v) for v in values)

    if space.global_batch is not None:
        most = space.global_batch
    else:
        most = (
            largest("per_device_train_batch_size", 8) * largest("gradient_accumulation_steps", 1) * world_size
        )
    needed = most * plan.config.measure.step_budget
    if len(data) >= needed:
        return [f"dataset: {len(data):,} samples ({plan.workload.dataset_identity()})"]
    return [
        f"dataset: {len(data):,} samples, fewer than the {needed:,} a trial may read: it is cycled "
        "(samples repeat; throughput does not depend on their content)"
    ]


def weights_notes(plan: Plan) -> list[str]:
    """What the user should know about the weights: a config saved in half precision (``torch_dtype``
    bfloat16 or float16, as many hub models' are) is built and loaded in it by transformers, random
    weights and `--pretrained` alike, so every trial trains half-precision weights."""
    half = dtype_name(getattr(plan.workload.config, "dtype", None))
    if half == "fp32":
        return []
    return [
        f"weights: {half}, the model config's dtype (transformers builds and loads them in it): every "
        f"trial trains {half} weights, gradients and optimizer states; precision fp32 means no "
        "autocast, not fp32 weights"
    ]


def baseline_values(plan: Plan) -> dict[str, Any]:
    """The knob values a user gets without autotune: the base config, else the Transformers
    defaults (what `TrainingArguments()` and `from_pretrained` pick on this machine)."""
    values = knob_defaults(
        plan.base_args,
        sdpa=plan.model.sdpa,
        cuda=plan.hardware.cuda,
        args_class=plan.workload.args_class,
    )
    if trial_world_size(plan.config) > 1:
        return values
    return {name: value for name, value in values.items() if not CATALOGUE[name].ranks_only}


def base_training_args(plan: Plan, output_dir: str) -> dict[str, Any]:
    """`TrainingArguments` kwargs every trial starts from: the user's base config, then what a
    throughput trial needs (train only; save, evaluate and log nothing)."""
    return {
        **plan.base_args,
        "output_dir": output_dir,
        "max_steps": plan.config.measure.step_budget,
        "report_to": "none",
        "save_strategy": "no",
        "eval_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        # Keep NaN/inf in the reported loss: a trial that diverges must not look healthy.
        "logging_nan_inf_filter": False,
        # Synthetic samples are already random; a sequential sampler costs nothing to build.
        "train_sampling_strategy": "sequential",
        "seed": plan.config.seed,
        # Without a GPU, TrainingArguments refuses bf16 unless told the CPU is meant.
        "use_cpu": not plan.hardware.cuda,
        "ddp_timeout": int(plan.config.ddp_timeout_s),
    }
