"""Availability rules: which knob values can run on a described machine and model, and why not."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest
import torch
from transformers import GPT2LMHeadModel, LlamaForCausalLM

from autotune.space.availability import (
    OPTIONAL_PACKAGES,
    Hardware,
    ModelSupport,
    detect_hardware,
    model_support,
)
from autotune.space.knobs import CATALOGUE, combination_unavailable, value_unavailable

ALL_PACKAGES = frozenset(OPTIONAL_PACKAGES)

CPU = Hardware()
CPU_ALL_PACKAGES = Hardware(packages=ALL_PACKAGES)
CPU_NO_COMPILER = Hardware(packages=ALL_PACKAGES, cxx_compiler=False)
T4 = Hardware(
    device="cuda",
    name="Tesla T4",
    capability=(7, 5),
    bf16=False,
    packages=ALL_PACKAGES,
    memory_bytes=16 * 2**30,
)
A100 = Hardware(
    device="cuda",
    name="NVIDIA A100-SXM4-80GB",
    capability=(8, 0),
    packages=ALL_PACKAGES,
    memory_bytes=80 * 2**30,
)
H100 = Hardware(
    device="cuda",
    name="NVIDIA H100 80GB HBM3",
    capability=(9, 0),
    packages=ALL_PACKAGES,
    memory_bytes=80 * 2**30,
)
H100_NO_PACKAGES = dataclasses.replace(H100, packages=frozenset())

ANY_MODEL = ModelSupport(name="LlamaForCausalLM")
BARE_MODEL = ModelSupport(
    name="OldModel", sdpa=False, flash_attn=False, flex_attn=False, gradient_checkpointing=False
)


def without_package(hw: Hardware, package: str) -> Hardware:
    assert package in hw.packages
    return dataclasses.replace(hw, packages=hw.packages - {package})


def assert_available(knob: str, value: object, hw: Hardware, model: ModelSupport = ANY_MODEL) -> None:
    assert value_unavailable(knob, value, hw, model) is None, (knob, value, hw.name)


def assert_unavailable(
    knob: str, value: object, hw: Hardware, pattern: str, model: ModelSupport = ANY_MODEL
) -> str:
    reason = value_unavailable(knob, value, hw, model)
    assert reason is not None, f"{knob}={value} should be unavailable on {hw.name}"
    assert re.search(pattern, reason), f"{reason!r} does not match {pattern!r}"
    return reason


# --- Hardware and ModelSupport values ---------------------------------------------------------------


def test_hardware_and_model_support_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'device'"):
        H100.device = "cpu"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'sdpa'"):
        ANY_MODEL.sdpa = False  # type: ignore[misc]


@pytest.mark.parametrize(
    ("hw", "cuda", "ampere"),
    [
        (CPU, False, False),
        (T4, True, False),
        (A100, True, True),
        (H100, True, True),
        (Hardware(device="cuda", capability=None), True, False),
    ],
)
def test_cuda_and_ampere_properties(hw, cuda, ampere):
    assert hw.cuda is cuda
    assert hw.ampere_or_newer is ampere


# --- precision -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["tf32", "bf16+tf32"])
@pytest.mark.parametrize("hw", [CPU_ALL_PACKAGES, T4], ids=["cpu", "cuda-7.5"])
def test_tf32_needs_an_ampere_cuda_gpu(value, hw):
    # bf16 support is switched on so that only the tf32 rule can object
    hw = dataclasses.replace(hw, bf16=True)
    assert_unavailable("precision", value, hw, r"tf32 needs an NVIDIA Ampere \(sm_80\) or newer GPU")


def test_tf32_capability_without_cuda_is_still_unavailable():
    # a capability on a non-CUDA device (never detected, but describable) does not unlock tf32
    hw = Hardware(device="cpu", capability=(9, 0))
    assert_unavailable("precision", "tf32", hw, "Ampere")


@pytest.mark.parametrize("value", ["tf32", "bf16+tf32"])
@pytest.mark.parametrize("hw", [A100, H100], ids=["cuda-8.0", "cuda-9.0"])
def test_tf32_on_ampere_or_newer(value, hw):
    assert_available("precision", value, hw)


@pytest.mark.parametrize("value", ["bf16", "bf16+tf32"])
def test_bf16_needs_bf16_support(value):
    no_bf16 = dataclasses.replace(A100, bf16=False)
    assert_unavailable("precision", value, no_bf16, "^NVIDIA A100-SXM4-80GB has no bf16 support$")
    assert_available("precision", value, A100)


def test_bf16_on_cpu_follows_the_flag():
    assert_available("precision", "bf16", CPU)
    assert_unavailable("precision", "bf16", dataclasses.replace(CPU, bf16=False), "^cpu has no bf16 support$")


@pytest.mark.parametrize("hw", [CPU, T4, H100], ids=["cpu", "t4", "h100"])
def test_fp32_always_available(hw):
    assert_available("precision", "fp32", dataclasses.replace(hw, bf16=False))


def test_fp16_needs_a_gpu():
    # on CPU accelerate would train in fp32 while the trial says fp16
    assert_unavailable("precision", "fp16", CPU_ALL_PACKAGES, "needs a GPU")
    assert_available("precision", "fp16", T4)  # no bf16 and pre-Ampere: fp16 is the one half precision


# --- optimizer -------------------------------------------------------------------------------------


def test_fused_adamw_needs_a_fused_implementation():
    for hw in (CPU, H100):
        assert_available("optim", "adamw_torch_fused", hw)
        assert_unavailable(
            "optim", "adamw_torch_fused", dataclasses.replace(hw, fused_adamw=False), "fused implementation"
        )


@pytest.mark.parametrize(
    ("value", "package"),
    [
        ("adamw_bnb_8bit", "bitsandbytes"),
        ("paged_adamw_8bit", "bitsandbytes"),
        ("adamw_torch_8bit", "torchao"),
    ],
)
def test_8bit_optimizers_need_their_package_and_cuda(value, package):
    assert_available("optim", value, H100)
    # the package missing on a GPU
    reason = assert_unavailable(
        "optim", value, without_package(H100, package), f"^needs the {package} package"
    )
    assert f"pip install {package}" in reason
    # the package present without a GPU
    assert_unavailable("optim", value, CPU_ALL_PACKAGES, f"^{package} 8-bit optimizers need a CUDA GPU$")
    # neither: the package is reported first
    assert_unavailable("optim", value, CPU, f"^needs the {package} package")


def test_8bit_optimizer_packages_are_not_interchangeable():
    only_torchao = dataclasses.replace(H100, packages=frozenset({"torchao"}))
    assert_unavailable("optim", "adamw_bnb_8bit", only_torchao, "bitsandbytes")
    assert_available("optim", "adamw_torch_8bit", only_torchao)


@pytest.mark.parametrize("value", ["adamw_torch", "adafactor", "sgd", "adagrad", "rmsprop"])
def test_plain_optimizers_always_available(value):
    bare = Hardware(fused_adamw=False, cxx_compiler=False, bf16=False)
    assert_available("optim", value, bare)


# --- torch.compile ---------------------------------------------------------------------------------


def test_inductor_on_cuda_needs_triton():
    assert_available("torch_compile", "inductor", H100)
    assert_unavailable(
        "torch_compile", "inductor", without_package(H100, "triton"), "^inductor on CUDA needs the triton"
    )
    # the C++ compiler does not matter on CUDA in these rules
    assert_available("torch_compile", "inductor", dataclasses.replace(H100, cxx_compiler=False))


def test_inductor_on_cpu_needs_a_cxx_compiler():
    assert_available("torch_compile", "inductor", CPU)  # triton is not needed on CPU
    assert_unavailable("torch_compile", "inductor", CPU_NO_COMPILER, r"C\+\+ compiler")


def test_cudagraphs_needs_cuda():
    assert_unavailable("torch_compile", "cudagraphs", CPU_ALL_PACKAGES, "^CUDA graphs need a CUDA GPU$")
    assert_available("torch_compile", "cudagraphs", T4)


@pytest.mark.parametrize("value", ["off", "aot_eager", "eager"])
def test_other_backends_always_available(value):
    assert_available("torch_compile", value, CPU_NO_COMPILER)
    assert_available("torch_compile", value, H100_NO_PACKAGES)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
def test_compile_modes_other_than_default_need_cuda(mode):
    reason = assert_unavailable("torch_compile_mode", mode, CPU_ALL_PACKAGES, "without a CUDA GPU")
    assert mode in reason
    assert_available("torch_compile_mode", mode, T4)


def test_default_compile_mode_always_available():
    assert_available("torch_compile_mode", "default", CPU_NO_COMPILER)
    assert_available("torch_compile_mode", "default", H100)


# --- attention -------------------------------------------------------------------------------------


def test_eager_attention_always_available():
    assert_available("attn_implementation", "eager", CPU, BARE_MODEL)


def test_sdpa_needs_model_support():
    assert_available("attn_implementation", "sdpa", CPU)
    assert_unavailable("attn_implementation", "sdpa", H100, "^OldModel does not support sdpa", BARE_MODEL)


def test_flash_attention_2_available_on_a_capable_gpu():
    assert_available("attn_implementation", "flash_attention_2", H100)
    assert_available("attn_implementation", "flash_attention_2", A100)


@pytest.mark.parametrize(
    ("hw", "model", "pattern"),
    [
        (H100, BARE_MODEL, "^OldModel does not support flash_attention_2$"),
        (CPU_ALL_PACKAGES, ANY_MODEL, "^flash_attention_2 needs a CUDA GPU$"),
        (without_package(H100, "flash_attn"), ANY_MODEL, r"flash-attn package \(pip install flash-attn\)"),
        (T4, ANY_MODEL, r"needs an Ampere \(sm_80\) or newer GPU"),
    ],
    ids=["model", "cpu", "package", "turing"],
)
def test_flash_attention_2_requirements(hw, model, pattern):
    assert_unavailable("attn_implementation", "flash_attention_2", hw, pattern, model)


def test_flash_attention_2_model_support_is_checked_before_hardware():
    assert_unavailable("attn_implementation", "flash_attention_2", CPU, "^OldModel does not", BARE_MODEL)


def test_flex_attention_needs_model_support_and_cuda():
    assert_available("attn_implementation", "flex_attention", T4)
    assert_unavailable(
        "attn_implementation",
        "flex_attention",
        H100,
        "^OldModel does not support flex_attention$",
        BARE_MODEL,
    )
    assert_unavailable("attn_implementation", "flex_attention", CPU_ALL_PACKAGES, "on CPU")


# --- checkpointing, data loading, cache ------------------------------------------------------------


def test_activation_checkpointing_needs_model_support():
    assert_available("activation_checkpointing", True, CPU)
    assert_unavailable(
        "activation_checkpointing",
        True,
        H100,
        "^OldModel does not support activation checkpointing$",
        BARE_MODEL,
    )
    assert_available("activation_checkpointing", False, CPU, BARE_MODEL)


def test_pin_memory_needs_cuda():
    assert_unavailable("dataloader_pin_memory", True, CPU_ALL_PACKAGES, "GPU")
    assert_available("dataloader_pin_memory", True, T4)
    assert_available("dataloader_pin_memory", False, CPU)


@pytest.mark.parametrize("steps", [1, 50])
def test_empty_cache_steps_need_cuda(steps):
    assert_unavailable("torch_empty_cache_steps", steps, CPU_ALL_PACKAGES, "without a GPU")
    assert_available("torch_empty_cache_steps", steps, T4)


def test_empty_cache_never_is_always_available():
    assert_available("torch_empty_cache_steps", 0, CPU)


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("per_device_train_batch_size", 4096),
        ("gradient_accumulation_steps", 64),
        ("dataloader_num_workers", 16),
        ("not_a_knob", "anything"),
    ],
)
def test_knobs_without_rules_are_always_available(knob, value):
    bare = Hardware(bf16=False, cxx_compiler=False, fused_adamw=False)
    assert_available(knob, value, bare, BARE_MODEL)


def test_every_catalogue_knob_is_handled():
    # Every knob can be asked about without error on the least capable description.
    bare = Hardware(bf16=False, cxx_compiler=False, fused_adamw=False)
    for name, knob in CATALOGUE.items():
        for value in knob.choices or (False, True, 0, 1):
            reason = value_unavailable(name, value, bare, BARE_MODEL)
            assert reason is None or (isinstance(reason, str) and reason), (name, value)


# --- combination_unavailable -----------------------------------------------------------------------


def test_combination_all_available():
    values = {
        "per_device_train_batch_size": 64,
        "precision": "bf16+tf32",
        "optim": "adamw_torch_fused",
        "torch_compile": "inductor",
        "torch_compile_mode": "max-autotune",
        "attn_implementation": "flash_attention_2",
        "activation_checkpointing": True,
        "dataloader_pin_memory": True,
        "torch_empty_cache_steps": 50,
    }
    assert combination_unavailable(values, H100, ANY_MODEL) is None
    assert combination_unavailable({}, CPU, BARE_MODEL) is None


def test_combination_reports_the_first_unavailable_value():
    values = {"precision": "tf32", "optim": "adamw_bnb_8bit", "torch_compile": "off"}
    knob, reason = combination_unavailable(values, CPU, ANY_MODEL)
    assert knob == "precision"
    assert reason == value_unavailable("precision", "tf32", CPU, ANY_MODEL)
    reordered = {"optim": "adamw_bnb_8bit", "precision": "tf32"}
    assert combination_unavailable(reordered, CPU, ANY_MODEL) == (
        "optim",
        value_unavailable("optim", "adamw_bnb_8bit", CPU, ANY_MODEL),
    )


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_flash_attention_2_needs_half_precision(precision):
    values = {"precision": precision, "attn_implementation": "flash_attention_2"}
    assert combination_unavailable(values, H100, ANY_MODEL) == (
        "attn_implementation",
        f"flash_attention_2 runs in fp16 or bf16 only, not with precision {precision}",
    )


def test_flash_attention_2_without_a_precision_knob_means_fp32():
    blocked = combination_unavailable({"attn_implementation": "flash_attention_2"}, H100, ANY_MODEL)
    assert blocked is not None
    assert blocked[0] == "attn_implementation"
    assert blocked[1].endswith("not with precision fp32")


@pytest.mark.parametrize("precision", ["fp16", "bf16", "bf16+tf32"])
def test_flash_attention_2_with_half_precision_runs(precision):
    values = {"precision": precision, "attn_implementation": "flash_attention_2"}
    assert combination_unavailable(values, H100, ANY_MODEL) is None


def test_single_value_rules_come_before_combination_rules():
    values = {"precision": "fp32", "attn_implementation": "flash_attention_2"}
    assert combination_unavailable(values, T4, ANY_MODEL) == (
        "attn_implementation",
        value_unavailable("attn_implementation", "flash_attention_2", T4, ANY_MODEL),
    )


def test_fp32_with_other_attention_is_fine():
    for attention in ("eager", "sdpa", "flex_attention"):
        assert (
            combination_unavailable({"precision": "fp32", "attn_implementation": attention}, H100, ANY_MODEL)
            is None
        )


# --- batch_multiple --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "multiple"),
    [
        ("NVIDIA A100-SXM4-80GB", 64),
        ("NVIDIA A100-PCIE-40GB", 64),
        ("NVIDIA H100 80GB HBM3", 64),
        ("NVIDIA H200", 64),
        ("NVIDIA L4", 8),
        ("Tesla T4", 8),
        ("NVIDIA GeForce RTX 4090", 8),
    ],
)
def test_batch_multiple_on_cuda(name, multiple):
    got, why = Hardware(device="cuda", name=name, capability=(8, 0)).batch_multiple()
    assert got == multiple
    assert why.startswith(f"{name}: ")
    assert why.endswith(f"multiples of {multiple}")


def test_batch_multiple_on_cpu():
    multiple, why = CPU.batch_multiple()
    assert multiple == 1
    assert why.startswith("CPU")
    # the name alone does not make a CPU a tensor-core device
    assert Hardware(device="cpu", name="NVIDIA H100 80GB HBM3").batch_multiple()[0] == 1


def test_batch_multiple_small_workstation_gpu_is_not_a100_class():
    multiple, why = Hardware(device="cuda", name="NVIDIA RTX A1000", capability=(8, 6)).batch_multiple()
    assert multiple == 8
    assert "A100/H100-class" not in why


# --- to_dict ---------------------------------------------------------------------------------------


def test_to_dict_is_json_serialisable_with_sorted_packages():
    hw = dataclasses.replace(H100, packages=frozenset({"triton", "bitsandbytes", "flash_attn"}))
    data = hw.to_dict()
    assert data["packages"] == ["bitsandbytes", "flash_attn", "triton"]
    assert data["capability"] == [9, 0]
    again = json.loads(json.dumps(data))
    assert again == data
    assert again["device"] == "cuda"
    assert again["name"] == "NVIDIA H100 80GB HBM3"
    assert again["memory_bytes"] == 80 * 2**30
    assert set(again) == {f.name for f in dataclasses.fields(Hardware)}


def test_to_dict_on_cpu():
    data = CPU.to_dict()
    assert data["capability"] is None
    assert data["packages"] == []
    assert json.loads(json.dumps(data)) == data


# --- detection on this machine ---------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine without a GPU")
def test_detect_hardware_on_this_cpu_machine():
    hw = detect_hardware()
    assert hw.device == "cpu"
    assert hw.name == "cpu"
    assert hw.capability is None
    assert hw.cuda is False
    assert hw.count == 1
    assert hw.fused_adamw is True  # torch >= 2.4 has a fused AdamW
    assert hw.memory_bytes > 0
    assert hw.packages <= ALL_PACKAGES
    assert hw.cxx_compiler is any(shutil.which(c) for c in ("g++", "c++", "clang++"))
    assert hw.batch_multiple()[0] == 1
    json.dumps(hw.to_dict())


def test_model_support_gpt2():
    support = model_support(GPT2LMHeadModel)
    assert support.name == "GPT2LMHeadModel"
    assert support.sdpa is True
    assert support.flex_attn is False
    assert support.gradient_checkpointing is True
    reason = value_unavailable("attn_implementation", "flex_attention", H100, support)
    assert reason is not None
    assert "GPT2LMHeadModel" in reason


def test_model_support_llama():
    support = model_support(LlamaForCausalLM)
    assert support == ModelSupport(
        name="LlamaForCausalLM", sdpa=True, flash_attn=True, flex_attn=True, gradient_checkpointing=True
    )


def test_model_support_of_a_class_without_flags():
    class Plain:
        pass

    assert model_support(Plain) == ModelSupport(
        name="Plain",
        sdpa=False,
        flash_attn=False,
        flex_attn=False,
        gradient_checkpointing=False,
        packed_positions=False,
    )


def test_packed_positions_are_read_from_the_modeling_code():
    from transformers import BertForSequenceClassification, GPT2ForSequenceClassification

    # Causal LMs whose masks come from create_causal_mask(position_ids=...) keep flattened rows apart.
    assert model_support(GPT2LMHeadModel).packed_positions is True
    assert model_support(LlamaForCausalLM).packed_positions is True
    # A classifier pools one row per sample: flattening would merge them.
    assert model_support(GPT2ForSequenceClassification).packed_positions is False
    assert model_support(BertForSequenceClassification).packed_positions is False


def test_padding_knobs_need_padded_data():
    fixed_length = ModelSupport(name="GPT2LMHeadModel", padded=False)
    for knob in ("padding_free", "group_by_length"):
        reason = value_unavailable(knob, True, CPU, fixed_length)
        assert reason is not None and "same length" in reason, knob
        assert value_unavailable(knob, False, CPU, fixed_length) is None
        assert value_unavailable(knob, True, CPU, ModelSupport(name="GPT2LMHeadModel")) is None


def test_padding_free_needs_a_model_that_keeps_flattened_sequences_apart():
    classifier = ModelSupport(name="BertForSequenceClassification", packed_positions=False)
    reason = value_unavailable("padding_free", True, CPU, classifier)
    assert reason is not None and "BertForSequenceClassification" in reason
    # Length grouping only reorders samples: any model takes it.
    assert value_unavailable("group_by_length", True, CPU, classifier) is None


def test_fsdp_needs_gpus_and_zero_needs_deepspeed():
    any_model = ModelSupport(name="LlamaForCausalLM")
    for strategy in ("fsdp_full_shard", "fsdp_shard_grad_op"):
        reason = value_unavailable("data_parallel", strategy, CPU, any_model)
        assert reason is not None and "plain DDP" in reason
        assert value_unavailable("data_parallel", strategy, H100, any_model) is None
    without = dataclasses.replace(H100, packages=frozenset())
    for stage in (1, 2, 3):
        reason = value_unavailable("data_parallel", f"zero{stage}", without, any_model)
        assert reason is not None and "deepspeed" in reason
        with_ds = dataclasses.replace(CPU, packages=frozenset({"deepspeed"}))
        assert value_unavailable("data_parallel", f"zero{stage}", with_ds, any_model) is None
    assert value_unavailable("data_parallel", "ddp", CPU, any_model) is None


# -- TRL's SFTConfig knobs -----------------------------------------------------------------------

SFT = ModelSupport(sft=True, sft_truncates=True)


@pytest.mark.parametrize("knob", ["packing", "activation_offloading"])
def test_trl_knobs_exist_only_on_an_sft_config(knob: str) -> None:
    for value in (False, True):  # not even False: the field is not on TrainingArguments
        assert (
            value_unavailable(knob, value, A100, ModelSupport())
            == "not an SFTConfig: a TRL SFTTrainer's own setting"
        )
        assert value_unavailable(knob, value, A100, SFT) is None


def test_activation_offloading_needs_a_cuda_gpu() -> None:
    reason = value_unavailable("activation_offloading", True, CPU_ALL_PACKAGES, SFT)
    assert reason is not None and "CUDA GPU" in reason
    assert value_unavailable("activation_offloading", False, CPU_ALL_PACKAGES, SFT) is None


def test_packing_mirrors_trl_s_refusals() -> None:
    # TRL packs into max_length rows, and cannot unpack a dataset its config packed already
    reason = value_unavailable("packing", True, CPU, dataclasses.replace(SFT, sft_truncates=False))
    assert reason is not None and "max_length is None" in reason
    reason = value_unavailable("packing", False, CPU, dataclasses.replace(SFT, sft_packed=True))
    assert reason is not None and "packed already" in reason
    reason = value_unavailable("packing", True, CPU, dataclasses.replace(SFT, sft_prepares=False))
    assert reason is not None and "skip_prepare_dataset" in reason


def test_padding_free_on_an_sft_trainer_mirrors_trl_s_refusals() -> None:
    # padding-free without packing does not truncate: TRL refuses it while max_length is set
    assert combination_unavailable({"padding_free": True, "packing": False}, CPU, SFT) == (
        "padding_free",
        "TRL does not truncate padding-free batches without packing (SFTConfig max_length set)",
    )
    assert combination_unavailable({"padding_free": True, "packing": True}, CPU, SFT) is None
    untruncated = dataclasses.replace(SFT, sft_truncates=False)
    assert combination_unavailable({"padding_free": True, "packing": False}, CPU, untruncated) is None
    # a custom collator: TRL builds its own padding-free one, and refuses another
    custom = dataclasses.replace(SFT, sft_collator=False)
    reason = value_unavailable("padding_free", True, CPU, custom)
    assert reason is not None and "custom data collator" in reason
