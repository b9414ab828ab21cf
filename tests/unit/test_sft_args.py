"""TRL's SFTConfig as tune() reads it: what the user set, the baseline's knob values, the answer's fields."""

from __future__ import annotations

from pathlib import Path

from transformers import TrainingArguments
from trl import SFTConfig

from autotune.driver.tune import given_training_args
from autotune.space.defaults import knob_defaults, training_arguments
from autotune.workloads.sft import is_sft_config, sft_data_args


def test_an_sft_config_is_known_by_its_class() -> None:
    assert is_sft_config(SFTConfig(output_dir="out", use_cpu=True))
    assert not is_sft_config(TrainingArguments(output_dir="out"))


def test_given_args_spell_out_what_sft_config_changed_and_its_knobs(tmp_path: Path) -> None:
    given = given_training_args(
        SFTConfig(output_dir=str(tmp_path), use_cpu=True, max_length=64, learning_rate=5e-5)
    )
    # SFTConfig's own defaults over TrainingArguments' (checkpointing on, its learning rate, bf16)
    assert given["activation_checkpointing"] is True and given["bf16"] is True
    assert given["learning_rate"] == 5e-5  # TrainingArguments' default, but not SFTConfig's
    assert given["max_length"] == 64 and given["packing"] is False  # its own field; a knob always
    assert "dataset_text_field" not in given  # its own default
    rebuilt = training_arguments(SFTConfig, **given)
    assert isinstance(rebuilt, SFTConfig) and rebuilt.max_length == 64


def test_the_baseline_of_an_sft_config_is_what_sft_trainer_runs(tmp_path: Path) -> None:
    base = {"max_length": 64, "packing": True, "use_cpu": True}
    values = knob_defaults(base, sdpa=True, cuda=False, args_class=SFTConfig)
    # SFTConfig checkpoints by default; best-fit packing runs padding-free
    assert values["activation_checkpointing"] is True and values["packing"] is True
    assert values["padding_free"] is True and values["activation_offloading"] is False
    assert "packing" not in knob_defaults(None, sdpa=True, cuda=False)


def test_the_answer_s_data_knobs_are_sft_config_fields() -> None:
    params = {"padding_free": True, "pad_to_multiple_of": 1, "per_device_train_batch_size": 4}
    assert sft_data_args(SFTConfig, params) == {"padding_free": True, "pad_to_multiple_of": None}
    assert sft_data_args(TrainingArguments, params) == {}


def test_keep_semantics_holds_an_sft_config_s_packing() -> None:
    from autotune.space import parse_space

    knobs = {"per_device_train_batch_size": [2, 4], "packing": [False, True]}
    space = parse_space({"knobs": knobs}, name="trl", source="trl.yaml")
    kept = space.keep_semantics({"packing": True, "per_device_train_batch_size": 4})
    assert "packing" not in kept.knobs and kept.fixed["packing"] is True


def test_a_trial_redoes_what_sft_trainer_derives_from_its_config(tmp_path: Path) -> None:
    import types

    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from autotune.trial.sft import prepare_trial
    from autotune.workloads.sft import SftPieces
    from autotune.workloads.user import UserWorkload

    collator = DataCollatorForLanguageModeling(pad_token_id=3, return_position_ids=True)
    pieces = SftPieces(packed=False, truncates=True, own_collator=True)
    workload = UserWorkload(
        name="m", task="causal-lm", config=None, seq_len=8, data_collator=collator, sft=pieces
    )
    args = SFTConfig(output_dir=str(tmp_path), use_cpu=True, use_liger_kernel=True)
    trainer = types.SimpleNamespace(args=args, data_collator=collator)
    prepare_trial(trainer, workload, {"padding_free": True, "pad_to_multiple_of": 8})
    # TRL's own collator, padding-free as the knob says; the user's other settings kept
    made = trainer.data_collator
    assert made is not collator and made.padding_free is True
    assert (made.pad_to_multiple_of, made.pad_token_id, made.return_position_ids) == (8, 3, True)
    assert args.padding_free is True and trainer.padding_free is True
    # Liger's kernels as SFTTrainer applies them: without the fused cross-entropy that replaces TRL's head
    assert args.liger_kernel_config == {"fused_linear_cross_entropy": False}
