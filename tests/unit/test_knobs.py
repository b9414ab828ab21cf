"""The knob catalogue: legal values, and how a trial's values land in TrainingArguments."""

from __future__ import annotations

import dataclasses

import pytest
import transformers
from transformers.training_args import OptimizerNames

from autotune.space.knobs import (
    ATTENTION,
    CATALOGUE,
    COMPILE_BACKENDS,
    OPTIMIZER_FAMILY,
    OPTIMIZERS,
    PRECISIONS,
    SFT_KNOBS,
    optimizer_family,
)
from autotune.space.mapping import data_choices, trial_kwargs

TRAINING_ARGS_FIELDS = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}

PRECISION_FLAGS = {
    "fp32": {"bf16": False, "fp16": False, "tf32": False},
    "tf32": {"bf16": False, "fp16": False, "tf32": True},
    "fp16": {"bf16": False, "fp16": True, "tf32": False},
    "bf16": {"bf16": True, "fp16": False, "tf32": False},
    "bf16+tf32": {"bf16": True, "fp16": False, "tf32": True},
    # fp8: bf16 arguments; the Accelerator is made fp8 (`autotune.space.mapping.fp8_trial`)
    "fp8": {"bf16": True, "fp16": False, "tf32": False},
}


def legal_values(name: str) -> list:
    knob = CATALOGUE[name]
    if knob.kind == "int":
        return [1, 2, 8, 1024]
    if knob.kind == "count":
        return [0, 1, 2, 8]
    if knob.kind == "bool":
        return [False, True]
    return list(knob.choices)


# --- trial_kwargs ----------------------------------------------------------------------------------


def test_every_precision_is_mapped():
    assert set(PRECISION_FLAGS) == set(PRECISIONS)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_precision_flags(precision):
    args, model = trial_kwargs({"precision": precision})
    assert args == PRECISION_FLAGS[precision]
    assert model == {}


def test_precision_mapping_is_a_fresh_dict_each_time():
    args, _ = trial_kwargs({"precision": "bf16"})
    args["bf16"] = False
    assert trial_kwargs({"precision": "bf16"})[0]["bf16"] is True


def test_compile_off():
    args, model = trial_kwargs({"torch_compile": "off"})
    assert args == {"torch_compile": False, "torch_compile_backend": None}
    assert model == {}


@pytest.mark.parametrize("backend", [b for b in COMPILE_BACKENDS if b != "off"])
def test_compile_backend(backend):
    args, model = trial_kwargs({"torch_compile": backend})
    assert args == {"torch_compile": True, "torch_compile_backend": backend}
    assert model == {}


@pytest.mark.parametrize("attn", ATTENTION)
def test_attention_goes_to_model_kwargs_only(attn):
    args, model = trial_kwargs({"attn_implementation": attn})
    assert args == {}
    assert model == {"attn_implementation": attn}


def test_plain_fields_pass_through():
    values = {
        "per_device_train_batch_size": 16,
        "gradient_accumulation_steps": 4,
        "optim": "adafactor",
        "activation_checkpointing": True,
    }
    args, model = trial_kwargs(values)
    assert args == values
    assert model == {}


def test_all_knobs_together():
    args, model = trial_kwargs(
        {
            "per_device_train_batch_size": 8,
            "gradient_accumulation_steps": 2,
            "precision": "bf16+tf32",
            "optim": "sgd",
            "torch_compile": "inductor",
            "attn_implementation": "sdpa",
            "activation_checkpointing": False,
        }
    )
    assert args == {
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 2,
        "bf16": True,
        "fp16": False,
        "tf32": True,
        "optim": "sgd",
        "torch_compile": True,
        "torch_compile_backend": "inductor",
        "activation_checkpointing": False,
    }
    assert model == {"attn_implementation": "sdpa"}


def test_unknown_knob_is_a_key_error():
    with pytest.raises(KeyError, match="learning_rate"):
        trial_kwargs({"learning_rate": 1e-3})


@pytest.mark.parametrize("name", [n for n, k in CATALOGUE.items() if k.target == "args"])
def test_args_knobs_land_on_real_training_arguments_fields(name):
    for value in legal_values(name):
        args, model = trial_kwargs({name: value})
        # Only group_by_length=false and data_parallel=ddp set nothing: they leave the sampler and
        # the ranks' wrapper to the base config (the Trainer's own DDP).
        assert args or (name, value) in (("group_by_length", False), ("data_parallel", "ddp")), (name, value)
        fields = _sft_config_fields() if name in SFT_KNOBS else TRAINING_ARGS_FIELDS
        assert set(args) <= fields, (name, value)
        assert model == {}


def test_graded_checkpointing_and_length_grouping_land_where_transformers_reads_them():
    assert trial_kwargs({"checkpoint_every_n_layers": 3})[0] == {
        "activation_checkpointing_kwargs": {"every_n_layers": 3}
    }
    assert trial_kwargs({"group_by_length": True})[0] == {"train_sampling_strategy": "group_by_length"}
    assert trial_kwargs({"group_by_length": False})[0] == {}


def test_each_data_parallel_strategy_lands_in_the_fields_transformers_reads():
    assert trial_kwargs({"data_parallel": "ddp"})[0] == {}
    full = trial_kwargs({"data_parallel": "fsdp_full_shard"})[0]
    grad_op = trial_kwargs({"data_parallel": "fsdp_shard_grad_op"})[0]
    assert full == {"fsdp": True, "fsdp_config": {"version": 2, "reshard_after_forward": True}}
    assert grad_op == {"fsdp": True, "fsdp_config": {"version": 2, "reshard_after_forward": False}}
    for stage in (1, 2, 3):
        ds = trial_kwargs({"data_parallel": f"zero{stage}"})[0]["deepspeed"]
        assert ds["zero_optimization"] == {"stage": stage}
        assert ds["train_micro_batch_size_per_gpu"] == "auto"  # the batch stays TrainingArguments'


def test_padding_free_lands_in_neither_dict_but_in_data_choices():
    values = {"padding_free": True, "precision": "fp32"}
    args, model = trial_kwargs(values)
    assert "padding_free" not in args and model == {}
    assert data_choices(values) == {"padding_free": True}
    assert data_choices({"precision": "fp32"}) == {}


# --- Knob.check ------------------------------------------------------------------------------------


def _sft_config_fields() -> set[str]:
    """The fields TRL's SFTConfig adds to TrainingArguments (TRL imported only here: it is slow)."""
    import trl

    return {f.name for f in dataclasses.fields(trl.SFTConfig)} - TRAINING_ARGS_FIELDS


def test_catalogue_keys_match_knob_names():
    assert all(name == knob.name for name, knob in CATALOGUE.items())
    assert set(CATALOGUE) == {
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "precision",
        "optim",
        "torch_compile",
        "torch_compile_mode",
        "attn_implementation",
        "activation_checkpointing",
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "ddp_find_unused_parameters",
        "ddp_bucket_cap_mb",
        "ddp_static_graph",
        "ddp_broadcast_buffers",
        "torch_empty_cache_steps",
        "checkpoint_every_n_layers",
        "gradient_checkpointing_reentrant",
        "padding_free",
        "group_by_length",
        "data_parallel",
        "base_weights",
        "use_liger_kernel",
        "pad_to_multiple_of",
        "packing",
        "activation_offloading",
    }


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_check_accepts_legal_values(name):
    for value in legal_values(name):
        assert CATALOGUE[name].check(value) is None, value


INT_BAD = [0, -1, True, False, 8.0, "8", None]
COUNT_BAD = [-1, True, False, 2.0, "2", None]
BOOL_BAD = [0, 1, "true", "yes", None]
CHOICE_BAD = ["bogus", "", None, 1, True, False]


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_check_rejects_illegal_values(name):
    knob = CATALOGUE[name]
    bad = {"int": INT_BAD, "count": COUNT_BAD, "bool": BOOL_BAD, "choice": CHOICE_BAD}[knob.kind]
    if knob.kind == "choice":
        bad = [*bad, knob.choices[0].upper() + "X", [knob.choices[0]]]
    for value in bad:
        problem = knob.check(value)
        assert problem is not None, value
        assert repr(value) in problem


def test_empty_cache_zero_means_never():
    assert trial_kwargs({"torch_empty_cache_steps": 0})[0] == {"torch_empty_cache_steps": None}
    assert trial_kwargs({"torch_empty_cache_steps": 4})[0] == {"torch_empty_cache_steps": 4}


def test_compile_mode_requires_inductor():
    assert CATALOGUE["torch_compile_mode"].requires == ("torch_compile", ("inductor",))
    assert trial_kwargs({"torch_compile": "inductor", "torch_compile_mode": "max-autotune"})[0] == {
        "torch_compile": True,
        "torch_compile_backend": "inductor",
        "torch_compile_mode": "max-autotune",
    }


def test_check_messages():
    assert CATALOGUE["per_device_train_batch_size"].check(0) == "expected a positive integer, got 0"
    assert CATALOGUE["activation_checkpointing"].check("no") == "expected true or false, got 'no'"
    assert CATALOGUE["precision"].check("fp4") == "'fp4' is not one of " + ", ".join(PRECISIONS)


# --- optimizers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("optim", OPTIMIZERS)
def test_optimizer_is_known_to_installed_transformers(optim):
    assert optim in {member.value for member in OptimizerNames}
    assert OptimizerNames(optim).value == optim


def test_every_optimizer_has_a_family():
    assert set(OPTIMIZER_FAMILY) == set(OPTIMIZERS)
    assert set(CATALOGUE["optim"].choices) == set(OPTIMIZERS)


@pytest.mark.parametrize(
    ("optim", "family"),
    [
        ("adamw_torch", "adamw"),
        ("adamw_torch_fused", "adamw"),
        ("adamw_bnb_8bit", "adamw_8bit"),
        ("paged_adamw_8bit", "adamw_8bit"),
        ("adamw_torch_8bit", "adamw_8bit"),
        ("adafactor", "adafactor"),
        ("sgd", "sgd"),
        ("not_in_catalogue", "not_in_catalogue"),
    ],
)
def test_optimizer_family(optim, family):
    assert optimizer_family(optim) == family


# --- real TrainingArguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("precision", "compile_", "mixed"),
    [
        ("fp32", "off", "no"),
        ("bf16", "off", "bf16"),
        ("fp16", "off", "fp16"),
        ("fp32", "inductor", "no"),
        ("bf16", "aot_eager", "bf16"),
    ],
)
def test_mapping_lands_on_real_training_arguments(tmp_path, precision, compile_, mixed):
    args, model = trial_kwargs(
        {
            "per_device_train_batch_size": 4,
            "gradient_accumulation_steps": 2,
            "precision": precision,
            "optim": "adamw_torch_fused",
            "torch_compile": compile_,
            "attn_implementation": "sdpa",
            "activation_checkpointing": True,
        }
    )
    ta = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **args)
    assert ta.mixed_precision == mixed
    assert ta.bf16 is (precision == "bf16")
    assert ta.fp16 is (precision == "fp16")
    assert ta.tf32 is False
    assert ta.torch_compile is (compile_ != "off")
    assert ta.torch_compile_backend == (None if compile_ == "off" else compile_)
    assert ta.optim == OptimizerNames.ADAMW_TORCH_FUSED
    assert ta.per_device_train_batch_size == 4
    assert ta.gradient_accumulation_steps == 2
    assert ta.activation_checkpointing is True
    assert model == {"attn_implementation": "sdpa"}


def test_ddp_knobs_land_in_training_arguments_and_only_in_trials_of_several_ranks() -> None:
    from autotune.space import parse_space

    values = {
        "ddp_find_unused_parameters": False,
        "ddp_bucket_cap_mb": 50,
        "ddp_static_graph": True,
        "ddp_broadcast_buffers": False,
    }
    args, model = trial_kwargs(values)
    assert args == values and model == {}
    space = parse_space(
        {"knobs": {"ddp_static_graph": [True, False], "optim": ["adamw_torch"]}}, name="t", source="t"
    )
    alone, gone = space.for_world_size(1)
    assert "ddp_static_graph" not in alone.knobs and "optim" in alone.knobs
    assert gone == ["ddp_static_graph: only in trials of more than one rank"]
    assert space.for_world_size(2) == (space, [])


def test_a_ddp_error_about_unused_parameters_has_its_reason() -> None:
    from autotune.trial.errors import failure_reason

    error = RuntimeError(
        "Expected to have finished reduction in the prior iteration before starting a new one. This "
        "error indicates that your module has parameters that were not used in producing loss."
    )
    assert failure_reason(error) == "unused_parameters"
    assert failure_reason(RuntimeError("something else")) == "error"


def test_short_labels_and_the_memory_kind_hang_on_the_knobs() -> None:
    from autotune.progress import short_name
    from autotune.space.knobs import CATALOGUE, MEASURED_KIND_KNOBS

    assert short_name("use_liger_kernel") == "liger" and short_name("per_device_train_batch_size") == "bs"
    assert short_name("not_a_knob") == "not_a_knob"
    assert set(MEASURED_KIND_KNOBS) == {n for n, k in CATALOGUE.items() if k.measured_kind}
    assert {"torch_compile", "use_liger_kernel", "pad_to_multiple_of"} <= set(MEASURED_KIND_KNOBS)
