"""Offline stand-ins for a user's model and data: a word-level tokenizer trained in the test on a
tiny text, saved with a tiny model config to a folder, and small datasets written next to it."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

WORDS = [
    "the",
    "a",
    "model",
    "trains",
    "fast",
    "slow",
    "on",
    "some",
    "data",
    "with",
    "tokens",
    "and",
    "batches",
    "of",
    "text",
    "every",
    "step",
]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def sentences(count: int, seed: int = 0) -> list[str]:
    """Sentences of 3 to 20 words: short enough to differ in length, long enough to pad."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 20))) for _ in range(count)]


def write_tokenizer(folder: Path) -> Path:
    """Train a word-level tokenizer on a temp text file and save it as a `PreTrainedTokenizerFast`.

    It adds no special tokens around a text, so a sentence of n words is n tokens (hand countable).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(sentences(50)) + "\n")
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train([str(corpus)], trainers.WordLevelTrainer(special_tokens=SPECIALS))
    corpus.unlink()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    fast.save_pretrained(folder)
    return folder


def write_model(folder: Path, model_type: str = "gpt2", with_tokenizer: bool = True, layers: int = 1) -> Path:
    """A folder with a tiny model's ``config.json`` (no weights) and, optionally, the tokenizer."""
    from transformers import AutoConfig

    folder.mkdir(parents=True, exist_ok=True)
    if model_type == "gpt2":
        config = AutoConfig.for_model(
            "gpt2",
            n_layer=layers,
            n_head=2,
            n_embd=32,
            n_positions=256,
            vocab_size=64,
            bos_token_id=0,
            eos_token_id=0,
            architectures=["GPT2LMHeadModel"],
        )
    else:
        config = AutoConfig.for_model(
            "bert",
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            vocab_size=64,
            max_position_embeddings=256,
            architectures=["BertForSequenceClassification"],
        )
    config.save_pretrained(folder)
    if with_tokenizer:
        write_tokenizer(folder)
    return folder


def user_corpus(folder: Path, count: int = 40, padding: bool = False) -> tuple[Any, Any, Any]:
    """A user's pieces for their own Trainer: the tiny GPT-2 written to `folder`, its tokenizer and
    config, and `count` sentences tokenized to at most 16 tokens (padded to 16 with `padding`)."""
    import datasets
    from transformers import AutoConfig, AutoTokenizer

    write_model(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = AutoConfig.from_pretrained(folder)
    pad = {"padding": "max_length"} if padding else {}
    train = datasets.Dataset.from_dict({"text": sentences(count)}).map(
        lambda b: tokenizer(b["text"], truncation=True, max_length=16, **pad),
        batched=True,
        remove_columns=["text"],
    )
    return tokenizer, config, train


def write_text(path: Path, count: int, seed: int = 1) -> Path:
    path.write_text("\n".join(sentences(count, seed)) + "\n")
    return path


def write_jsonl(path: Path, count: int, seed: int = 2) -> Path:
    rows = [{"text": s, "label": i % 3} for i, s in enumerate(sentences(count, seed))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
