"""A study's fingerprint: what its measurements are measurements of.

Stored with the study when it is created; resuming compares it with the run at hand and refuses a
mismatch, because throughput measured for another model, sequence length, device or space is not
comparable. Fields where a difference does not invalidate the stored trials can be let through
explicitly with ``--allow-mismatch FIELD``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.errors import UsageError
from autotune.records.keys import ByName
from autotune.space import SearchSpace
from autotune.space.availability import Hardware

if TYPE_CHECKING:  # the workload module imports torch
    from autotune.workloads.workload import Workload

# A difference here leaves the stored measurements meaningful (a new library patch release, a
# different cap: feasibility is recomputed from the stored peaks).
SAFE_TO_OVERRIDE = ("autotune_version", "torch", "transformers", "cuda", "driver", "memory_cap")


@dataclass(frozen=True)
class Fingerprint(ByName):
    """What a study's measurements are measurements of, stored as its dict (`to_dict`: the keys
    every store has held, in their order; a field an older store lacks reads as None).

    Attributes:
        model, model_config_hash, task, seq_len, dataset: the workload (the model as the user
            named it, a hash of its config, the task, tokens per sample, the data's identity).
        peft: a hash of the adapter trained (None: every weight).
        device, device_count, device_memory_bytes: the hardware.
        cuda, driver, torch, transformers, autotune_version: the software (CUDA's and the driver's
            None off CUDA).
        space: the space's fingerprint (`SearchSpace.fingerprint`).
        base_args: a hash of the base `TrainingArguments`.
        memory_cap: the cap as the user wrote it.
    """

    model: str | None = None
    model_config_hash: str | None = None
    task: str | None = None
    seq_len: int | None = None
    dataset: str | None = None
    # the adapter trained (None: every weight; absent from older stores, read as None)
    peft: str | None = None
    device: str | None = None
    device_count: int | None = None
    device_memory_bytes: int | None = None
    cuda: str | None = None
    driver: str | None = None
    torch: str | None = None
    transformers: str | None = None
    space: str | None = None
    base_args: str | None = None
    memory_cap: str | None = None
    autotune_version: str | None = None


def fingerprint(
    *,
    workload: Workload,
    hardware: Hardware,
    space: SearchSpace,
    base_args: Mapping[str, Any],
    memory_cap: str | None,
) -> Fingerprint:
    """The fingerprint of a run: its workload, the hardware it runs on, its space, base
    `TrainingArguments` and memory cap as given (a planned run's is
    `autotune.plan.resolved.study_fingerprint`). Imports torch and transformers for their versions."""
    import torch
    import transformers

    from autotune import __version__

    return Fingerprint(
        model=workload.name,
        model_config_hash=workload.config_hash(),
        task=workload.task,
        seq_len=workload.seq_len,
        dataset=workload.dataset_identity(),
        peft=_hash(workload.peft) if workload.peft else None,
        device=hardware.name,
        device_count=hardware.count,
        device_memory_bytes=hardware.memory_bytes,
        cuda=torch.version.cuda if hardware.cuda else None,
        driver=_driver_version() if hardware.cuda else None,
        torch=torch.__version__,
        transformers=transformers.__version__,
        space=space.fingerprint(),
        base_args=_hash(base_args),
        memory_cap=memory_cap,
        autotune_version=__version__,
    )


# The memory a machine reports moves a little between boots (the kernel's own reservations: 8 KiB
# between two boots of one VM here): a difference under this fraction is the same machine.
MEMORY_TOLERANCE = 0.01


def differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, stored value, current value) for every field that differs (the device's memory
    only by more than `MEMORY_TOLERANCE`)."""
    return [
        (key, stored.get(key), current.get(key))
        for key in sorted(set(stored) | set(current))
        if stored.get(key) != current.get(key) and not _same_memory(key, stored.get(key), current.get(key))
    ]


def _same_memory(key: str, stored: Any, current: Any) -> bool:
    if key != "device_memory_bytes" or not isinstance(stored, int) or not isinstance(current, int):
        return False
    return abs(stored - current) <= MEMORY_TOLERANCE * max(stored, current)


def check_resume(
    study_name: str,
    stored: Mapping[str, Any],
    current: Fingerprint,
    allowed: Iterable[str],
) -> list[str]:
    """Refuse to resume a study whose fingerprint differs, except in `allowed` safe fields
    (`stored`: as the study holds it, every key it has compared).

    Returns:
        The fields that differ but were allowed.

    Raises:
        UsageError: an unexplained difference (naming the fields and how to proceed), or an
            allowance asked for a field that cannot be overridden.
    """
    allowed = set(allowed)
    unsafe = sorted(allowed - set(SAFE_TO_OVERRIDE))
    if unsafe:
        raise UsageError(
            f"allow_mismatch={(unsafe[0],)!r} is not allowed: measurements for another {unsafe[0]} "
            "are not comparable",
            f"only {', '.join(SAFE_TO_OVERRIDE)} can be overridden; or name a new one with study=NAME",
            field=("allow_mismatch", "study"),
        )
    diffs = differences(stored, current.to_dict())
    blocking = [d for d in diffs if d[0] not in allowed]
    if blocking:
        described = "; ".join(f"{field}: stored {old!r}, now {new!r}" for field, old, new in blocking)
        safe = [field for field, _, _ in blocking if field in SAFE_TO_OVERRIDE]
        hint = "give a new name with study=NAME"
        if safe and len(safe) == len(blocking):
            hint += f", or allow_mismatch={tuple(safe)!r} to continue it anyway"
        raise UsageError(
            f"study={study_name!r} was measured differently ({described})",
            hint,
            field=("study", "allow_mismatch"),
        )
    return [field for field, _, _ in diffs]


def _hash(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(dict(data), sort_keys=True, default=str).encode()).hexdigest()[:16]


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return None
