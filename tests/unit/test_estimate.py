"""Memory estimate arithmetic (the Transformers "anatomy of a model's memory" figures)."""

from __future__ import annotations

import pytest

from autotune.measure.estimate import (
    SAFETY_MARGIN,
    clearly_over,
    estimate_memory,
    precision_class,
    relative_error,
    static_bytes,
)

N = 1_000_000


@pytest.mark.parametrize(
    ("precision", "optim", "per_param"),
    [
        ("fp32", "adamw_torch", 4 + 4 + 8),
        ("bf16", "adamw_torch", 6 + 4 + 8),
        ("fp16", "adamw_torch_fused", 6 + 4 + 8),
        ("tf32", "adamw_bnb_8bit", 4 + 4 + 2),
        ("bf16+tf32", "paged_adamw_8bit", 6 + 4 + 2),
        ("fp32", "sgd", 4 + 4 + 0),  # Transformers' sgd has no momentum: no state
        ("fp32", "rmsprop", 4 + 4 + 4),
        ("fp32", "adagrad", 4 + 4 + 4),
        ("fp32", "adafactor", 4 + 4 + 0),
    ],
)
def test_static_bytes_per_parameter(precision: str, optim: str, per_param: int) -> None:
    assert static_bytes(N, precision, optim) == N * per_param


def test_estimate_adds_baseline_static_and_batch_scaled_activations() -> None:
    estimate = estimate_memory(N, "fp32", "adamw_torch", 8, 1000.5, 300)
    assert estimate.static_bytes == 16 * N
    assert estimate.activation_bytes == 8004
    assert estimate.total_bytes == 300 + 16 * N + 8004
    assert estimate.to_dict()["total_bytes"] == estimate.total_bytes


def test_precision_class() -> None:
    assert [precision_class(p) for p in ("fp32", "tf32", "fp16", "bf16", "bf16+tf32")] == [
        "fp32",
        "fp32",
        "half",
        "half",
        "half",
    ]


def test_relative_error_and_clearly_over() -> None:
    assert relative_error(110, 100) == pytest.approx(0.10)
    assert relative_error(90, 100) == pytest.approx(-0.10)
    cap = 1000
    assert not clearly_over(int(cap * (1 + SAFETY_MARGIN)), cap)
    assert clearly_over(int(cap * (1 + SAFETY_MARGIN)) + 1, cap)
    assert not clearly_over(1100, cap)  # over, but within the margin: measured to decide


def test_sharding_divides_what_each_strategy_shards_over_the_ranks():
    from autotune.measure.estimate import GRADIENT_BYTES, OPTIMIZER_STATE_BYTES, WEIGHT_BYTES

    n, ranks = 1_000_000, 4
    weights, grads = n * WEIGHT_BYTES["fp32"], n * GRADIENT_BYTES
    state = n * OPTIMIZER_STATE_BYTES["adamw"]
    ddp = static_bytes(n, "fp32", "adamw_torch", ranks, "ddp")
    assert ddp == weights + 2 * grads + state  # DDP keeps a bucket copy of the gradients
    assert static_bytes(n, "fp32", "adamw_torch", ranks, "zero1") == weights + grads + state // ranks
    assert static_bytes(n, "fp32", "adamw_torch", ranks, "zero2") == weights + (grads + state) // ranks
    assert (
        static_bytes(n, "fp32", "adamw_torch", ranks, "fsdp_shard_grad_op")
        == weights + (grads + state) // ranks
    )
    full = (weights + grads + state) // ranks
    assert static_bytes(n, "fp32", "adamw_torch", ranks, "zero3") == full
    assert static_bytes(n, "fp32", "adamw_torch", ranks, "fsdp_full_shard") == full
    # One process shards nothing.
    assert static_bytes(n, "fp32", "adamw_torch", 1, "zero3") == weights + grads + state


def test_a_study_keeps_the_probes_so_a_fresh_process_does_not_probe_a_kind_again() -> None:
    from typing import Any

    from autotune.measure.estimator import MemoryEstimator

    class Probing(MemoryEstimator):
        def __init__(self, device: str) -> None:
            super().__init__(workload=None, device=device)  # type: ignore[arg-type]  # never built here
            self.probed: list[tuple[str, str, int]] = []

        def _measure(self, attention: str, precision: str, checkpointing: int, size: int = 2) -> float:
            self.probed.append((attention, precision, checkpointing))
            return 1000.0 * (1 + len(self.probed))

    first = Probing("cpu")
    first.activation_bytes_per_sample("sdpa", "bf16", 0)
    first.activation_bytes_per_sample("eager", "fp32", 2)
    stored: dict[str, Any] = first.known_activations()
    assert stored == {"cpu|sdpa|half|0": 2000.0, "cpu|eager|fp32|2": 3000.0}

    fresh = Probing("cpu")
    fresh.learn_activations(stored)
    assert fresh.activation_bytes_per_sample("sdpa", "fp16", 0) == 2000.0  # fp16 is bf16's class
    assert fresh.activation_bytes_per_sample("eager", "fp32", 2) == 3000.0
    assert fresh.probed == []
    fresh.activation_bytes_per_sample("sdpa", "fp32", 0)  # a new kind is probed
    assert fresh.probed == [("sdpa", "fp32", 0)]
    # Another device's figures are not this one's.
    gpu = Probing("cuda")
    gpu.learn_activations(stored)
    gpu.activation_bytes_per_sample("sdpa", "bf16", 0)
    assert gpu.probed == [("sdpa", "bf16", 0)]
