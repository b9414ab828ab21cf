"""A trial's memory estimate, made with what its study knows, and the batch ladder it decides.

The estimate of a trial (`autotune.measure.estimator.MemoryEstimator`) learns from the study
first: the per-sample activation bytes earlier processes probed (kept with the study, so that a
kind is probed once a study) and the measured peaks of its finished trials. The batch ladder
(`batch_ladder`) keeps the larger batch sizes whose most frugal configuration fits.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from autotune.measure.estimator import MemoryEstimator
from autotune.measure.memory_model import (
    SAFETY_MARGIN,
    LadderProbe,
    MemoryEstimate,
    fitting_rungs,
    relative_error,
)
from autotune.measure.peak import release_device_memory
from autotune.plan.resolved import Plan
from autotune.records import TrialRecord, add_activation_probes, read_study

# The knobs the memory estimate reads besides the batch (`MemoryEstimator.estimate`).
MEMORY_KNOBS = ("precision", "optim", "attn_implementation", "activation_checkpointing")


def estimate_memory(estimator: MemoryEstimator, values: Mapping[str, Any]) -> MemoryEstimate | None:
    """The estimate of a configuration; None when it cannot be made (it must not cost the trial)."""
    try:
        estimator.refresh_baseline()
        return estimator.estimate(values)
    except Exception:
        return None


def estimate_in_study(
    estimator: MemoryEstimator, study: Any, finished: Sequence[Any], values: Mapping[str, Any]
) -> MemoryEstimate | None:
    """The estimate of a trial of `study` (a `StudyStore`, or None outside one), made with the
    activations earlier processes probed and the peaks its `finished` trials' records measured;
    what this process newly probed is kept with the study for the next ones."""
    stored = dict(read_study(study).activation_probes or {}) if study is not None else {}
    estimator.learn_activations(stored)
    estimator.learn_peaks(finished)
    estimate = estimate_memory(estimator, values)
    known = estimator.known_activations()
    if study is not None and (new := {kind: known[kind] for kind in known.keys() - stored.keys()}):
        add_activation_probes(study, new)
    return estimate


def with_estimate(record: TrialRecord, estimate: MemoryEstimate | None) -> TrialRecord:
    """A trial's record with the estimate made before it ran, and its error against the measured
    peak (when there is one)."""
    if estimate is None:
        return record
    peak = record.peak_memory_bytes
    memory = replace(
        record.memory,
        estimate_bytes=estimate.total_bytes,
        estimate=estimate.to_dict(),
        estimate_error=relative_error(estimate.total_bytes, peak) if peak else record.memory.estimate_error,
    )
    return replace(record, memory=memory)


def batch_ladder(
    estimator: MemoryEstimator, plan: Plan, candidates: Sequence[int]
) -> tuple[list[int], LadderProbe | None]:
    """The leading `candidates` (larger batch sizes) that fit, and the probe that decided one
    (`fitting_rungs`): the memory estimate of the space's most frugal configuration at that batch
    (over its attention kernels, precisions and checkpointing choices) is under the memory cap, or
    without one under the device's memory less the estimate's safety margin; the first batch whose
    estimate is in doubt is measured once in a real forward and backward."""
    limit = plan.cap_bytes or int(plan.hardware.memory_bytes / (1 + SAFETY_MARGIN))
    # Every combination of the values the estimate reads (not the whole grid: thousands of points).
    space = plan.space
    knobs = [name for name in MEMORY_KNOBS if name in space.knobs]
    combos = itertools.product(*(space.knobs[name] for name in knobs))
    points = [dict(zip(knobs, values, strict=True)) for values in combos]
    frugal: dict[int, dict[str, Any]] = {}

    def smallest(batch: int) -> int | None:
        found: list[tuple[int, dict[str, Any]]] = []
        for point in points:
            values = {**point, "per_device_train_batch_size": batch}
            estimate = estimate_memory(estimator, values)
            if estimate is not None:
                found.append((estimate.total_bytes, values))
        if not found:
            return None
        total, frugal[batch] = min(found, key=lambda pair: pair[0])
        return total

    def probe(batch: int) -> int | None:
        try:
            return estimator.probe(frugal[batch])
        except Exception:  # a probe that cannot run (out of memory, say) means it does not fit
            return None
        finally:
            release_device_memory()

    rungs, probed = fitting_rungs(candidates, smallest, limit, probe)
    if probed is None:
        return rungs, None
    batch = probed["batch"]
    return rungs, LadderProbe(
        batch, probed["estimated_bytes"], probed["measured_bytes"], frugal[batch], limit
    )
