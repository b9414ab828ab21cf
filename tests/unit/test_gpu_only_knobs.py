"""The GPU-only knobs and the padding multiple (issue 32, items 3-4), with fakes on CPU.

``base_weights`` (as_is, bf16, 4bit), ``use_liger_kernel``, ``precision=fp8`` and
``pad_to_multiple_of``: where each value runs (the availability rules over a described `Hardware`),
where it lands (`TrainingArguments` kwargs, model-load kwargs, the collator, the Accelerator), what
`autotune knobs` says of it, and what the answer says of it. Real runs are in ``tests/gpu``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import BitsAndBytesConfig

import autotune.space.availability as availability
from autotune.export.launchers import accelerate_dict
from autotune.export.words import launch_lines
from autotune.space.availability import OPTIONAL_PACKAGES, Hardware, ModelSupport, detect_hardware
from autotune.space.knobs import RUNS_ON, combination_unavailable, value_unavailable
from autotune.space.mapping import QLORA_QUANTIZATION, data_choices, fp8_trial, trial_kwargs
from autotune.store.semantics import semantic_changes
from autotune.trial import apply
from autotune.workloads.workload import load_kwargs, resolve_workload, unquantized
from tests.local_models import write_model, write_text
from tests.unit.cli_helpers import run

GPU_PACKAGES = frozenset({"bitsandbytes", "liger_kernel", "torchao", "triton"})
H100 = Hardware(device="cuda", name="NVIDIA H100 80GB HBM3", capability=(9, 0), packages=GPU_PACKAGES)
L4 = dataclasses.replace(H100, name="NVIDIA L4", capability=(8, 9))
A100 = dataclasses.replace(H100, name="NVIDIA A100-SXM4-80GB", capability=(8, 0))
CPU = Hardware()  # what this machine is: no CUDA, none of the GPU packages
CPU_WITH_PACKAGES = Hardware(packages=GPU_PACKAGES)
LLAMA = ModelSupport(name="LlamaForCausalLM")
QLORA = dataclasses.replace(LLAMA, adapters=True)  # trials that train adapters (--peft)
PACKED = dataclasses.replace(LLAMA, padded=False)


def reason(knob: str, value: object, hw: Hardware, model: ModelSupport = LLAMA) -> str | None:
    return value_unavailable(knob, value, hw, model)


# --- where each value runs ---------------------------------------------------------------------------


def test_liger_kernel_is_a_detected_package():
    assert "liger_kernel" in OPTIONAL_PACKAGES


@pytest.mark.parametrize(
    ("knob", "value", "pattern"),
    [
        ("base_weights", "4bit", r"bitsandbytes package|\(bitsandbytes\) need a CUDA GPU"),
        ("use_liger_kernel", True, r"liger-kernel package|Triton kernels: they need a CUDA GPU"),
        ("precision", "fp8", r"^fp8 needs a CUDA GPU with fp8 tensor cores"),
    ],
)
def test_gpu_only_values_are_unavailable_on_this_cpu_with_their_reason(knob, value, pattern):
    # Through the real detection of this machine (packages as installed): torch sees no CUDA here.
    here = detect_hardware()
    assert not here.cuda
    found = reason(knob, value, here, QLORA)
    assert found is not None and re.search(pattern, found), found


@pytest.mark.parametrize(
    ("knob", "value", "pattern"),
    [
        ("base_weights", "4bit", r"^4-bit weights \(bitsandbytes\) need a CUDA GPU$"),
        ("use_liger_kernel", True, r"^Liger's kernels are Triton kernels: they need a CUDA GPU$"),
        ("precision", "fp8", r"^fp8 needs a CUDA GPU with fp8 tensor cores"),
    ],
)
def test_gpu_only_values_need_cuda_even_with_their_packages(knob, value, pattern):
    found = reason(knob, value, CPU_WITH_PACKAGES, QLORA)
    assert found is not None and re.search(pattern, found), found


@pytest.mark.parametrize(
    ("knob", "value", "package"),
    [
        ("base_weights", "4bit", "bitsandbytes"),
        ("use_liger_kernel", True, "liger_kernel"),
        ("precision", "fp8", "torchao"),
    ],
)
def test_gpu_only_values_need_their_package_on_a_gpu(knob, value, package):
    without = dataclasses.replace(H100, packages=GPU_PACKAGES - {package})
    found = reason(knob, value, without, QLORA)
    assert found is not None and "hf-autotune[gpu]" in found, found
    assert reason(knob, value, H100, QLORA) is None


@pytest.mark.parametrize("hw", [H100, L4])
def test_fp8_runs_from_compute_capability_8_9(hw):
    assert reason("precision", "fp8", hw) is None


def test_fp8_is_unavailable_below_compute_capability_8_9_with_that_reason():
    found = reason("precision", "fp8", A100)
    assert found == "fp8 needs compute capability 8.9 or higher (Ada, Hopper); NVIDIA A100-SXM4-80GB has 8.0"
    # the other precisions of an A100 are untouched
    assert reason("precision", "bf16", A100) is None


def test_four_bit_base_needs_adapters_and_bf16():
    assert reason("base_weights", "4bit", H100, QLORA) is None
    found = reason("base_weights", "4bit", H100, LLAMA)
    assert found is not None and "--peft" in found
    no_bf16 = dataclasses.replace(H100, bf16=False)
    assert "bf16" in (reason("base_weights", "4bit", no_bf16, QLORA) or "")


def test_bf16_base_weights_follow_bf16_support_and_as_is_runs_anywhere():
    assert reason("base_weights", "bf16", CPU) is None
    assert reason("base_weights", "bf16", Hardware(bf16=False)) == "cpu has no bf16 support"
    assert reason("base_weights", "as_is", Hardware(bf16=False)) is None


def test_liger_kernel_needs_a_model_type_it_patches():
    assert reason("use_liger_kernel", True, H100) is None
    gpt2 = ModelSupport(name="GPT2LMHeadModel", liger=False)
    assert reason("use_liger_kernel", True, H100, gpt2) == "liger-kernel has no kernels for GPT2LMHeadModel"
    assert reason("use_liger_kernel", False, CPU, gpt2) is None


def test_pad_to_multiple_of_needs_padded_batches():
    assert reason("pad_to_multiple_of", 8, CPU) is None  # --packing examples, classification
    found = reason("pad_to_multiple_of", 8, CPU, PACKED)
    assert found is not None and "packed into blocks of seq_len" in found
    assert reason("pad_to_multiple_of", 1, CPU, PACKED) is None  # the longest sample: no rounding


def test_pad_to_multiple_of_with_padding_free_is_a_combination_left_out():
    assert combination_unavailable({"padding_free": True, "pad_to_multiple_of": 8}, CPU, LLAMA) == (
        "pad_to_multiple_of",
        "padding-free batches are one flattened row: no padding to round up",
    )
    assert combination_unavailable({"padding_free": True, "pad_to_multiple_of": 1}, CPU, LLAMA) is None


# --- where each value lands ----------------------------------------------------------------------------


def test_base_weights_land_as_model_load_kwargs():
    assert trial_kwargs({"base_weights": "as_is"}) == ({}, {})
    assert trial_kwargs({"base_weights": "bf16"}) == ({}, {"dtype": "bfloat16"})
    args, model = trial_kwargs({"base_weights": "4bit", "attn_implementation": "sdpa"})
    assert args == {}
    assert model == {
        "quantization_config": QLORA_QUANTIZATION,
        "dtype": "bfloat16",
        "attn_implementation": "sdpa",
    }
    model["quantization_config"]["load_in_4bit"] = False  # each trial gets its own copy
    assert QLORA_QUANTIZATION["load_in_4bit"] is True


def test_four_bit_kwargs_load_as_a_qlora_bitsandbytes_config():
    _, model = trial_kwargs({"base_weights": "4bit"})
    loaded = load_kwargs(model)
    config = loaded["quantization_config"]
    assert isinstance(config, BitsAndBytesConfig)
    assert config.load_in_4bit and not config.load_in_8bit
    assert config.bnb_4bit_quant_type == "nf4" and config.bnb_4bit_use_double_quant
    assert config.bnb_4bit_compute_dtype == torch.bfloat16
    assert loaded["dtype"] == "bfloat16"
    # a model built from its config (placeholder, memory probe) is never quantized
    assert unquantized(model) == {"dtype": "bfloat16"}


def test_bf16_base_weights_build_a_bf16_model(tmp_path: Path):
    workload = resolve_workload(str(write_model(tmp_path / "m")), seq_len=32)
    _, model_kwargs = trial_kwargs({"base_weights": "bf16"})
    model = workload.build_model(model_kwargs)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in workload.build_model({}).parameters()} == {torch.float32}


def test_liger_kernel_lands_on_its_training_arguments_field():
    assert trial_kwargs({"use_liger_kernel": True}) == ({"use_liger_kernel": True}, {})
    assert trial_kwargs({"use_liger_kernel": False}) == ({"use_liger_kernel": False}, {})


def test_fp8_trains_bf16_arguments_with_an_fp8_accelerator(monkeypatch: pytest.MonkeyPatch):
    args, model = trial_kwargs({"precision": "fp8"})
    assert args == {"bf16": True, "fp16": False, "tf32": False} and model == {}
    assert fp8_trial({"precision": "fp8"}) and not fp8_trial({"precision": "bf16"}) and not fp8_trial({})

    class Recipe:  # accelerate's AORecipeKwargs needs torchao, which this CPU machine lacks
        pass

    import accelerate.utils

    monkeypatch.setattr(accelerate.utils, "AORecipeKwargs", Recipe)
    given = {"mixed_precision": "bf16", "kwargs_handlers": ["ddp"]}
    made = apply.with_fp8(given)
    assert made["mixed_precision"] == "fp8"
    assert made["kwargs_handlers"][0] == "ddp" and isinstance(made["kwargs_handlers"][1], Recipe)
    assert given == {"mixed_precision": "bf16", "kwargs_handlers": ["ddp"]}  # not changed in place


def test_fp8_layers_are_counted_by_their_class():
    class Float8Linear(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(Float8Linear(16, 16), torch.nn.Linear(16, 16), Float8Linear(16, 16))
    assert apply.fp8_layers(model) == 2
    assert apply.fp8_layers(torch.nn.Linear(4, 4)) == 0


def test_pad_to_multiple_of_is_a_data_choice():
    values = {"pad_to_multiple_of": 8, "precision": "fp32"}
    args, model = trial_kwargs(values)
    assert "pad_to_multiple_of" not in args and model == {}
    assert data_choices(values) == {"pad_to_multiple_of": 8}


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("examples")
    model = write_model(folder / "model")
    return resolve_workload(
        str(model), seq_len=64, data=_source(write_text(folder / "t.txt", 40)), packing="examples"
    )


def _source(path: Path) -> Any:
    from autotune.workloads.data import DataSource

    return DataSource(str(path))


def test_pad_to_multiple_of_lands_in_the_collator_of_padded_examples(examples: Any):
    samples = [examples.dataset(0)[i] for i in range(4)]
    longest = max(len(s["input_ids"]) for s in samples)
    multiple = next(m for m in (16, 24, 40) if longest % m)  # one that rounds these samples up
    plain = apply.trial_collator(examples, {})
    rounded = apply.trial_collator(examples, {"pad_to_multiple_of": multiple})
    assert plain(samples)["input_ids"].shape[1] == longest
    batch = rounded(samples)
    assert batch["input_ids"].shape[1] == -(-longest // multiple) * multiple
    assert int(batch["attention_mask"].sum()) == sum(len(s["input_ids"]) for s in samples)
    assert (batch["labels"][batch["attention_mask"] == 0] == -100).all()  # padding out of the loss
    assert apply.trial_collator(examples, {"pad_to_multiple_of": 1})(samples)["input_ids"].shape[1] == longest
    assert examples.collator().pad_to_multiple_of is None  # the workload's own collator is untouched


def test_packed_blocks_have_no_collator_to_round():
    def stack(batch: Any) -> Any:
        return batch

    assert apply.padded_to_multiple(stack, 1) is stack  # nothing to round: as it was
    with pytest.raises(ValueError, match="pad_to_multiple_of=8: function pads no batch"):
        apply.padded_to_multiple(stack, 8)


# --- autotune knobs ---------------------------------------------------------------------------------


def _knobs_output(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, hw: Hardware) -> str:
    monkeypatch.setattr(availability, "detect_hardware", lambda: hw)
    monkeypatch.setenv("COLUMNS", "1000")
    from autotune.view import console

    monkeypatch.setattr(console, "width", 1000)
    assert run("knobs") in (None, 0)
    return capsys.readouterr().out


def test_knobs_command_lists_the_new_knobs_with_where_they_run(capsys, monkeypatch):
    text = _knobs_output(capsys, monkeypatch, CPU)
    for name in ("base_weights", "use_liger_kernel", "pad_to_multiple_of"):
        assert name in text
    for (knob, value), where in RUNS_ON.items():
        assert f"runs on: {where}" in text, (knob, value)
    # on this CPU: each GPU-only value is refused with its reason
    assert "4bit: 4-bit weights need the bitsandbytes package" in text
    assert "true: needs the liger-kernel package" in text
    # the install hint survives the table's markup (rich read "[gpu]" as a style tag)
    assert "pip install 'hf-autotune[gpu]'" in " ".join(text.split()).replace("│ ", "").replace(" │", "")
    assert "fp8: fp8 needs a CUDA GPU with fp8 tensor cores" in text
    assert "data collator" in text  # where pad_to_multiple_of and padding_free land


def test_knobs_command_on_a_fake_h100_offers_fp8_and_liger(capsys, monkeypatch):
    text = _knobs_output(capsys, monkeypatch, H100)
    assert "fp8: fp8 needs" not in text and "yes fp8" in text
    assert "true: needs the liger-kernel" not in text
    assert "4bit: a 4-bit base is frozen" in text  # no --peft in a plain knobs listing


# --- what the answer says ---------------------------------------------------------------------------


def test_base_weights_are_a_change_of_the_training_math():
    baseline = {
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "precision": "bf16",
        "optim": "adamw_torch",
    }
    changes = semantic_changes(baseline, {"base_weights": "bf16"})
    assert [(c.what, c.baseline, c.chosen) for c in changes] == [("base weights", "as_is", "bf16")]
    assert semantic_changes(baseline, {"base_weights": "as_is"}) == []
    fp8 = semantic_changes(baseline, {"precision": "fp8"})
    assert [(c.what, c.baseline, c.chosen) for c in fp8] == [("precision", "bf16", "fp8")]


def test_fp8_and_padding_exports_say_how_to_launch_them():
    config: dict[str, Any] = {
        "training_args": {"per_device_train_batch_size": 8},
        "model_kwargs": {},
        "expected": {"device": "cuda"},
        "mixed_precision": "fp8",
        "pad_to_multiple_of": 64,
    }
    lines = launch_lines(config)
    assert any("--mixed_precision fp8 --fp8_backend ao" in line for line in lines)
    assert any("pad_to_multiple_of=64" in line for line in lines)
    out = accelerate_dict(config)
    assert out["mixed_precision"] == "fp8" and out["fp8_config"] == {"backend": "AO"}
    assert launch_lines({"training_args": {}, "model_kwargs": {}, "expected": {}}) == []
