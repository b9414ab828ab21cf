"""Memory estimate arithmetic (the Transformers "anatomy of a model's memory" figures)."""

from __future__ import annotations

import pytest
import torch

from autotune.measure.memory_model import (
    SAFETY_MARGIN,
    clearly_over,
    dtype_name,
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
    n, ranks = 1_000_000, 4
    weights, grads, state = 4 * n, 4 * n, 8 * n  # fp32 weights, their gradients, AdamW's two moments
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


@pytest.mark.parametrize(
    ("precision", "optim", "weights_dtype", "per_param"),
    [
        ("fp32", "adamw_torch", "bf16", 2 + 2 + 4),  # bf16 weights trained as they are
        ("bf16", "adamw_torch_fused", "bf16", 2 + 2 + 4),  # autocast to their own dtype copies nothing
        ("fp16", "adamw_torch", "bf16", 2 + 2 + 2 + 4),  # an fp16 copy of each bf16 weight
        ("bf16", "adamw_torch", "fp32", 4 + 2 + 4 + 8),  # the fp32 figures, unchanged
        ("bf16", "adamw_bnb_8bit", "bf16", 2 + 2 + 2),  # 8-bit states are 8-bit whatever the weights
        ("fp32", "rmsprop", "fp16", 2 + 2 + 2),
        ("fp32", "sgd", "bf16", 2 + 2 + 0),
    ],
)
def test_static_bytes_follow_the_dtype_the_weights_are_stored_in(
    precision: str, optim: str, weights_dtype: str, per_param: int
) -> None:
    assert static_bytes(N, precision, optim, weights_dtype=weights_dtype) == N * per_param
    estimate = estimate_memory(N, precision, optim, 4, 10.0, 0, weights_dtype=weights_dtype)
    assert estimate.static_bytes == N * per_param


def test_the_weights_dtype_is_what_most_parameters_are_stored_as() -> None:
    from autotune.measure.estimator import parameter_count

    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.LayerNorm(10))
    assert parameter_count(model) == (130, "fp32")
    model[0].to(torch.bfloat16)  # 110 of 130 parameters
    assert parameter_count(model) == (130, "bf16")
    assert parameter_count(torch.nn.Linear(4, 4).to(torch.float64)) == (20, "fp32")  # estimated as fp32
    assert parameter_count(torch.nn.ReLU()) == (0, "fp32")


def test_the_estimator_reads_the_weights_dtype_from_the_models_config() -> None:
    """A hub config saved in bf16 (``torch_dtype: bfloat16``) builds bf16 weights, with
    `from_config` as with `from_pretrained`: half the bytes per weight, gradient and moment."""
    from transformers import LlamaConfig

    from autotune.measure.estimator import MemoryEstimator
    from autotune.workloads.workload import Workload

    shape = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    shape |= {"num_key_value_heads": 2, "vocab_size": 256}
    fp32, bf16 = LlamaConfig(**shape), LlamaConfig(**shape, dtype="bfloat16")
    assert {p.dtype for p in Workload("f", "causal-lm", bf16, 16).build_model({}).parameters()} == {
        torch.bfloat16
    }
    estimators = [MemoryEstimator(Workload("f", "causal-lm", c, 16), "cpu") for c in (fp32, bf16)]
    assert [e.weights_dtype for e in estimators] == ["fp32", "bf16"]
    n = estimators[0].n_params
    assert estimators[1].n_params == n
    assert static_bytes(n, "fp32", "adamw_torch", weights_dtype=estimators[1].weights_dtype) == 8 * n


def test_dtype_names_read_torch_dtypes_and_config_strings_alike() -> None:
    assert [dtype_name(d) for d in (torch.bfloat16, "bfloat16", torch.float16, "float16")] == [
        "bf16",
        "bf16",
        "fp16",
        "fp16",
    ]
    assert [dtype_name(d) for d in (torch.float32, None, "float32", torch.float64, torch.int8)] == [
        "fp32"
    ] * 5
