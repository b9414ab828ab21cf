"""Memory estimates from the measured peaks of a study's trained trials (`activations_from_peaks`,
`MemoryEstimator.learn_peaks`): what the eager probe cannot see (compile, padding-free batches)."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.measure.estimator import MemoryEstimator
from autotune.measure.memory_model import MeasuredPeak, activations_from_peaks, static_bytes
from autotune.records import TrialRecord, trial_record

MiB = 2**20


def peaks(*points: tuple[int, int, int]) -> list[MeasuredPeak]:
    return [MeasuredPeak(number, batch, activations) for number, batch, activations in points]


def test_none_without_peaks() -> None:
    assert activations_from_peaks([], 8, MiB) is None


def test_a_measured_batch_is_its_peak_and_repeats_take_the_largest() -> None:
    assert activations_from_peaks(peaks((3, 8, 100 * MiB)), 8, MiB) == (100 * MiB, (3,))
    repeats = peaks((3, 8, 100 * MiB), (5, 8, 120 * MiB), (6, 8, 90 * MiB))
    assert activations_from_peaks(repeats, 8, MiB) == (120 * MiB, (5,))


def test_between_two_measured_batches_it_is_linear_between_them() -> None:
    measured = peaks((1, 8, 100 * MiB), (2, 32, 340 * MiB), (3, 64, 700 * MiB))
    assert activations_from_peaks(measured, 16, MiB) == (180 * MiB, (1, 2))
    assert activations_from_peaks(measured, 48, MiB) == (520 * MiB, (2, 3))


def test_beyond_them_the_nearest_peak_and_the_probes_bytes_per_sample() -> None:
    # A peak with 200 MiB that does not grow with the batch (a cold compile's memory on CPU) and 5 MiB
    # a sample: 4x the batch is not 4x the peak.
    measured = peaks((1, 8, 240 * MiB), (2, 16, 280 * MiB))
    assert activations_from_peaks(measured, 64, 5 * MiB) == (520 * MiB, (2,))
    assert activations_from_peaks(measured, 4, 5 * MiB) == (220 * MiB, (1,))
    assert activations_from_peaks(peaks((4, 8, 100 * MiB)), 32, 10 * MiB) == (340 * MiB, (4,))
    assert activations_from_peaks(peaks((4, 8, 10 * MiB)), 2, 10 * MiB) == (0, (4,))  # never negative
    assert activations_from_peaks(peaks((1, 8, -5 * MiB)), 8, MiB) == (0, (1,))  # static over-counted


class Fixed(MemoryEstimator):
    """An estimator with a fixed model size, baseline and probe figure: no model is built."""

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(workload=None, device=device)  # type: ignore[arg-type]  # never built here
        self.__dict__["defaults"] = {
            "per_device_train_batch_size": 8,
            "precision": "fp32",
            "optim": "adamw_torch_fused",
            "attn_implementation": "sdpa",
            "activation_checkpointing": False,
            "torch_compile": "off",
        }
        self.__dict__["_parameters"] = (1_000_000, "fp32", 1_000_000)  # all trainable
        self._baseline = 400 * MiB
        self.probed = 0

    def _measure(self, attention: str, precision: str, checkpointing: int, size: int = 2) -> float:
        self.probed += 1
        return 10 * MiB  # per sample, eager


STATIC = static_bytes(1_000_000, "fp32", "adamw_torch_fused")


def trained(number: int, params: dict[str, Any], activations: int, **attrs: Any) -> TrialRecord:
    """A trained trial's record whose peak holds `activations` over its estimate's baseline (not
    this process's) and static bytes."""
    baseline = 380 * MiB
    stored = {
        "peak_memory_bytes": baseline + STATIC + activations,
        "memory_estimate": {"baseline_bytes": baseline, "static_bytes": STATIC, "activation_bytes": 1},
        "memory_source": "rss_hwm",
        **attrs,
    }
    return trial_record(number, params, "COMPLETE", stored)


def test_a_measured_kind_is_estimated_from_its_peaks_and_keeps_the_probes_figure() -> None:
    estimator = Fixed()
    compiled = {"torch_compile": "inductor", "per_device_train_batch_size": 16}
    assert estimator.estimate(compiled).activation_bytes == 160 * MiB  # the eager probe's
    estimator.learn_peaks([trained(2, compiled, 60 * MiB)])
    estimate = estimator.estimate({**compiled, "per_device_train_batch_size": 32})
    assert estimate.activation_bytes == 60 * MiB + 16 * 10 * MiB  # the peak, and the probe's 16 samples more
    assert estimate.baseline_bytes == 400 * MiB  # this process's, not the trial's
    assert estimate.static_bytes == STATIC
    assert estimate.measured_from == (2,)
    assert estimate.to_dict()["activations_from_trials"] == [2]
    assert estimate.to_dict()["probe_activation_bytes"] == 320 * MiB
    # Eager configurations, and other backends, are not the compiled one's kind.
    assert estimator.estimate({"per_device_train_batch_size": 32}).activation_bytes == 320 * MiB
    assert estimator.estimate({**compiled, "torch_compile": "aot_eager"}).measured_from == ()
    assert estimator.estimate({**compiled, "activation_checkpointing": True}).measured_from == ()
    assert estimator.estimate({**compiled, "precision": "bf16"}).measured_from == ()
    assert estimator.estimate({**compiled, "padding_free": True}).measured_from == ()
    assert estimator.estimate({**compiled, "dataloader_num_workers": 2}).measured_from == ()
    assert estimator.estimate({**compiled, "data_parallel": "fsdp_full_shard"}).measured_from == ()
    assert "activations_from_trials" not in estimator.estimate({}).to_dict()


def test_the_same_precision_class_and_another_optimizer_share_a_kind() -> None:
    estimator = Fixed()
    estimator.learn_peaks([trained(0, {"precision": "bf16", "optim": "adamw_torch"}, 40 * MiB)])
    estimate = estimator.estimate({"precision": "fp16", "optim": "adafactor"})
    assert estimate.measured_from == (0,)
    assert estimate.activation_bytes == 40 * MiB
    assert estimate.static_bytes == static_bytes(1_000_000, "fp16", "adafactor")


@pytest.mark.parametrize(
    ("attrs", "why"),
    [
        ({"duplicate_of": 1}, "reused another trial's result"),
        ({"peak_memory_bytes": None}, "no peak"),
        ({"memory_estimate": {}}, "no estimate to take the static part from"),
        ({"memory_source": "cuda_allocator+nvml"}, "measured on another device"),
    ],
)
def test_peaks_that_say_nothing_of_this_process_are_not_learned(attrs: dict[str, Any], why: str) -> None:
    estimator = Fixed()
    estimator.learn_peaks([trained(5, {}, 30 * MiB, **attrs)])
    assert estimator.estimate({}).measured_from == (), why


def test_what_child_processes_held_stays_in_the_peak() -> None:
    """Compile and data-loader workers are part of what a configuration of that kind needs."""
    estimator = Fixed()
    estimator.learn_peaks([trained(1, {}, 130 * MiB, peak_children_bytes=100 * MiB)])
    assert estimator.estimate({}).activation_bytes == 130 * MiB


def test_learning_again_replaces_a_trials_peak_instead_of_adding_it() -> None:
    estimator = Fixed()
    estimator.learn_peaks([trained(1, {}, 30 * MiB)])
    estimator.learn_peaks(
        [trained(1, {}, 30 * MiB), trained(4, {"per_device_train_batch_size": 16}, 50 * MiB)]
    )
    assert estimator.estimate({"per_device_train_batch_size": 12}).activation_bytes == 40 * MiB
    assert estimator.probed == 1  # the probe's figure is still made, and kept beside


def test_the_ladders_probe_counts_the_static_bytes_as_the_strategy_shards_them() -> None:
    estimator = Fixed()
    estimator.world_size = 2
    sharded = static_bytes(1_000_000, "fp32", "adamw_torch_fused", 2, "fsdp_full_shard")
    assert sharded < static_bytes(1_000_000, "fp32", "adamw_torch_fused", 2, "ddp")
    values = {"data_parallel": "fsdp_full_shard", "per_device_train_batch_size": 4}
    assert estimator.probe(values) == 400 * MiB + sharded + 4 * 10 * MiB
    assert estimator.estimate(values).total_bytes == estimator.probe(values)
