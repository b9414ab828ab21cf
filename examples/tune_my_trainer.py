"""Tune the efficiency knobs of your own training script with `autotune.tune`.

Runs offline as is: it builds a small word-level tokenizer and a 1-layer GPT-2 config in a temp
folder. Replace `build_tokenizer_and_model` and the dataset with your own (a hub id or a local
checkpoint, your `datasets.Dataset`), keep the rest.

    .venv/bin/python examples/tune_my_trainer.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import datasets
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    TrainingArguments,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.local_models, the offline stand-ins

import autotune
from autotune.cli._render import RichReporter
from tests.local_models import sentences, write_model


def build_tokenizer_and_model(folder: Path) -> Path:
    """Your model: here a config-only folder with a tokenizer (no weights, nothing downloaded)."""
    return write_model(folder)


def main() -> None:
    datasets.disable_progress_bars()  # your own map's bar; autotune shows none of its own
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = build_tokenizer_and_model(Path(scratch) / "my-model")
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        config = AutoConfig.from_pretrained(model_dir)
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
        with RichReporter() as reporter:
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
