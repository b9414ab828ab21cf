"""A user's dataset: loaded with `datasets`, tokenized once per study, packed or padded per task.

Causal and masked LM text is packed into ``seq_len`` blocks (as the Transformers ``run_clm.py`` /
``run_mlm.py`` examples do), so every token is real; or, with ``packing="examples"``, each text is
one sample, truncated to ``seq_len`` and padded per batch, as fine-tuning on documents or chats is.
Classification samples are truncated to ``seq_len`` and padded per batch by the collator; only their
real tokens count towards tokens/s. Masked-LM samples are masked as they are read, each by its own
seeded generator (`autotune.workloads.masking`), so that every trial trains on the same masks.

Tokenization runs through `Dataset.map` with a fingerprint computed from the source data, the
tokenizer's content and the settings, so the result lands in the `datasets` cache and every later
process of the study (a worker, a resumed search) loads it from there instead of tokenizing again.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from autotune.errors import WorkloadError, first_line
from autotune.workloads.hub import is_local, require_hub
from autotune.workloads.masking import SampleMasking, padding_collator

BUILDERS = {".txt": "text", ".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
_FORMAT_VERSION = "1"  # bump when the tokenization below changes: old cache entries then miss


@dataclass(frozen=True)
class DataSource:
    """Where the text comes from (the ``--dataset`` family of flags)."""

    path: str
    config_name: str | None = None
    split: str = "train"
    text_column: str | None = None
    label_column: str | None = None


@dataclass
class PreparedData:
    """A tokenized dataset ready for trials.

    Attributes:
        dataset: a `datasets.Dataset` with ``input_ids`` (and ``labels`` for classification).
        lengths: real (non-padding) tokens of each sample.
        collator: the task's data collator.
        identity: what the data is, for the study's fingerprint.
        num_labels: distinct labels (classification only).
        masking: how masked-LM samples are masked as they are read (None: other tasks); the
            collator then only pads.
    """

    dataset: Any
    lengths: list[int]
    collator: Any
    identity: str
    num_labels: int | None = None
    masking: SampleMasking | None = None
    _prefix: list[int] = field(default_factory=list, repr=False)

    def __len__(self) -> int:
        return len(self.lengths)

    def tokens_in(self, first: int, count: int) -> int:
        """Real tokens in samples ``first .. first + count - 1``, cycling past the end."""
        if not self._prefix:
            self._prefix = [0, *itertools.accumulate(self.lengths)]
        n, total = len(self.lengths), self._prefix[-1]
        full, rest = divmod(count, n)
        start = first % n
        end = start + rest
        tokens = full * total
        if end <= n:
            return tokens + self._prefix[end] - self._prefix[start]
        return tokens + total - self._prefix[start] + self._prefix[end - n]


class Cycled(torch.utils.data.Dataset):
    """A dataset read in a loop: long enough that no trial reaches the end of an epoch."""

    length = 1 << 20

    def __init__(self, data: Any) -> None:
        self.data = data

    def __len__(self) -> int:
        return max(self.length, len(self.data))

    def __getitem__(self, index: int) -> Any:
        return self.data[index % len(self.data)]


def load_rows(source: DataSource, trust_remote_code: bool = False) -> Any:
    """The raw `datasets.Dataset` of a local file, a local folder or a hub dataset.

    Raises:
        WorkloadError: unknown file type, missing split, or a hub dataset that cannot be reached.
    """
    import datasets

    path = Path(source.path).expanduser()
    try:
        if path.is_file():
            builder = BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise WorkloadError(
                    f"dataset {source.path}: unknown file type {path.suffix!r}",
                    f"use one of {', '.join(BUILDERS)}, or a folder of such files",
                    field="dataset",
                )
            # A single file is the "train" split of its builder, whatever --split says.
            return datasets.load_dataset(builder, data_files=str(path), split="train")
        if not is_local(source.path):
            import huggingface_hub.constants

            if not huggingface_hub.constants.HF_HUB_OFFLINE:
                require_hub("dataset", source.path, "dataset")
        return datasets.load_dataset(source.path, source.config_name, split=source.split)
    except WorkloadError:
        raise
    except Exception as exc:
        raise WorkloadError(
            f"cannot load {source.path} (split {source.split!r}) as a dataset: {first_line(exc)}",
            "pass a text/JSON lines/CSV/Parquet file or folder, or a hub dataset with its configuration "
            "name and split",
        ) from None


def prepare(
    source: DataSource,
    tokenizer: Any,
    task: str,
    seq_len: int,
    pad_to_multiple_of: int | None = None,
    trust_remote_code: bool = False,
    packing: str = "blocks",
) -> PreparedData:
    """Load, tokenize (cached) and pack or truncate the data for `task`.

    Raises:
        WorkloadError: no text column, no labels for classification, no mask token for masked LM,
            or too little text for one block.
    """
    rows = load_rows(source, trust_remote_code)
    text_column = _text_column(rows, source)
    key = _fingerprint(rows, tokenizer, task, seq_len, text_column, source.label_column)
    if task == "sequence-classification":
        return _classification(rows, tokenizer, seq_len, text_column, source, key, pad_to_multiple_of)
    if packing == "examples":
        return _examples(rows, tokenizer, task, seq_len, text_column, source, key, pad_to_multiple_of)
    return _packed(rows, tokenizer, task, seq_len, text_column, source, key)


def _packed(
    rows: Any, tokenizer: Any, task: str, seq_len: int, text_column: str, source: DataSource, key: str
) -> PreparedData:
    from transformers import default_data_collator

    _check_mask_token(tokenizer, task)
    tokenized = rows.map(
        lambda batch: {"input_ids": tokenizer(batch[text_column])["input_ids"]},
        batched=True,
        remove_columns=rows.column_names,
        new_fingerprint=f"{key}-tok",
    )
    causal = task == "causal-lm"

    def blocks(batch: dict[str, list[list[int]]]) -> dict[str, list[list[int]]]:
        ids = list(itertools.chain.from_iterable(batch["input_ids"]))
        usable = len(ids) // seq_len * seq_len  # the tail shorter than a block is dropped
        chunks = [ids[i : i + seq_len] for i in range(0, usable, seq_len)]
        return {"input_ids": chunks, **({"labels": [list(c) for c in chunks]} if causal else {})}

    # One map batch holds the whole text, so nothing but the last partial block is dropped.
    packed = tokenized.map(blocks, batched=True, batch_size=None, new_fingerprint=f"{key}-pack{seq_len}")
    if len(packed) == 0:
        total = sum(len(ids) for ids in tokenized["input_ids"])
        raise WorkloadError(
            f"dataset {source.path} holds {total} tokens, fewer than one seq_len block of {seq_len}",
            "use more text, or a smaller seq_len",
            field=("dataset", "seq_len"),
        )
    # Blocks are all seq_len long: stacking them is the whole collation (masked LM: masked as read).
    masking = None if causal else SampleMasking.of_tokenizer(tokenizer)
    lengths = [seq_len] * len(packed)
    return PreparedData(packed, lengths, default_data_collator, f"{source.path}@{key}", masking=masking)


def _examples(
    rows: Any,
    tokenizer: Any,
    task: str,
    seq_len: int,
    text_column: str,
    source: DataSource,
    key: str,
    pad_to_multiple_of: int | None,
) -> PreparedData:
    """One sample per text, truncated to `seq_len`; the collator pads each batch (and masks the
    padding out of the labels). Empty texts are dropped."""
    from transformers import DataCollatorForLanguageModeling

    _check_mask_token(tokenizer, task)
    tokenized = rows.map(
        lambda batch: {
            "input_ids": tokenizer(batch[text_column], truncation=True, max_length=seq_len)["input_ids"]
        },
        batched=True,
        remove_columns=rows.column_names,
        new_fingerprint=f"{key}-ex{seq_len}",
    )
    tokenized = tokenized.filter(
        lambda sample: len(sample["input_ids"]) > 1, new_fingerprint=f"{key}-ex-nonempty"
    )
    if len(tokenized) == 0:
        raise WorkloadError(
            f"dataset {source.path} has no text of two tokens or more",
            "use one with text in it",
            field="dataset",
        )
    if tokenizer.pad_token is None:  # GPT-style tokenizers: pad with EOS (masked out of the loss)
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    lengths = [len(ids) for ids in tokenized["input_ids"]]
    identity = f"{source.path}@{key}-examples"
    if task == "masked-lm":  # masked as read; the collator pads
        masking = SampleMasking.of_tokenizer(tokenizer)
        return PreparedData(
            tokenized, lengths, padding_collator(tokenizer, pad_to_multiple_of), identity, masking=masking
        )
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False, pad_to_multiple_of=pad_to_multiple_of)
    return PreparedData(tokenized, lengths, collator, identity)


def _check_mask_token(tokenizer: Any, task: str) -> None:
    if task == "masked-lm" and tokenizer.mask_token is None:
        raise WorkloadError(
            "task='masked-lm' needs a tokenizer with a mask token; this one has none",
            "pass a tokenizer with a [MASK] token, or use task='causal-lm'",
            field="task",
        )


def _classification(
    rows: Any,
    tokenizer: Any,
    seq_len: int,
    text_column: str,
    source: DataSource,
    key: str,
    pad_to_multiple_of: int | None,
) -> PreparedData:
    from transformers import DataCollatorWithPadding

    label_column = source.label_column or next(
        (c for c in ("label", "labels") if c in rows.column_names), None
    )
    if label_column is None:
        raise WorkloadError(
            f"dataset {source.path} has no label column (columns: {', '.join(rows.column_names)})",
            "add a 'label' column, or use task='causal-lm'",
            field=("dataset", "task"),
        )
    names = sorted({str(v) for v in rows[label_column]})
    numeric = all(isinstance(v, int) for v in rows[label_column][:1000])
    index = {name: i for i, name in enumerate(names)}

    def encode(batch: dict[str, list[Any]]) -> dict[str, Any]:
        out = tokenizer(batch[text_column], truncation=True, max_length=seq_len)
        labels = batch[label_column] if numeric else [index[str(v)] for v in batch[label_column]]
        return {"input_ids": out["input_ids"], "attention_mask": out["attention_mask"], "labels": labels}

    tokenized = rows.map(encode, batched=True, remove_columns=rows.column_names, new_fingerprint=f"{key}-cls")
    if tokenizer.pad_token is None:  # GPT-style tokenizers: pad with EOS (masked out anyway)
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of)
    lengths = [len(ids) for ids in tokenized["input_ids"]]
    num_labels = max(int(max(rows[label_column])) + 1 if numeric else len(names), 2)
    return PreparedData(tokenized, lengths, collator, f"{source.path}@{key}", num_labels=num_labels)


def _text_column(rows: Any, source: DataSource) -> str:
    columns = rows.column_names
    if source.text_column is not None:
        if source.text_column not in columns:
            raise WorkloadError(
                f"text_column={source.text_column!r} is not in {source.path} (columns: {', '.join(columns)})",
                f"pass one of {', '.join(columns)}",
                field="text_column",
            )
        return source.text_column
    if "text" in columns:
        return "text"
    strings = [c for c, f in rows.features.items() if getattr(f, "dtype", None) in ("string", "large_string")]
    if not strings:
        raise WorkloadError(
            f"dataset {source.path} has no text column (columns: {', '.join(columns)})",
            "name it with text_column",
            field=("dataset", "text_column"),
        )
    return str(strings[0])


def _fingerprint(
    rows: Any, tokenizer: Any, task: str, seq_len: int, text_column: str, label_column: str | None
) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    tokenizer_text = backend.to_str() if backend is not None else repr(tokenizer)
    parts = [_FORMAT_VERSION, rows._fingerprint, tokenizer_text, task, str(seq_len), text_column]
    parts.append(str(label_column))
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:24]
