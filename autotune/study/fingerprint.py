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
from typing import Any

from autotune.errors import UsageError
from autotune.plan.resolved import Plan

# A difference here leaves the stored measurements meaningful (a new library patch release, a
# different cap: feasibility is recomputed from the stored peaks).
SAFE_TO_OVERRIDE = ("autotune_version", "torch", "transformers", "cuda", "driver", "memory_cap")


def fingerprint(plan: Plan) -> dict[str, Any]:
    """The fingerprint of a planned run (imports torch and transformers for their versions)."""
    import torch
    import transformers

    from autotune import __version__

    hardware = plan.hardware
    return {
        "model": plan.workload.name,
        "model_config_hash": plan.workload.config_hash(),
        "task": plan.workload.task,
        "seq_len": plan.workload.seq_len,
        "dataset": plan.workload.dataset_identity(),
        "device": hardware.name,
        "device_count": hardware.count,
        "device_memory_bytes": hardware.memory_bytes,
        "cuda": torch.version.cuda if hardware.cuda else None,
        "driver": _driver_version() if hardware.cuda else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "space": plan.space.fingerprint(),
        "base_args": _hash(plan.base_args),
        "memory_cap": plan.config.memory_cap,
        "autotune_version": __version__,
    }


def differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, stored value, current value) for every field that differs."""
    return [
        (key, stored.get(key), current.get(key))
        for key in sorted(set(stored) | set(current))
        if stored.get(key) != current.get(key)
    ]


def check_resume(
    study_name: str, stored: Mapping[str, Any], current: Mapping[str, Any], allowed: Iterable[str]
) -> list[str]:
    """Refuse to resume a study whose fingerprint differs, except in `allowed` safe fields.

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
            f"--allow-mismatch {unsafe[0]} is not allowed: measurements for another {unsafe[0]} "
            "are not comparable",
            f"only {', '.join(SAFE_TO_OVERRIDE)} can be overridden; start a new study with --study NAME",
        )
    diffs = differences(stored, current)
    blocking = [d for d in diffs if d[0] not in allowed]
    if blocking:
        described = "; ".join(f"{field}: stored {old!r}, now {new!r}" for field, old, new in blocking)
        safe = [field for field, _, _ in blocking if field in SAFE_TO_OVERRIDE]
        hint = "use a new --study name"
        if safe and len(safe) == len(blocking):
            hint += f", or --allow-mismatch {' --allow-mismatch '.join(safe)} to continue it anyway"
        raise UsageError(f"study {study_name!r} was measured differently ({described})", hint)
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
