"""`autotune.tune` on a user's own Trainer: a subclass with its own ``__init__`` argument and a
``compute_loss`` override, and a custom collator, tuned in worker processes (the override runs
there), exported from the store; and the fallback to this process when a piece cannot be pickled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

import autotune
from autotune.answer.decide import study_answer
from autotune.export.config import export_config
from autotune.plan.build import plan_from_study
from autotune.store.owner import Owner, is_alive
from autotune.store.session import StudyStore
from tests.helpers import FAST_RUN, write_space
from tests.local_models import user_corpus

pytestmark = pytest.mark.timeout(300)

SPACE = {"per_device_train_batch_size": [2, 4], "optim": ["adamw_torch", "adamw_torch_fused"]}


class PadAndMask:
    """A custom collator: pads each batch to its longest sample and masks the padding out of the
    labels (-100), as a script's own causal-LM collator does."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        width = max(len(row["input_ids"]) for row in rows)
        ids = torch.full((len(rows), width), self.pad_id)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row["input_ids"])] = torch.tensor(row["input_ids"])
            mask[i, : len(row["input_ids"])] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


class LockedCollator(PadAndMask):
    """The same collator holding a lock: it cannot be pickled for a worker process."""

    def __init__(self, pad_id: int) -> None:
        super().__init__(pad_id)
        self.lock = threading.Lock()


class MarkingTrainer(Trainer):
    """A Trainer subclass with an argument of its own, whose `compute_loss` override writes a line
    per call (the process, whether the batch came from the custom collator) to `marker`."""

    def __init__(self, *args: Any, marker: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.marker = marker

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        masked = bool((inputs["labels"][inputs["attention_mask"] == 0] == -100).all())
        with open(self.marker, "a") as handle:
            handle.write(json.dumps({"pid": os.getpid(), "masked": masked}) + "\n")
        return super().compute_loss(model, inputs, *args, **kwargs)


class ReadsItsOwnConfig(MarkingTrainer):
    """A Trainer subclass that reads a field its own config class would have (as TRL's trainers
    read theirs): every trial fails with the same error."""

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return self.args.loss_type  # type: ignore[attr-defined]


def _trainer(
    tmp_path: Path,
    collator: type[PadAndMask] = PadAndMask,
    given_model: bool = False,
    cls: type[MarkingTrainer] = MarkingTrainer,
) -> MarkingTrainer:
    """The user's Trainer: built with `model_init`, or with `given_model` a model (copied per trial)."""

    tokenizer, config, train = user_corpus(tmp_path / "mine", 40)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), learning_rate=3e-4, lr_scheduler_type="cosine", seed=7
    )
    build = {"model_init": lambda: AutoModelForCausalLM.from_config(config)}
    return cls(
        **({"model": AutoModelForCausalLM.from_config(config)} if given_model else build),
        args=args,
        train_dataset=train,
        data_collator=collator(tokenizer.pad_token_id),
        marker=str(tmp_path / "marker.jsonl"),
    )


def _markers(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "marker.jsonl").read_text().splitlines()]


def _owners(study: StudyStore) -> list[Owner]:
    trained = [t for t in study.records() if t.trained]
    owners = [Owner.from_attrs(t.owner) for t in trained]
    assert trained and all(owner is not None for owner in owners)
    return [owner for owner in owners if owner is not None]


def test_a_trainer_subclass_is_tuned_in_worker_processes_running_its_override(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    tuned = autotune.tune(
        _trainer(tmp_path),
        space=write_space(tmp_path, SPACE),
        n_trials=2,
        storage=storage,
        study_name="mine",
        **FAST_RUN,
    )
    study = tuned.search.study.optuna_study
    assert study.study_name == "mine" and len(tuned.search.trials) == 2
    owners = _owners(tuned.search.study)
    workers = {owner.pid for owner in owners}
    assert os.getpid() not in workers  # isolated: every trial in a worker process
    assert not [owner for owner in owners if is_alive(owner)]  # and none is left behind
    # The subclass's override ran in those workers, on the custom collator's batches.
    marks = _markers(tmp_path)
    assert {m["pid"] for m in marks} == workers
    assert all(m["masked"] for m in marks)
    # The user's arguments are kept; the answer's knobs applied (no baseline was measured: the
    # answer is the best measured trial).
    out, best, answer = tuned.training_args, tuned.search.best, tuned.answer
    assert best is not None and answer.choice is not None and answer.choice.trial == best.number
    assert (out.learning_rate, out.lr_scheduler_type.value, out.seed) == (3e-4, "cosine", 7)
    batch = answer.choice.params["per_device_train_batch_size"]
    assert out.per_device_train_batch_size == batch
    # Same store as `autotune search`: the export reads the study's answer, function and command alike.
    assert study_answer(StudyStore(study)) == answer
    exported = export_config(StudyStore(study), study_answer(StudyStore(study)))
    assert exported["expected"]["trial"] == best.number
    assert exported["training_args"]["per_device_train_batch_size"] == batch
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "export",
            "--study",
            "mine",
            "--storage",
            storage,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["training_args"] == exported["training_args"]
    # Its model and data are not in the store: a worker or `autotune resume` refuses it in one line.
    with pytest.raises(autotune.UsageError, match=r"made by autotune\.tune\(\) on your own Trainer"):
        plan_from_study("mine", storage)
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "resume",
            "--study",
            "mine",
            "--storage",
            storage,
            "--trials",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 2 and "autotune.tune(trainer, study_name='mine')" in resumed.stderr


def test_a_trainer_given_a_model_continues_its_study_in_a_second_call(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    settings: dict[str, Any] = dict(space=write_space(tmp_path, SPACE), storage=storage, study_name="again")
    autotune.tune(_trainer(tmp_path, given_model=True), n_trials=1, **settings, **FAST_RUN)
    again = autotune.tune(_trainer(tmp_path, given_model=True), n_trials=2, **settings, **FAST_RUN)
    assert again.search.ran == 1 and len(again.search.trials) == 2
    assert os.getpid() not in {owner.pid for owner in _owners(again.search.study)}


def test_an_unpicklable_piece_is_named_and_the_trials_run_in_this_process(tmp_path: Path) -> None:
    with pytest.warns(autotune.NotIsolatedWarning) as caught:
        tuned = autotune.tune(
            _trainer(tmp_path, LockedCollator),
            space=write_space(tmp_path, SPACE),
            n_trials=1,
            storage=f"sqlite:///{tmp_path / 'locked.db'}",
            **FAST_RUN,
        )
    message = str(caught[0].message)
    assert "data_collator (LockedCollator)" in message and "lock" in message
    assert "isolation='none'" in message and "\n" not in message
    assert {owner.pid for owner in _owners(tuned.search.study)} == {os.getpid()}
    assert {m["pid"] for m in _markers(tmp_path)} == {os.getpid()}  # the override ran here


def test_options_that_name_another_workload_are_refused(tmp_path: Path) -> None:
    with pytest.raises(autotune.UsageError, match="no option 'dataset'"):
        autotune.tune(_trainer(tmp_path), dataset="corpus.txt")
    with pytest.raises(autotune.UsageError, match=r"constructed transformers\.Trainer"):
        autotune.tune("tiny-gpt2")  # type: ignore[arg-type]


def test_a_trainer_whose_every_trial_fails_the_same_way_raises_that_error(tmp_path: Path) -> None:
    with pytest.raises(
        autotune.SearchFailed, match=r"every trial failed the same way \(2 trials, error\)"
    ) as info:
        autotune.tune(
            _trainer(tmp_path, cls=ReadsItsOwnConfig),
            n_trials=2,
            space=write_space(tmp_path, SPACE),
            storage=f"sqlite:///{tmp_path / 'fails.db'}",
            **FAST_RUN,
        )
    assert "'TrainingArguments' object has no attribute 'loss_type'" in info.value.message
