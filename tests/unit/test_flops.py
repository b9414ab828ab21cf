"""MFU arithmetic and the peak-FLOPS table (an unknown device gets no MFU, never a guess)."""

from __future__ import annotations

import pytest
from transformers import GPT2Config, LlamaConfig

from autotune.measure.flops import flops_per_token, matmul_precision, mfu, model_shape, peak_flops


def test_flops_per_token_is_6n_plus_the_attention_term() -> None:
    # GPT-2 124M at 1024 tokens: 6 * 124e6 + 12 * 12 * 768 * 1024
    assert flops_per_token(124_000_000, 12, 768, 1024) == 6 * 124_000_000 + 12 * 12 * 768 * 1024


@pytest.mark.parametrize(
    ("device", "precision", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.0),
        ("NVIDIA H100 80GB HBM3", "bf16+tf32", 989.0),
        ("NVIDIA H100 80GB HBM3", "tf32", 494.0),
        ("NVIDIA H100 PCIe", "bf16", 756.0),
        ("NVIDIA H200", "fp16", 989.0),
        ("NVIDIA A100-SXM4-80GB", "fp32", 19.5),
        ("NVIDIA L4", "bf16", 121.0),
        ("NVIDIA L40S", "bf16", 362.0),
    ],
)
def test_peak_flops_of_known_devices(device: str, precision: str, tflops: float) -> None:
    assert peak_flops(device, precision) == pytest.approx(tflops * 1e12)


@pytest.mark.parametrize(
    ("device", "precision"),
    [
        ("cpu", "fp32"),
        ("", "bf16"),
        ("NVIDIA RTX A1000", "bf16"),
        ("Tesla T4", "bf16"),
        ("NVIDIA GB300", "bf16"),
    ],
)
def test_no_mfu_for_unknown_devices_or_formats(device: str, precision: str) -> None:
    assert peak_flops(device, precision) is None
    assert mfu(1e5, 1e9, device, precision) is None


def test_mfu_of_a_whole_job() -> None:
    # 400k tokens/s at 1e9 FLOPs per token on two A100s in bf16: 4e14 / (2 * 312e12)
    assert mfu(400_000, 1e9, "NVIDIA A100-SXM4-40GB", "bf16", devices=2) == pytest.approx(4e14 / 624e12)


def test_model_shape_reads_both_namings() -> None:
    assert model_shape(GPT2Config(n_layer=3, n_embd=96)) == (3, 96)
    assert model_shape(LlamaConfig(num_hidden_layers=5, hidden_size=128)) == (5, 128)


def test_trial_table_shows_mfu_only_when_known() -> None:
    from rich.console import Console

    from autotune.records import trial_record
    from autotune.view import trials_table

    def render(attrs: dict) -> str:
        figures = {"tokens_per_s": 1000.0, "samples_per_s": 10.0, "peak_memory_bytes": 2**30}
        trial = trial_record(
            0, {"precision": "bf16"}, "COMPLETE", {**figures, "rel_ci_halfwidth": 0.01, **attrs}
        )
        console = Console(width=200, record=True)
        console.print(trials_table([trial], "t"))
        return console.export_text()

    assert "MFU" not in render({"mfu": None})
    shown = render({"mfu": 0.4123})
    assert "MFU" in shown and "41.2%" in shown


@pytest.mark.parametrize(
    ("precision", "tf32", "applied"),
    [
        ("fp32", False, "fp32"),
        ("fp32", True, "tf32"),  # a compiled fp32 run on CUDA: accelerate switched TF32 on
        ("tf32", True, "tf32"),
        ("bf16", True, "bf16"),
        ("bf16+tf32", True, "bf16+tf32"),
    ],
)
def test_mfu_holds_fp32_trials_that_ran_tf32_to_the_tf32_peak(
    precision: str, tf32: bool, applied: str
) -> None:
    assert matmul_precision(precision, tf32) == applied
    # The H100's fp32 trial at 94.7k tok/s of GPT-2 124M (seq 1024) is 122% of the fp32 peak: TF32.
    per_token = flops_per_token(124_439_808, 12, 768, 1024)
    share = mfu(94_744.0, per_token, "NVIDIA H100 80GB HBM3", matmul_precision("fp32", True))
    assert share is not None and share < 0.2


def test_a_cuda_trials_mfu_reads_tf32_as_transformers_and_accelerate_set_it() -> None:
    """The trial's own MFU path, on a faked CUDA machine: after transformers switched TF32 through
    torch's new API (every tf32 trial), reading it must not raise, and a compiled fp32 trial that
    accelerate switched to TF32 is held to the TF32 peak."""
    from types import SimpleNamespace
    from typing import Any

    import torch

    from autotune.records import TrialRecord, measured_record
    from autotune.trial.measured import with_mfu

    hardware = SimpleNamespace(cuda=True, name="NVIDIA H100 80GB HBM3")
    per_token = flops_per_token(124_439_808, *model_shape(GPT2Config(n_layer=12, n_embd=768)), 1024)

    def measured(precision: str, tokens_per_s: float) -> Any:
        record: TrialRecord = with_mfu(
            measured_record({"tokens_per_s": tokens_per_s}), per_token, hardware, precision, 1
        )
        return record.measurement

    matmul: Any = torch.backends.cuda.matmul
    backends: Any = torch.backends
    saved = (backends.fp32_precision, matmul.fp32_precision)
    try:
        backends.fp32_precision = "tf32"  # a tf32 trial's TrainingArguments
        tf32 = measured("tf32", 100_000.0)
        backends.fp32_precision = "ieee"  # an fp32 trial's, then accelerate for its compile
        matmul.allow_tf32 = True
        compiled_fp32 = measured("fp32", 94_744.0)
        matmul.allow_tf32 = False
        eager_fp32 = measured("fp32", 44_069.0)
    finally:
        backends.fp32_precision, matmul.fp32_precision = saved
    assert tf32.matmul_precision == "tf32"
    assert compiled_fp32.matmul_precision == "tf32" and compiled_fp32.mfu < 0.2
    assert eager_fp32.matmul_precision == "fp32" and 0.5 < eager_fp32.mfu < 0.6  # 56.6% on the H100
