"""`autotune.tune` on TRL's `SFTTrainer` (the real trl package, a 1-layer GPT-2, offline): every
trial trains with an `SFTConfig` and redoes what `SFTTrainer` derives from it (its collator, its
packed dataset, its fused LM head on the trial's own model); the answer is an `SFTConfig`."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import datasets
import pytest
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from trl import SFTConfig, SFTTrainer

import autotune
from autotune.driver.tune import user_workload
from tests.helpers import FAST_RUN, IN_PROCESS, write_space
from tests.local_models import sentences, write_model

pytestmark = pytest.mark.timeout(300)

MAX_LENGTH = 32


class SftProbe(TrainerCallback):
    """Records, at the start of each trial's training, what the trial's Trainer really runs: its
    arguments' class and TRL fields, its collator's padding-free flag, whether its rows are packed,
    and whether the fused LM head TRL patched in closes over the trial's own model."""

    def __init__(self) -> None:
        self.trials: list[dict[str, Any]] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        loader = kw["train_dataloader"].base_dataloader
        collator = getattr(loader.collate_fn, "data_collator", loader.collate_fn)  # RemoveColumnsCollator
        first = loader.dataset[0]
        model = kw["model"]
        # accelerate's autocast wraps the forward again, keeping the one it wrapped
        patched = vars(model).get("_original_forward") or vars(model).get("forward")
        cells = [c.cell_contents for c in (patched.__func__.__closure__ or ())] if patched else []
        bound = [c for c in cells if isinstance(c, types.MethodType)]
        self.trials.append(
            {
                "args_class": type(args),
                "packing": args.packing,
                "padding_free": args.padding_free,
                "collator_padding_free": collator.padding_free,
                "packed_rows": len(first["input_ids"]) == MAX_LENGTH,  # no text is that long
                "own_forward": bool(bound) and all(b.__self__ is model for b in bound),
            }
        )


def _parts(tmp_path: Path) -> tuple[Any, Any, Any]:
    folder = write_model(tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.eos_token = "[SEP]"  # TRL appends it to every text
    config = AutoConfig.from_pretrained(folder)
    return tokenizer, config, datasets.Dataset.from_dict({"text": sentences(40)})


def _sft(tmp_path: Path, cls: type[SFTTrainer] = SFTTrainer, model: Any = None, **config: Any) -> SFTTrainer:
    tokenizer, model_config, data = _parts(tmp_path)
    args = SFTConfig(
        output_dir=str(tmp_path / "out"), max_length=MAX_LENGTH, learning_rate=3e-4, use_cpu=True, **config
    )
    return cls(
        model=model if model is not None else AutoModelForCausalLM.from_config(model_config),
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
    )


def test_every_trial_trains_an_sft_config_as_sft_trainer_would_build_it(tmp_path: Path) -> None:
    probe = SftProbe()
    space = {"per_device_train_batch_size": [2], "packing": [False, True], "padding_free": [False, True]}
    tuned = autotune.tune(
        _sft(tmp_path, packing_strategy="wrapped"),  # packing and padding-free apart
        space=write_space(tmp_path, space),
        n_trials=3,
        storage=f"sqlite:///{tmp_path / 'sft.db'}",
        callbacks=[probe],
        **IN_PROCESS,
    )
    seen = probe.trials
    assert seen and all(t["args_class"] is SFTConfig for t in seen)
    assert all(t["own_forward"] for t in seen)  # a fresh fused head per trial model, no stale closure
    # The knobs took effect where SFTTrainer reads them: its collator, its dataset packed by TRL.
    assert all(t["collator_padding_free"] == t["padding_free"] for t in seen)
    assert all(t["packed_rows"] == t["packing"] for t in seen)
    assert {t["packing"] for t in seen} == {False, True}
    # Padding-free without packing while max_length truncates is TRL's refusal: never trained.
    assert not [t for t in seen if t["padding_free"] and not t["packing"]]
    out, choice = tuned.training_args, tuned.answer.choice
    assert isinstance(out, SFTConfig) and choice is not None
    assert (out.packing, out.padding_free) == (choice.params["packing"], choice.params["padding_free"])
    assert (out.max_length, out.learning_rate, out.packing_strategy) == (MAX_LENGTH, 3e-4, "wrapped")


def test_an_sft_trainer_built_from_a_model_id_is_tuned_in_worker_processes(tmp_path: Path) -> None:
    _, config, _ = _parts(tmp_path)
    saved = tmp_path / "saved"
    AutoModelForCausalLM.from_config(config).save_pretrained(saved)
    tuned = autotune.tune(
        _sft(tmp_path, model=str(saved)),
        space=write_space(tmp_path, {"per_device_train_batch_size": [2, 4], "packing": [True]}),
        n_trials=1,
        storage=f"sqlite:///{tmp_path / 'id.db'}",
        **FAST_RUN,
    )
    assert tuned.search.best is not None and len(tuned.search.trials) == 1
    assert isinstance(tuned.training_args, SFTConfig) and tuned.training_args.packing is True


def test_trl_knobs_cannot_run_on_another_trainer_and_say_why(tmp_path: Path) -> None:
    tokenizer, config, data = _parts(tmp_path)
    rows = data.map(lambda b: tokenizer(b["text"]), batched=True, remove_columns=["text"])
    plain = Trainer(
        model=AutoModelForCausalLM.from_config(config),
        args=TrainingArguments(output_dir=str(tmp_path / "plain"), use_cpu=True),
        train_dataset=rows,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
    )
    assert user_workload(plain).trainer_support() == {}
    space = {"per_device_train_batch_size": [2], "activation_offloading": [False, True]}
    with pytest.raises(
        autotune.SpaceError, match=r"no value of knobs.activation_offloading can run here"
    ) as info:
        autotune.tune(plain, space=write_space(tmp_path, space), storage=f"sqlite:///{tmp_path / 'p.db'}")
    assert "(not an SFTConfig: a TRL SFTTrainer's own setting)" in str(info.value)
    assert "\n" not in str(info.value)
    sft = user_workload(_sft(tmp_path)).trainer_support()
    assert sft == {
        "sft": True,
        "sft_packed": False,
        "sft_truncates": True,
        "sft_collator": True,
        "sft_prepares": True,
    }


class BrokenLoss(SFTTrainer):
    def compute_loss(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("this loss is broken")


def test_an_sft_trainer_whose_every_trial_fails_the_same_way_raises_that_error(tmp_path: Path) -> None:
    every = r"^every trial failed the same way \(2 trials, error\)"
    with pytest.raises(autotune.SearchFailed, match=every) as info:
        autotune.tune(
            _sft(tmp_path, cls=BrokenLoss),
            space=write_space(tmp_path, {"per_device_train_batch_size": [2, 4]}),
            n_trials=2,
            storage=f"sqlite:///{tmp_path / 'broken.db'}",
            **IN_PROCESS,
        )
    assert "this loss is broken" in info.value.message and "\n" not in str(info.value)
