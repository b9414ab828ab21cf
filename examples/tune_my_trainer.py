"""Tune the efficiency knobs of your own training script with `autotune.tune`.

Runs offline as is, from an installed autotune (nothing here comes from autotune's repository):
it trains a small word-level tokenizer and makes a 1-layer GPT-2 config in a temp folder. Replace
`build_tokenizer_and_config` and the dataset with your own (a hub id or a local checkpoint, your
`datasets.Dataset`), keep the rest.

    python examples/tune_my_trainer.py
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import datasets
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    DataCollatorForLanguageModeling,
    GPT2Config,
    PreTrainedTokenizerFast,
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


def main() -> None:
    datasets.disable_progress_bars()  # your own map's bar; autotune shows none of its own
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer, config = build_tokenizer_and_config()
        raw = datasets.Dataset.from_dict({"text": sentences(500)})
        train = raw.map(lambda b: tokenizer(b["text"], truncation=True, max_length=64), batched=True)
        train = train.remove_columns(["text"])

        # Your script's arguments: everything that is not a searched knob is kept as given.
        args = TrainingArguments(
            output_dir=str(Path(scratch) / "out"),
            learning_rate=3e-4,
            lr_scheduler_type="cosine",
            warmup_steps=100,
            weight_decay=0.1,
            seed=42,
        )
        with autotune.RichReporter() as reporter:
            tuned = autotune.tune(
                train,
                args,
                model_init=lambda: AutoModelForCausalLM.from_config(config),
                data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
                space="quick",
                trials=4,
                storage=f"sqlite:///{Path(scratch) / 'tune.db'}",
                measure=autotune.MeasureSettings(max_steps=10, max_seconds=10.0),
                reporter=reporter,
            )
        a = tuned.training_args
        print(
            f"tuned: batch {a.per_device_train_batch_size} x {a.gradient_accumulation_steps}, "
            f"optim {a.optim.value}, "
            f"bf16 {a.bf16}; kept: learning_rate {a.learning_rate}, scheduler {a.lr_scheduler_type.value}, "
            f"weight_decay {a.weight_decay}, seed {a.seed}; model kwargs {tuned.model_kwargs}"
        )
        for change in tuned.semantic_changes:
            print(f"changes the training math: {change.text()}")
        # Then train as before: Trainer(model=..., args=tuned.training_args, ...).train()


if __name__ == "__main__":
    main()
