"""The user's own model and data, offline: a local tokenizer and tiny config folders built here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer, TrainerCallback

import autotune
from autotune.plan.build import plan_search
from tests.helpers import FAST_RUN, IN_PROCESS, write_space
from tests.local_models import write_jsonl, write_model, write_text

SMALL = {"per_device_train_batch_size": [2, 4], "attn_implementation": ["eager", "sdpa"]}


class BatchProbe(TrainerCallback):
    """Records the input_ids shapes and attention-mask sums the model really received."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []
        self.handle: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.handle = kw["model"].register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        self.shapes.append(tuple(kwargs["input_ids"].shape))

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.handle.remove()


def test_search_on_a_local_text_file_packs_blocks_and_counts_every_token(tmp_path: Path) -> None:
    model = write_model(tmp_path / "model")
    text = write_text(tmp_path / "corpus.txt", 120)
    probe = BatchProbe()
    config = autotune.RunConfig(
        model=str(model),
        dataset=str(text),
        space=write_space(tmp_path, SMALL),
        trials=2,
        storage=f"sqlite:///{tmp_path / 's.db'}",
        seq_len=16,
        **IN_PROCESS,
    )
    result = autotune.search(config, callbacks=[probe])

    # Packing: every sample is one full block of --seq-len tokens of the tokenized text, in order.
    words = sum(len(line.split()) for line in text.read_text().splitlines())
    data = plan_search(config, open_store=False).workload.data
    assert data is not None and len(data) == words // 16  # the word-level tokenizer: a word a token
    assert {shape[1] for shape in probe.shapes} == {16}
    for trial in result.trials:
        a = trial.attrs
        steps = a["measured_steps"]
        assert a["window_tokens"] == steps * a["samples_per_step"] * 16  # packed: no padding
        assert a["tokens_per_s"] == pytest.approx(a["window_tokens"] / a["window_s"])
    assert result.study.user_attrs["fingerprint"]["dataset"].startswith(str(text))


def test_packed_blocks_are_the_concatenated_text(tmp_path: Path) -> None:
    model = write_model(tmp_path / "model")
    text = write_text(tmp_path / "corpus.txt", 40)
    config = autotune.RunConfig(model=str(model), dataset=str(text), seq_len=8, storage="sqlite://")
    data = plan_search(config, open_store=False).workload.data
    assert data is not None
    tokenizer = AutoTokenizer.from_pretrained(model)
    stream = [i for line in text.read_text().splitlines() for i in tokenizer(line)["input_ids"]]
    blocks = [row["input_ids"] for row in data.dataset]
    assert blocks == [stream[i : i + 8] for i in range(0, len(stream) // 8 * 8, 8)]
    assert all(row["labels"] == row["input_ids"] for row in data.dataset)


def test_classification_counts_only_real_tokens_against_a_hand_count(tmp_path: Path) -> None:
    model = write_model(tmp_path / "bert", model_type="bert")
    rows = write_jsonl(tmp_path / "reviews.jsonl", 30)
    probe = BatchProbe()
    result = autotune.search(
        model=str(model),
        dataset=str(rows),
        pad_to_multiple_of=8,
        space=write_space(tmp_path, {"per_device_train_batch_size": [4], "attn_implementation": ["eager"]}),
        trials=1,
        storage=f"sqlite:///{tmp_path / 'c.db'}",
        seq_len=32,
        callbacks=[probe],
        **IN_PROCESS,
    )
    assert result.study.user_attrs["workload"]["task"] == "sequence-classification"
    # Hand count: words per line (the word-level tokenizer adds no special tokens), cycled in order.
    lengths = [min(len(json.loads(line)["text"].split()), 32) for line in rows.read_text().splitlines()]
    trial = result.trials[0].attrs
    per_step, warmup, steps = trial["samples_per_step"], trial["warmup_steps"], trial["measured_steps"]
    first = warmup * per_step
    hand = sum(lengths[i % len(lengths)] for i in range(first, first + steps * per_step))
    assert trial["window_tokens"] == hand
    # What the model received in the window holds padding: more than the real tokens counted.
    window = probe.shapes[warmup : warmup + steps]
    assert hand < sum(rows * width for rows, width in window)
    # Dynamic padding to a multiple of 8: batches differ in width, every width a multiple of 8.
    widths = {shape[1] for shape in probe.shapes}
    assert all(w % 8 == 0 for w in widths) and len(widths) > 1


def test_search_on_a_folder_with_only_a_config(tmp_path: Path) -> None:
    model = write_model(tmp_path / "config-only", with_tokenizer=False)
    assert sorted(p.name for p in model.iterdir()) == ["config.json"]
    result = autotune.search(
        model=str(model),
        space=write_space(tmp_path, SMALL),
        trials=1,
        storage=f"sqlite:///{tmp_path / 'o.db'}",
        seq_len=16,
        **FAST_RUN,
    )
    assert result.best is not None and result.best.tokens_per_s > 0
    assert result.study.user_attrs["workload"]["from_pretrained"] is False


def test_tokenization_is_cached_for_later_processes(tmp_path: Path) -> None:
    model = write_model(tmp_path / "model")
    text = write_text(tmp_path / "corpus.txt", 60)
    config = autotune.RunConfig(model=str(model), dataset=str(text), seq_len=8, storage="sqlite://")
    first = plan_search(config, open_store=False).workload.data
    again = plan_search(autotune.RunConfig.from_dict(config.to_dict()), open_store=False)
    assert first is not None and again.workload.data is not None
    assert again.workload.data.dataset.cache_files == first.dataset.cache_files  # same cache file, reused


def test_dataset_flags_round_trip_through_the_stored_run_config() -> None:
    config = autotune.RunConfig(
        model="m",
        dataset="d.jsonl",
        dataset_config="c",
        split="validation",
        text_column="body",
        tokenizer="t",
        task="seq-classification",
        pretrained=True,
        trust_remote_code=True,
        pad_to_multiple_of=8,
        storage="sqlite:///x.db",
    )
    assert autotune.RunConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_an_unreachable_hub_id_fails_fast_with_one_line(tmp_path: Path) -> None:
    # Bounded by the call's own timeout; how fast it fails is a measurement, not a test.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "search",
            "--model",
            "no-such-org/no-such-model",
            "--storage",
            f"sqlite:///{tmp_path / 'h.db'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "no-such-org/no-such-model" in lines[0] and "local folder" in lines[0]


def test_bring_your_own_trainer_keeps_the_users_arguments(tmp_path: Path) -> None:
    from transformers import (
        AutoModelForCausalLM,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainingArguments,
    )

    from tests.local_models import user_corpus

    tokenizer, config, train = user_corpus(tmp_path / "mine", 40)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        learning_rate=3e-4,
        lr_scheduler_type="cosine",
        weight_decay=0.1,
        seed=7,
    )
    seen: list[tuple[float, str, float]] = []

    class ArgsSeen(TrainerCallback):
        def on_train_begin(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            seen.append((a.learning_rate, str(a.lr_scheduler_type.value), a.weight_decay))

    built: list[int] = []

    def model_init() -> Any:
        built.append(1)
        return AutoModelForCausalLM.from_config(config)

    trainer = Trainer(
        model_init=model_init,
        args=args,
        train_dataset=train,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        callbacks=[ArgsSeen()],
    )
    tuned = autotune.tune(
        trainer,
        space=write_space(
            tmp_path, {"per_device_train_batch_size": [2, 4], "optim": ["adamw_torch", "adamw_torch_fused"]}
        ),
        n_trials=2,
        storage=f"sqlite:///{tmp_path / 'byo.db'}",
        **IN_PROCESS,  # the callback and model_init record here what the trials did
    )
    out = tuned.training_args
    assert (out.learning_rate, out.lr_scheduler_type.value, out.weight_decay, out.seed) == (
        3e-4,
        "cosine",
        0.1,
        7,
    )
    assert out.output_dir == str(tmp_path / "out")
    best = tuned.search.best
    assert best is not None
    # No baseline measured: the answer, whose knobs are applied, is the best measured trial.
    assert tuned.answer.choice is not None and tuned.answer.choice.trial == best.number, tuned.answer.verdict
    assert out.per_device_train_batch_size == best.params["per_device_train_batch_size"]
    assert out.optim.value == best.params["optim"]
    assert seen == [(3e-4, "cosine", 0.1)] * 2  # every trial trained with the user's settings
    assert len(built) >= 3  # once when the Trainer was built, then a fresh model per trial
    # Padded causal LM batches: only the attention mask's tokens count.
    lengths = [sum(row["attention_mask"]) for row in train]
    a = best.attrs
    first = a["warmup_steps"] * a["samples_per_step"]
    count = a["measured_steps"] * a["samples_per_step"]
    assert a["window_tokens"] == sum(lengths[i % len(lengths)] for i in range(first, first + count))
