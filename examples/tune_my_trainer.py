"""Tune the efficiency knobs of your own `Trainer` with `autotune.tune`.

Runs offline as is, from an installed autotune (nothing here comes from autotune's repository):
it trains a small word-level tokenizer and makes a 1-layer GPT-2 config in a temp folder. Your
script's own pieces stand in the middle: a `Trainer` subclass (here a z-loss added to the loss), a
custom data collator, your `TrainingArguments`. Build your Trainer as you already do and hand it
to `autotune.tune`: every trial runs in a fresh worker process, with your subclass's overrides and
your collator.

    python examples/tune_my_trainer.py
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import datasets
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

import autotune

WORDS = [
    "the",
    "a",
    "model",
    "trains",
    "fast",
    "slow",
    "on",
    "data",
    "with",
    "many",
    "small",
    "large",
    "batch",
    "steps",
    "of",
    "tokens",
]


def sentences(count: int, seed: int = 0) -> list[str]:
    """Sentences of 3 to 20 words: your corpus stands here."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 20))) for _ in range(count)]


def build_tokenizer_and_config() -> tuple[PreTrainedTokenizerFast, GPT2Config]:
    """Your tokenizer and model config: here a word-level tokenizer and a 1-layer GPT-2 (random
    weights, nothing downloaded). With network access: `AutoTokenizer.from_pretrained("gpt2")`."""
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(sentences(50), trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]")
    config = GPT2Config(n_layer=1, n_head=2, n_embd=32, n_positions=128, vocab_size=len(fast))
    return fast, config


class ZLossTrainer(Trainer):
    """Your Trainer subclass: cross-entropy plus a small z-loss on the logits' log-partition (which
    keeps the logits from drifting, as PaLM trains). Its own argument is kept in every trial."""

    def __init__(self, *args: Any, z_loss: float = 1e-4, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.z_loss = z_loss

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        outputs = model(**inputs)
        log_z = torch.logsumexp(outputs.logits.float(), dim=-1)
        mask = inputs["attention_mask"]
        loss = outputs.loss + self.z_loss * (log_z.square() * mask).sum() / mask.sum()
        return (loss, outputs) if return_outputs else loss


class PadToLongest:
    """Your data collator: pads each batch to its longest sample and keeps padding out of the loss."""

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


def main() -> None:
    datasets.disable_progress_bars()  # your own map's bar; autotune shows none of its own
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer, config = build_tokenizer_and_config()
        raw = datasets.Dataset.from_dict({"text": sentences(500)})
        train = raw.map(lambda b: tokenizer(b["text"], truncation=True, max_length=64), batched=True)
        train = train.remove_columns(["text"])

        # Your script's Trainer: everything in its arguments that is not a searched knob is kept.
        trainer = ZLossTrainer(
            model_init=lambda: AutoModelForCausalLM.from_config(config),
            args=TrainingArguments(
                output_dir=str(Path(scratch) / "out"),
                learning_rate=3e-4,
                lr_scheduler_type="cosine",
                warmup_steps=100,
                weight_decay=0.1,
                seed=42,
            ),
            train_dataset=train,
            data_collator=PadToLongest(tokenizer.pad_token_id),
            z_loss=1e-4,
        )
        with autotune.RichReporter() as reporter:
            tuned = autotune.tune(
                trainer,
                space="quick",
                n_trials=4,
                storage=f"sqlite:///{Path(scratch) / 'tune.db'}",
                measure=autotune.MeasureSettings(measure_steps=10, max_seconds=10.0),
                reporter=reporter,
            )
        a = tuned.training_args
        # What is handed back agrees with the verdict: the Trainer's own arguments when nothing beat
        # them measurably (the best measured is then only named, as the alternative).
        print(f"answer: {tuned.answer.verdict}")
        print(
            f"tuned: batch {a.per_device_train_batch_size} x {a.gradient_accumulation_steps}, "
            f"optim {a.optim.value}, "
            f"bf16 {a.bf16}; kept: learning_rate {a.learning_rate}, scheduler {a.lr_scheduler_type.value}, "
            f"weight_decay {a.weight_decay}, seed {a.seed}; model kwargs {tuned.model_kwargs}"
        )
        owners = [t.owner or {} for t in tuned.search.study.records()]
        workers = sorted({owner.get("pid") for owner in owners if owner})
        print(f"trials ran in worker processes {workers}, not in this one ({os.getpid()})")
        for change in tuned.semantic_changes:
            print(f"changes the training math: {change.text()}")
        # Then train as before, with the tuned arguments: ZLossTrainer(..., args=tuned.training_args).train()


if __name__ == "__main__":
    main()
