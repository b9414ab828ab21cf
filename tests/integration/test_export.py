"""Exported configs round-trip through the tools that consume them, and really train."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from transformers import HfArgumentParser, Trainer, TrainingArguments

from autotune.answer.decide import study_answer
from autotune.errors import UsageError
from autotune.export.config import export_config
from autotune.export.formats import notes, to_flags, to_json, to_python, to_yaml
from autotune.export.launchers import to_accelerate
from autotune.export.render import render
from autotune.store.session import StudyStore
from autotune.store.trials import summarize_trial
from autotune.workloads.workload import resolve_workload
from tests.unit.test_export import make_study, trial_spec

MiB = 2**20
KNOBS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "bf16",
    "fp16",
    "optim",
    "torch_compile",
    "torch_compile_backend",
    "activation_checkpointing",
)


@pytest.fixture(autouse=True)
def _keep_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    # TrainingArguments(torch_compile=True) exports ACCELERATE_DYNAMO_* variables: keep them here.
    monkeypatch.setattr(os, "environ", os.environ.copy())


@pytest.fixture
def study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return make_study(
        None,
        [
            # 0: the best trial, without compile (so the Trainer run stays fast)
            trial_spec(4, 2, "bf16", "adamw_torch", "off", "sdpa", True, 30000.0, 600),
            # 1: compiles with inductor
            trial_spec(8, 1, "bf16", "adamw_torch_fused", "inductor", "eager", False, 25000.0, 650),
            # 2: fp32, sgd: the best under a small cap
            trial_spec(4, 1, "fp32", "sgd", "off", "eager", False, 20000.0, 500),
        ],
        winner=0,
    )


def _config(study: optuna.Study, number: int) -> dict[str, Any]:
    return export_config(StudyStore(study), summarize_trial(study.trials[number]))


def _applied(study: optuna.Study, number: int, tmp_path: Path) -> TrainingArguments:
    """What the trial itself trained with."""
    return TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, **study.trials[number].user_attrs["training_args"]
    )


def _same_knobs(a: TrainingArguments, b: TrainingArguments) -> None:
    for knob in KNOBS:
        assert getattr(a, knob) == getattr(b, knob), knob


def _on_this_machine(config: dict[str, Any]) -> dict[str, Any]:
    """What a user adds on a machine without a GPU, as the search did: TrainingArguments refuses
    bf16 there unless told the CPU is meant."""
    return {"use_cpu": True} if config["training_args"].get("bf16") else {}


@pytest.mark.parametrize("number", [0, 1, 2])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_training_args_reproduce_the_trial(
    study: optuna.Study, tmp_path: Path, number: int, fmt: str
) -> None:
    path = tmp_path / f"best.{fmt}"
    path.write_text(to_json(_config(study, number)) if fmt == "json" else to_yaml(_config(study, number)))
    config = json.loads(path.read_text()) if fmt == "json" else yaml.safe_load(path.read_text())
    # No output_dir: transformers 5 defaults it (to trainer_output).
    args = TrainingArguments(**config["training_args"], **_on_this_machine(config))
    _same_knobs(args, _applied(study, number, tmp_path))


@pytest.mark.parametrize("number", [0, 1, 2])
def test_flags_file_parses_as_the_shell_passes_it(study: optuna.Study, tmp_path: Path, number: int) -> None:
    path = tmp_path / "flags.txt"
    config = _config(study, number)
    path.write_text(to_flags(config))
    # `python run_clm.py $(cat flags.txt)`: the words of the file, split on whitespace alone, and
    # nothing else (the example scripts need no --output_dir with transformers 5).
    words = path.read_text().split()
    extra = ["--use_cpu"] if _on_this_machine(config) else []
    parser = HfArgumentParser(TrainingArguments)
    (parsed,) = parser.parse_args_into_dataclasses(args=[*words, *extra])
    _same_knobs(parsed, _applied(study, number, tmp_path))
    assert parsed.tf32 is False  # set explicitly by the search, as the trial ran


def test_flags_with_a_base_config_dict_parse(tmp_path: Path) -> None:
    base = {"lr_scheduler_kwargs": {"num_cycles": 2}, "report_to": ["none"], "learning_rate": 3e-4}
    spec = trial_spec(4, 1, "fp32", "sgd", "off", "eager", False, 20000.0, 500)
    study = make_study(None, [spec], base_args=base)
    words = to_flags(_config(study, 0)).split()
    (parsed,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(args=words)
    assert parsed.lr_scheduler_kwargs == {"num_cycles": 2}
    assert parsed.learning_rate == 3e-4 and parsed.optim == "sgd"


@pytest.mark.parametrize(
    ("number", "precision", "backend"), [(0, "bf16", None), (1, "bf16", "INDUCTOR"), (2, "no", None)]
)
def test_accelerate_config_loads(
    study: optuna.Study, tmp_path: Path, number: int, precision: str, backend: str | None
) -> None:
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType, DynamoBackend

    path = tmp_path / "accelerate.yaml"
    path.write_text(to_accelerate(_config(study, number)))
    loaded = load_config_from_file(str(path))
    assert loaded.mixed_precision == precision
    assert loaded.distributed_type == DistributedType.NO
    assert loaded.num_processes == 1
    assert loaded.dynamo_config.get("dynamo_backend") == backend
    if backend is not None:
        DynamoBackend(backend)  # a value accelerate knows


def test_python_snippet_compiles_and_builds_the_args(study: optuna.Study, tmp_path: Path) -> None:
    text = to_python(_config(study, 1))
    compile(text, "export.py", "exec")
    # Run it with the model load stubbed out: the TrainingArguments it builds are the trial's.
    namespace: dict[str, Any] = {}
    text = text.replace('output_dir="output"', f"output_dir={str(tmp_path)!r}, use_cpu=True")
    text = text.replace("model = ", "model_call = lambda: ")
    exec(compile(text, "export.py", "exec"), namespace)
    _same_knobs(namespace["training_args"], _applied(study, 1, tmp_path))


def _chosen(study: optuna.Study, cap_bytes: int | None) -> int | None:
    choice = study_answer(StudyStore(study), cap_bytes).choice
    assert choice is not None
    return choice.trial


def test_memory_cap_reselects(study: optuna.Study) -> None:
    assert _chosen(study, None) == 0
    assert _chosen(study, 599 * MiB) == 2
    assert _chosen(study, 650 * MiB) == 0  # the winner fits: kept (trial 1 fits too)


def test_exported_json_trains(study: optuna.Study, tmp_path: Path) -> None:
    answer = study_answer(StudyStore(study))
    assert answer.choice is not None and answer.choice.trial == 0
    exported = json.loads(to_json(export_config(StudyStore(study), answer)))
    assert exported["expected"]["trial"] == 0 and exported["expected"]["remeasured"] is True
    assert "torch_compile" not in exported["training_args"]
    workload = resolve_workload(exported["expected"]["model"], exported["expected"]["seq_len"])
    model = workload.build_model(exported["model_kwargs"])
    args = TrainingArguments(
        output_dir=str(tmp_path),
        use_cpu=True,
        max_steps=2,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        **exported["training_args"],
    )
    assert args.bf16 and args.activation_checkpointing and args.gradient_accumulation_steps == 2
    output = Trainer(model=model, args=args, train_dataset=workload.dataset(0)).train()
    assert output.global_step == 2
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize(
    ("strategy", "kind"),
    [
        ("zero1", "DEEPSPEED"),
        ("zero2", "DEEPSPEED"),
        ("zero3", "DEEPSPEED"),
        ("fsdp_full_shard", "FSDP"),
        ("fsdp_shard_grad_op", "FSDP"),
        ("ddp", "MULTI_GPU"),
    ],
)
def test_a_sharded_winner_exports_the_accelerate_config_of_its_strategy(
    tmp_path: Path, strategy: str, kind: str
) -> None:
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    from autotune.space.mapping import trial_kwargs

    args, _ = trial_kwargs({"data_parallel": strategy, "per_device_train_batch_size": 8, "precision": "bf16"})
    config = {
        "training_args": args,
        "model_kwargs": {},
        "expected": {
            "world_size": 4,
            "device": "cuda",
            "trial": 7,
            "study": "s",
            "model": "m",
            "verdict": "trial 7, as chosen (its search window's figures)",
        },
    }
    path = tmp_path / "accelerate.yaml"
    path.write_text(to_accelerate(config))
    loaded = load_config_from_file(str(path))
    assert loaded.distributed_type == DistributedType[kind]
    assert loaded.num_processes == 4 and loaded.mixed_precision == "bf16"
    if kind == "DEEPSPEED":
        stage = int(strategy.removeprefix("zero"))
        assert loaded.deepspeed_config["zero_stage"] == stage
        assert loaded.deepspeed_config["zero3_init_flag"] is (stage == 3)
        # The ds_config the Trainer takes as it is: the stage, batch sizes left to the Trainer.
        ds_config = json.loads(render(config, "deepspeed"))
        assert ds_config["zero_optimization"] == {"stage": stage}
        assert ds_config["train_micro_batch_size_per_gpu"] == "auto"
        assert notes(config, "deepspeed") == notes(config, "flags")  # the expectation, on stderr
    elif kind == "FSDP":
        assert loaded.fsdp_config["fsdp_version"] == 2
        assert loaded.fsdp_config["fsdp_reshard_after_forward"] is (strategy == "fsdp_full_shard")
    if kind != "DEEPSPEED":
        with pytest.raises(UsageError, match="trial 7 trained without DeepSpeed"):
            render(config, "deepspeed")
