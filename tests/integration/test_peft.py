"""LoRA searches: ``--peft lora`` on a tiny Llama-style model, each trial in a worker process, and
`autotune.tune` on a Trainer whose model is a `PeftModel`. Every trial records the parameters it
trained, its memory estimate counts optimizer states for those alone, both reentrant and
non-reentrant checkpointing are measured, and the export's peft config loads as peft's own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import peft
import pytest
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

import autotune
from autotune.answer.decide import study_answer
from autotune.export.config import export_config
from autotune.export.words import answer_lines
from autotune.records import TrialRecord, read_study
from autotune.store.owner import Owner
from autotune.workloads.presets import PRESETS, preset_config
from tests.helpers import FAST_RUN, write_space

pytestmark = pytest.mark.timeout(400)

CHECKPOINTING = {
    "per_device_train_batch_size": [2],
    "activation_checkpointing": [False, True],
    "gradient_checkpointing_reentrant": [False, True],
}
EACH = [
    {"per_device_train_batch_size": 2, "activation_checkpointing": False},
    {
        "per_device_train_batch_size": 2,
        "activation_checkpointing": True,
        "gradient_checkpointing_reentrant": False,
    },
    {
        "per_device_train_batch_size": 2,
        "activation_checkpointing": True,
        "gradient_checkpointing_reentrant": True,
    },
]


def _trained(trials: list[TrialRecord]) -> list[TrialRecord]:
    trained = [t for t in trials if t.trained]
    assert trained, [(t.number, t.state, t.message) for t in trials]
    return trained


def _in_workers(trials: list[TrialRecord]) -> set[int]:
    owners = [Owner.from_attrs(t.owner) for t in trials]
    assert all(owner is not None for owner in owners)
    return {owner.pid for owner in owners if owner is not None}


def test_a_lora_search_measures_the_adapter_and_exports_its_config(tmp_path: Path) -> None:
    result = autotune.search(
        model="tiny-llama",
        space=write_space(tmp_path, CHECKPOINTING),
        trials=3,
        storage=f"sqlite:///{tmp_path / 'lora.db'}",
        seq_len=16,
        peft="lora",
        enqueue=EACH,
        **FAST_RUN,
    )
    trained = _trained(result.trials)
    assert os.getpid() not in _in_workers(trained)
    assert all(t.state == "COMPLETE" for t in trained), [(t.number, t.message) for t in trained]
    # Both checkpointing variants were measured, the adapter training in each.
    measured = {
        t.params.get("gradient_checkpointing_reentrant")
        for t in trained
        if t.params["activation_checkpointing"]
    }
    assert measured == {False, True}
    for trial in trained:
        trainable, total = trial.trainable_params, trial.total_params
        assert trainable is not None and total is not None and 0 < trainable < total / 10
        assert trial.tokens_per_s and trial.tokens_per_s > 0
        # fp32 weights (4 bytes each, frozen or not) and AdamW's gradient (4) and moments (8) for
        # the adapter's parameters alone.
        assert trial.memory.estimate is not None
        assert trial.memory.estimate["static_bytes"] == total * 4 + trainable * 12
    # The study keeps the adapter as peft resolved it; the export hands it back as peft loads it.
    stored = read_study(result.study).peft
    assert stored is not None and sorted(stored["target_modules"]) == ["q_proj", "v_proj"]
    exported = export_config(result.study, study_answer(result.study))
    config = peft.LoraConfig(**exported["peft"])
    assert config.task_type == "CAUSAL_LM" and set(config.target_modules) == {"q_proj", "v_proj"}
    assert exported["expected"]["parameters"]["trainable"] == trained[0].trainable_params
    assert any(
        "MFU counts no weight-gradient FLOPs for the frozen weights" in line
        for line in answer_lines(exported)
    )


def _peft_trainer(tmp_path: Path) -> Trainer:
    """A user's Trainer over a LoRA model of the tiny Llama preset, on fixed-length token rows."""
    import datasets

    config = preset_config(PRESETS["tiny-llama"])
    base = AutoModelForCausalLM.from_config(config)
    model = peft.get_peft_model(
        base, peft.LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=["q_proj", "o_proj"])
    )
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, int(config.vocab_size), (32, 16), generator=generator).tolist()
    train = datasets.Dataset.from_dict({"input_ids": rows, "labels": rows})
    args = TrainingArguments(output_dir=str(tmp_path / "out"), learning_rate=1e-3, seed=3)
    return Trainer(model=model, args=args, train_dataset=train)


def test_tune_on_a_peft_model_trains_its_adapter_in_worker_processes(tmp_path: Path) -> None:
    trainer = _peft_trainer(tmp_path)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in trainer.model.parameters())
    tuned: Any = autotune.tune(
        trainer,
        space=write_space(tmp_path, {"per_device_train_batch_size": [2, 4]}),
        n_trials=2,
        storage=f"sqlite:///{tmp_path / 'tune.db'}",
        study_name="lora",
        **FAST_RUN,
    )
    trained = _trained(tuned.search.trials)
    assert os.getpid() not in _in_workers(trained)  # isolated, the PeftModel pickled to the workers
    # The adapter survived the trip: the workers trained its parameters, not the whole model.
    assert {(t.trainable_params, t.total_params) for t in trained} == {(trainable, total)}
    exported = export_config(tuned.search.study, tuned.answer)
    config = peft.LoraConfig(**exported["peft"])
    assert config.r == 4 and set(config.target_modules) == {"q_proj", "o_proj"}
    assert isinstance(trainer.model, peft.PeftModel)  # the caller's model is left as it was
