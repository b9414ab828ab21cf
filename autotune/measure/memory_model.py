"""Memory estimate of a configuration before it runs: pure arithmetic.

Per parameter, as in the Transformers "anatomy of a model's memory" figures, for fp32 weights:
weights take 4 bytes in fp32 and 6 under mixed precision (the fp32 weights plus the half-precision
copy autocast makes of each); gradients 4; optimizer states 8 for AdamW (two moments), 2 for 8-bit
AdamW, 4 for one-state optimizers (SGD with momentum, Adagrad, RMSprop). Transformers' plain `sgd`
has no momentum (no state) and Adafactor's factored moments are negligible per parameter. A model
whose weights are stored in half precision (a config saved with ``torch_dtype: bfloat16``, which
`from_config` and `from_pretrained` both keep) holds 2 bytes per weight, gradient and moment, and
autocast to its own dtype copies nothing. Under a peft adapter (LoRA) the base weights are frozen:
they are stored (and copied by autocast) but get no gradients and no optimizer states, which only
the adapter's trainable parameters have. Activations scale with the per-device batch, from a
one-off measurement at a small batch (`autotune.measure.estimator`); the process's baseline
(libraries, CUDA context) comes on top.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from autotune.space.knobs import optimizer_family

# Bytes per element of the dtypes weights are stored in (a gradient has its weight's dtype), and
# the dtype each precision autocasts to.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
AUTOCAST_DTYPE = {"fp16": "fp16", "bf16": "bf16", "bf16+tf32": "bf16", "fp8": "bf16"}
OPTIMIZER_STATE_BYTES = {  # per fp32 weight
    "adamw": 8,
    "adamw_8bit": 2,
    "sgd": 0,
    "adafactor": 0,
    "adagrad": 4,
    "rmsprop": 4,
}
# A configuration is skipped on its estimate only when it is this far over the cap: the estimate
# guides, the measured peak decides.
SAFETY_MARGIN = 0.25


def dtype_name(dtype: object) -> str:
    """``bf16`` or ``fp16`` for a half-precision dtype (a `torch.dtype` or its name, as configs hold
    it), else ``fp32``: what the estimate counts weights as (float64 or quantized weights as fp32)."""
    return {"bfloat16": "bf16", "float16": "fp16"}.get(str(dtype).removeprefix("torch."), "fp32")


def precision_class(precision: str) -> str:
    """Activations are stored in fp32 or in half precision."""
    return "fp32" if precision in ("fp32", "tf32") else "half"


def static_bytes(
    n_params: int,
    precision: str,
    optim: str,
    world_size: int = 1,
    strategy: str = "ddp",
    weights_dtype: str = "fp32",
    trainable_params: int | None = None,
) -> int:
    """Weights, gradients and optimizer states of `n_params` parameters stored as `weights_dtype`
    (``fp32``, ``bf16`` or ``fp16``) on one device. Gradients and optimizer states exist for the
    `trainable_params` alone (a peft adapter's; None: every parameter trains); every weight, frozen
    or not, is stored and copied by autocast. With DDP (`world_size` > 1) also its gradient
    buckets, a second copy of the gradients for all-reduce. A sharding `strategy` splits what it
    shards over the ranks: FSDP's full shard and ZeRO-3 all three, FSDP's shard-grad-op and ZeRO-2
    gradients and optimizer states (the weights are whole between the forward and the backward),
    ZeRO-1 the optimizer states."""
    family = optimizer_family(optim)
    # Optimizer states (given for fp32 weights) follow the weights' dtype, 8-bit ones excepted.
    scale = 1.0 if family == "adamw_8bit" else DTYPE_BYTES[weights_dtype] / DTYPE_BYTES["fp32"]
    trained = n_params if trainable_params is None else trainable_params
    state = int(trained * OPTIMIZER_STATE_BYTES.get(family, 8) * scale)
    grads = trained * DTYPE_BYTES[weights_dtype]
    autocast = AUTOCAST_DTYPE.get(precision)
    copy = DTYPE_BYTES[autocast] if autocast is not None and autocast != weights_dtype else 0
    weights = n_params * (DTYPE_BYTES[weights_dtype] + copy)
    ranks = max(1, world_size)
    sharded = {
        "fsdp_full_shard": ("weights", "grads", "state"),
        "zero3": ("weights", "grads", "state"),
        "fsdp_shard_grad_op": ("grads", "state"),
        "zero2": ("grads", "state"),
        "zero1": ("state",),
    }.get(strategy)
    if sharded is None or ranks == 1:  # DDP, or a single process
        buckets = grads if world_size > 1 else 0
        return weights + grads + buckets + state
    parts = {"weights": weights, "grads": grads, "state": state}
    return sum(size // ranks if name in sharded else size for name, size in parts.items())


@dataclass(frozen=True)
class MemoryEstimate:
    """An estimate of a trial's peak memory, by part (bytes).

    `measured_from`: the trials whose measured peaks gave the activations (`activations_from_peaks`),
    empty when they come from the probe; `probe_activation_bytes`: then what the probe alone gave."""

    baseline_bytes: int
    static_bytes: int
    activation_bytes: int
    measured_from: tuple[int, ...] = ()
    probe_activation_bytes: int | None = None

    @property
    def total_bytes(self) -> int:
        return self.baseline_bytes + self.static_bytes + self.activation_bytes

    def to_dict(self) -> dict[str, Any]:
        parts: dict[str, Any] = {
            "baseline_bytes": self.baseline_bytes,
            "static_bytes": self.static_bytes,
            "activation_bytes": self.activation_bytes,
            "total_bytes": self.total_bytes,
        }
        if self.measured_from:
            parts["activations_from_trials"] = list(self.measured_from)
            parts["probe_activation_bytes"] = self.probe_activation_bytes
        return parts


@dataclass(frozen=True)
class MeasuredPeak:
    """A trained trial's measured peak, less what the estimate counts apart from activations (the
    baseline and static bytes of its own estimate): its activations as measured, at its batch."""

    number: int
    batch: int
    activation_bytes: int


def activations_from_peaks(
    peaks: Sequence[MeasuredPeak], batch: int, per_sample: float
) -> tuple[int, tuple[int, ...]] | None:
    """The activation bytes at `batch` from measured peaks of trials of the same kind, and the trials
    used; None without any. Several peaks at one batch: the largest. Between two measured batch
    sizes: linear between them. Beyond them: the nearest measured peak, plus (or less) the probe's
    `per_sample` bytes for each sample more (or fewer). A measured peak holds a part that does not
    grow with the batch (on CPU the compiler's own memory, hundreds of MB for a cold compile), which
    scaling the peak in proportion would multiply."""
    by_batch: dict[int, MeasuredPeak] = {}
    for peak in peaks:
        if peak.batch > 0 and (
            peak.batch not in by_batch or peak.activation_bytes > by_batch[peak.batch].activation_bytes
        ):
            by_batch[peak.batch] = peak
    if not by_batch:
        return None
    points = sorted(by_batch.values(), key=lambda p: p.batch)
    if batch in by_batch:
        exact = by_batch[batch]
        return max(0, exact.activation_bytes), (exact.number,)
    below = [p for p in points if p.batch < batch]
    above = [p for p in points if p.batch > batch]
    if below and above:
        low, high = below[-1], above[0]
        share = (batch - low.batch) / (high.batch - low.batch)
        value = low.activation_bytes + share * (high.activation_bytes - low.activation_bytes)
        return max(0, round(value)), (low.number, high.number)
    nearest = below[-1] if below else above[0]
    value = nearest.activation_bytes + per_sample * (batch - nearest.batch)
    return max(0, round(value)), (nearest.number,)


def estimate_memory(
    n_params: int,
    precision: str,
    optim: str,
    batch_size: int,
    activation_bytes_per_sample: float,
    baseline_bytes: int,
    world_size: int = 1,
    strategy: str = "ddp",
    weights_dtype: str = "fp32",
    trainable_params: int | None = None,
) -> MemoryEstimate:
    """The estimated peak of one configuration on one device (of `world_size` processes sharing
    the model by `strategy`, its weights stored as `weights_dtype`; gradients and optimizer states
    for `trainable_params` of them, None: all)."""
    return MemoryEstimate(
        baseline_bytes=baseline_bytes,
        static_bytes=static_bytes(
            n_params, precision, optim, world_size, strategy, weights_dtype, trainable_params
        ),
        activation_bytes=int(activation_bytes_per_sample * batch_size),
    )


def relative_error(estimate_bytes: int, measured_bytes: int) -> float:
    """(estimate - measured) / measured: positive when the estimate is too high."""
    return (estimate_bytes - measured_bytes) / measured_bytes


def clearly_over(estimate_bytes: int, cap_bytes: int, margin: float = SAFETY_MARGIN) -> bool:
    """Whether an estimate is over the cap by more than the safety margin."""
    return estimate_bytes > cap_bytes * (1 + margin)


@dataclass(frozen=True)
class LadderProbe:
    """The one probe that decided a batch of the ladder whose estimate was in doubt
    (`fitting_rungs`), stored as ``batch_ladder_probe`` (`to_dict`).

    Attributes:
        batch: the batch in doubt.
        estimated_bytes: its estimate.
        measured_bytes: the peak the probe measured (a real forward and backward).
        values: the configuration probed (the space's most frugal at that batch).
        limit_bytes: the limit it was judged against.
    """

    batch: int
    estimated_bytes: int
    measured_bytes: int
    values: dict[str, Any]
    limit_bytes: int

    @property
    def fits(self) -> bool:
        return self.measured_bytes <= self.limit_bytes

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LadderProbe:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


def fitting_rungs(
    candidates: Sequence[int],
    estimate_bytes: Callable[[int], int | None],
    limit_bytes: int,
    probe_bytes: Callable[[int], int | None] | None = None,
    margin: float = SAFETY_MARGIN,
) -> tuple[list[int], dict[str, int] | None]:
    """The leading `candidates` (batch sizes, in increasing order) that fit within `limit_bytes`,
    and the probe that decided one of them (None: the estimates alone decided).

    A rung whose estimate is clearly under the limit (by the safety `margin`) fits, one clearly
    over it ends the ladder. The first rung in doubt (its estimate within the margin either side of
    the limit) is measured once with `probe_bytes`, a real forward and backward at that batch: it
    fits if the measured peak is within the limit, and the later rungs' estimates are scaled by
    what the probe found (measured / estimated). Without a probe, or after it, the scaled estimate
    decides. The ladder stops at a rung that cannot be estimated or probed."""
    fitting: list[int] = []
    probe: dict[str, int] | None = None
    scale = 1.0
    for batch in candidates:
        estimated = estimate_bytes(batch)
        if estimated is None:
            break
        in_doubt = limit_bytes / (1 + margin) < estimated <= limit_bytes * (1 + margin)
        if in_doubt and probe_bytes is not None and probe is None:
            measured = probe_bytes(batch)
            if measured is None:
                break
            probe = {"batch": batch, "estimated_bytes": estimated, "measured_bytes": measured}
            scale = measured / estimated if estimated > 0 else 1.0
            if measured > limit_bytes:
                break
            fitting.append(batch)
            continue
        if estimated * scale > limit_bytes:
            break
        fitting.append(batch)
    return fitting, probe
