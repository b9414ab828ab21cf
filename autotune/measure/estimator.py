"""Gathers what the memory estimate needs: the parameter count and, once per kind of activation
(attention kernel, fp32 or half precision, checkpointing), the activation memory per sample from
one forward and backward pass at a small batch on the trial device.

The probe runs eager: what `torch.compile` fuses away, a padding-free batch's fewer tokens, or the
CUDA graphs of a compile mode are not in it. Once trials have trained, their measured peaks say what
the probe cannot: a configuration of a kind (the probe's, with the compile backend and mode,
padding-free batches, data-loader workers and the data-parallel strategy) that a trial has measured
is estimated from the measured peaks of that kind (`activations_from_peaks`), the probe's figure
kept beside it."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from autotune.measure.memory_model import (
    DTYPE_BYTES,
    MeasuredPeak,
    MemoryEstimate,
    activations_from_peaks,
    dtype_name,
    estimate_memory,
    precision_class,
)
from autotune.measure.peak import PeakMemoryMeter, release_device_memory, rss_bytes
from autotune.records import TrialRecord
from autotune.space.availability import model_support
from autotune.space.defaults import base_knobs, default_attention
from autotune.space.knobs import MEASURED_KIND_KNOBS
from autotune.workloads.workload import Workload

PROBE_BATCH = 2


class MemoryEstimator:
    """Estimates the peak memory of trial configurations of one workload on one device.

    Args:
        workload: the model and data.
        device: ``"cuda"`` or ``"cpu"``.
        base_args: the base `TrainingArguments` kwargs (precision and optimizer when a space does
            not search them).
        world_size: DDP processes per trial (each holds gradient buckets beside its gradients).
    """

    def __init__(
        self,
        workload: Workload,
        device: str,
        base_args: Mapping[str, Any] | None = None,
        world_size: int = 1,
    ) -> None:
        self.workload = workload
        self.world_size = world_size
        self.device = device
        self.base_args = dict(base_args or {})
        self._activations: dict[tuple[str, str, int], float] = {}
        self._peaks: dict[tuple[Any, ...], dict[int, MeasuredPeak]] = {}
        self._baseline: int | None = None

    @functools.cached_property
    def defaults(self) -> dict[str, Any]:
        """The knob values of the base config, for the knobs a trial does not set (the attention
        kernel is the model's default: sdpa where the model class supports it)."""
        attention = default_attention(model_support(self.workload.model_class()).sdpa)
        return {**base_knobs(self.base_args), "attn_implementation": attention}

    @functools.cached_property
    def _parameters(self) -> tuple[int, str, int]:
        model = self.workload.build_placeholder({})  # no storage, nothing read from disk
        if model is None:  # a user's own model
            with torch.device("meta"):
                model = self.workload.build_model({})
        count, dtype = parameter_count(model)
        return count, dtype, trainable_count(model)

    @property
    def n_params(self) -> int:
        """Every parameter of the model a trial trains, frozen ones included."""
        return self._parameters[0]

    @property
    def trainable_params(self) -> int:
        """The parameters that get gradients and optimizer states: all of them in a full
        fine-tune, the adapter's under peft (its base weights frozen)."""
        return self._parameters[2]

    @property
    def weights_dtype(self) -> str:
        """What the model's weights are stored as (``fp32``, ``bf16``, ``fp16``): the config's
        dtype, which gradients and optimizer states follow."""
        return self._parameters[1]

    def estimate(self, values: Mapping[str, Any]) -> MemoryEstimate:
        """The estimate for a trial's knob values (missing knobs come from the base config)."""
        chosen = {**self.defaults, **values}
        precision = str(chosen["precision"])
        batch = int(chosen["per_device_train_batch_size"])
        attention, _, checkpointing = _probe_kind(chosen)
        per_sample = self.activation_bytes_per_sample(attention, precision, checkpointing)
        estimate = self._arithmetic(chosen, per_sample)
        peaks = list(self._peaks.get(_measured_kind(chosen), {}).values())
        measured = activations_from_peaks(peaks, batch, per_sample)
        if measured is None:
            return estimate
        activation_bytes, trials = measured
        return dataclasses.replace(
            estimate,
            activation_bytes=activation_bytes,
            measured_from=trials,
            probe_activation_bytes=estimate.activation_bytes,
        )

    def learn_peaks(self, trials: Iterable[TrialRecord]) -> None:
        """Take the measured peaks of finished trials of this device kind: each that trained, with
        its peak and the estimate it was stored with (whose baseline and static bytes come off the
        peak; what its child processes held, data-loader and compile workers, stays in it); a trial
        that reused another's result is that trial's peak, not a second one."""
        for trial in trials:
            estimate = trial.memory.estimate or {}
            peak = trial.peak_memory_bytes
            if not peak or trial.reused or "baseline_bytes" not in estimate:
                continue
            if _peak_device(trial.memory.source) != self.device:
                continue
            number = trial.number
            chosen = {**self.defaults, **trial.params}
            batch = int(chosen["per_device_train_batch_size"])
            activations = int(peak) - int(estimate["baseline_bytes"]) - int(estimate["static_bytes"])
            peak_of_kind = self._peaks.setdefault(_measured_kind(chosen), {})
            peak_of_kind[number] = MeasuredPeak(number, batch, activations)

    def refresh_baseline(self) -> None:
        """Measure the baseline again before the next estimate: a process's baseline grows as
        compiled kernels and caches accumulate over trials."""
        self._baseline = None

    @property
    def baseline_bytes(self) -> int:
        """What the process holds before any model: libraries on CPU, the CUDA context on GPU."""
        if self._baseline is None:
            release_device_memory()
            meter = PeakMemoryMeter(self.device)
            meter.reset()
            measured = meter.read()
            if self.device == "cuda":
                nvml = measured.get("peak_nvml_bytes")
                reserved = int(measured.get("peak_reserved_bytes") or 0)
                self._baseline = max(0, int(nvml) - reserved) if nvml else 0
            else:
                self._baseline = int(measured.get("rss_start_bytes") or 0)
        return self._baseline

    def activation_bytes_per_sample(self, attention: str, precision: str, checkpointing: int) -> float:
        """Measured once per kind: (peak of a forward and backward - model - gradients) / batch.
        `checkpointing`: 0 off, n every n-th layer recomputed (a bool reads as off / all)."""
        checkpointing = int(checkpointing)
        key = (attention, precision_class(precision), checkpointing)
        if key not in self._activations:
            self._activations[key] = self._measure(attention, precision, checkpointing)
        return self._activations[key]

    def known_activations(self) -> dict[str, float]:
        """The per-sample activation bytes measured so far, by kind (``device|attention|precision
        class|checkpointing``): what a study keeps so that its later processes, fresh workers each,
        do not probe a kind again (for a 0.5B model a probe builds a second model and runs a forward
        and backward)."""
        return {
            "|".join((self.device, attention, precision, str(checkpointing))): value
            for (attention, precision, checkpointing), value in self._activations.items()
        }

    def learn_activations(self, known: Mapping[str, float]) -> None:
        """Take the measurements of `known_activations` from another process of this device kind."""
        for kind, value in known.items():
            device, attention, precision, checkpointing = kind.split("|")
            if device == self.device:
                self._activations.setdefault((attention, precision, int(checkpointing)), float(value))

    def probe(self, values: Mapping[str, Any]) -> int:
        """The peak of one configuration measured, not estimated: a real forward and backward at
        its batch size (activations and gradients as they are), plus its weights' and optimizer
        states' bytes, plus the process's baseline. For a batch size whose estimate is in doubt."""
        chosen = {**self.defaults, **values}
        attention, _, checkpointing = _probe_kind(chosen)
        batch = int(chosen["per_device_train_batch_size"])
        per_sample = self._measure(attention, str(chosen["precision"]), checkpointing, batch)
        return self._arithmetic(chosen, per_sample).total_bytes

    def _arithmetic(self, chosen: Mapping[str, Any], per_sample: float) -> MemoryEstimate:
        """`estimate_memory` of a configuration (every knob given) with these activation bytes per
        sample: its weights, gradients and optimizer states as its strategy shards them on a rank."""
        return estimate_memory(
            self.n_params,
            str(chosen["precision"]),
            str(chosen["optim"]),
            int(chosen["per_device_train_batch_size"]),
            per_sample,
            self.baseline_bytes,
            self.world_size,
            str(chosen.get("data_parallel") or "ddp"),
            # bf16 base weights: gradients and optimizer states follow them (a 4-bit base is
            # counted as its config says: an over-estimate of its frozen weights)
            weights_dtype="bf16" if chosen.get("base_weights") == "bf16" else self.weights_dtype,
            trainable_params=self._trainable_or_all(),
        )

    def _trainable_or_all(self) -> int | None:
        """The trainable parameters where some are frozen; None (all of them) in a full fine-tune,
        whose arithmetic is then exactly what it was before frozen weights were counted apart."""
        trainable = self.trainable_params
        return None if trainable == self.n_params else trainable

    def _measure(self, attention: str, precision: str, checkpointing: int, size: int = PROBE_BATCH) -> float:
        _ = self.baseline_bytes  # measured before any probe model exists
        model: Any = self.workload.build_probe_model({"attn_implementation": attention}).to(self.device)
        try:
            if checkpointing:
                model.activation_checkpointing_enable(every_n_layers=checkpointing)
            model.train()
            batch = _batch(self.workload, self.device, size)
            # One pass first: what the first backward of a fresh process allocates once (autograd
            # and kernel set-up, allocator arenas) is not per sample, and would be scaled by the batch.
            with _autocast(self.device, precision):
                model(**batch).loss.backward()
            model.zero_grad(set_to_none=True)
            release_device_memory()
            meter = PeakMemoryMeter(self.device)
            meter.reset()
            start = _current_bytes(self.device)
            with _autocast(self.device, precision):
                loss = model(**batch).loss
            loss.backward()
            measured = meter.read()
            peak = int(measured.get("peak_allocated_bytes") or measured["peak_memory_bytes"] or 0)
            grads = DTYPE_BYTES[self.weights_dtype] * self.trainable_params  # frozen weights have none
            return max(0.0, (peak - start - grads) / size)
        finally:
            del model
            release_device_memory()


def _probe_kind(chosen: Mapping[str, Any]) -> tuple[str, str, int]:
    """The probe's kind of a configuration's activations: attention kernel, precision class and
    checkpointing (0: off; n: every n-th layer checkpointed, 1: all)."""
    checkpointing = (
        int(chosen.get("checkpoint_every_n_layers") or 1) if chosen["activation_checkpointing"] else 0
    )
    return str(chosen["attn_implementation"]), precision_class(str(chosen["precision"])), checkpointing


def _peak_device(source: str | None) -> str:
    """Where a trial's peak was measured: its memory meter's source says (`PeakMemoryMeter.read`)."""
    return "cuda" if str(source or "").startswith("cuda") else "cpu"


def _measured_kind(chosen: Mapping[str, Any]) -> tuple[Any, ...]:
    """The kind whose measured peaks estimate a configuration: the probe's and `MEASURED_KIND_KNOBS`."""
    return (*_probe_kind(chosen), *(str(chosen.get(name)) for name in MEASURED_KIND_KNOBS))


def _batch(workload: Workload, device: str, size: int = PROBE_BATCH) -> dict[str, torch.Tensor]:
    dataset = workload.dataset(seed=0)
    # The task's collator pads (and masks) a user's samples as the trials' batches are.
    batch = workload.collator()([dataset[i] for i in range(size)])
    return {key: value.to(device) for key, value in batch.items() if isinstance(value, torch.Tensor)}


def _current_bytes(device: str) -> int:
    if device == "cuda":
        return int(torch.cuda.memory_allocated())
    return int(rss_bytes() or 0)


@contextlib.contextmanager
def _autocast(device: str, precision: str) -> Iterator[None]:
    # fp8's probe: its bf16 autocast (the Float8Linear conversion is the trial's, not the probe's)
    dtype = {
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
        "bf16+tf32": torch.bfloat16,
        "fp8": torch.bfloat16,
    }.get(precision)
    if dtype is None:
        yield
        return
    with torch.autocast(device_type=device, dtype=dtype):
        yield


def trainable_count(model: torch.nn.Module) -> int:
    """The parameters of `model` that get gradients (``requires_grad``): under peft, the adapter's."""
    return sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)


def parameter_count(model: torch.nn.Module) -> tuple[int, str]:
    """The model's parameter count and the dtype most of its parameters are stored as (`dtype_name`)."""
    counts: dict[str, int] = {}
    for parameter in model.parameters():
        name = dtype_name(parameter.dtype)
        counts[name] = counts.get(name, 0) + parameter.numel()
    if not counts:
        return 0, "fp32"
    return sum(counts.values()), max(counts, key=lambda name: counts[name])
