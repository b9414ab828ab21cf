"""Model FLOPs utilisation (MFU): the share of the device's peak FLOPS a trial's throughput uses.

Pure arithmetic. Per token, training costs about 6N FLOPs for N parameters (forward 2N, backward
4N) plus the attention scores, 12 * layers * hidden * sequence length (the PaLM appendix B
estimate nanoGPT's `estimate_mfu` cites: 6N + 12LHQT with H heads of size Q, H * Q = hidden).
The backward's 4N is two matrix products per weight: the gradient of its input and the gradient of
the weight itself. A frozen weight (a peft adapter's base model) has no weight gradient: it costs
4 FLOPs per token (forward 2, input gradient 2), so MFU counts no weight-gradient FLOPs for it.
Peak FLOPS come from a table of known devices (dense, no sparsity); an unknown device or a CPU gets
no MFU at all, never a guess.
"""

from __future__ import annotations

import re
from typing import Any

# Dense peak TFLOPS by (device name fragment, numeric format). Vendor datasheets.
_PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H200", {"fp8": 1979.0, "bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0}),
    ("H100 PCIe", {"fp8": 1513.0, "bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("H100", {"fp8": 1979.0, "bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", {"fp8": 733.0, "bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6}),
    ("L4", {"fp8": 242.0, "bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("A10G", {"bf16": 70.0, "fp16": 70.0, "tf32": 35.0, "fp32": 31.2}),
    ("T4", {"fp16": 65.0, "fp32": 8.1}),
    ("V100", {"fp16": 125.0, "fp32": 15.7}),
)

# The format the matrix multiplications of a trial run in, per precision knob value (fp8: its Linear
# layers, held to the fp8 peak; its attention runs in bf16).
_MATMUL_FORMAT = {
    "fp32": "fp32",
    "tf32": "tf32",
    "fp16": "fp16",
    "bf16": "bf16",
    "bf16+tf32": "bf16",
    "fp8": "fp8",
}


def matmul_precision(precision: str, tf32_matmuls: bool) -> str:
    """The precision knob value whose peak a trial's matrix multiplications are held to.

    `tf32_matmuls`: whether float32 matmuls ran as TF32 during the trial. On CUDA, accelerate turns
    TF32 on for every compiled run without mixed precision (its ``AcceleratorState``), so a compiled
    "fp32" trial multiplies in TF32, as the user's own run with that configuration does (seen on an
    H100: 81 fp32 TFLOPS, above the fp32 peak of 67).
    """
    return "tf32" if precision == "fp32" and tf32_matmuls else precision


def flops_per_token(
    n_params: int, n_layers: int, hidden: int, seq_len: int, trainable_params: int | None = None
) -> float:
    """Training FLOPs per token: 6N + 12 * layers * hidden * sequence length, where `n_params` all
    train (`trainable_params` None); with frozen ones, 6 per trainable parameter and 4 per frozen
    one (no weight gradient)."""
    trained = n_params if trainable_params is None else min(trainable_params, n_params)
    return 6.0 * trained + 4.0 * (n_params - trained) + 12.0 * n_layers * hidden * seq_len


def peak_flops(device_name: str, precision: str) -> float | None:
    """The device's dense peak FLOPS for a precision, or None when the device is not in the table."""
    matmul = _MATMUL_FORMAT.get(precision)
    for fragment, peaks in _PEAK_TFLOPS:
        if re.search(rf"\b{re.escape(fragment)}\b", device_name):  # an "RTX A1000" is no A100
            tflops = peaks.get(matmul or "")
            return tflops * 1e12 if tflops is not None else None
    return None


def mfu(
    tokens_per_s: float, model_flops_per_token: float, device_name: str, precision: str, devices: int = 1
) -> float | None:
    """Model FLOPs utilisation of a whole job over `devices` devices, or None for unknown devices."""
    peak = peak_flops(device_name, precision)
    if peak is None or devices < 1:
        return None
    return tokens_per_s * model_flops_per_token / (peak * devices)


def model_shape(config: Any) -> tuple[int, int]:
    """(layers, hidden size) of a transformers config, whatever its naming."""
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None) or 0
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None) or 0
    return int(layers), int(hidden)
