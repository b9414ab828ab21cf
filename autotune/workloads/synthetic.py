"""Synthetic data: random tokens at the sequence length, as the Transformers performance guides measure."""

from __future__ import annotations

import torch

from autotune.workloads.tasks import Task


class SyntheticTokens(torch.utils.data.Dataset):
    """Random token sequences, generated on demand from (seed, index): no memory held per sample.

    Every token is a real (non-padding) token. Causal and masked LM samples carry
    ``labels = input_ids``; classification samples a random label.
    """

    # Long enough that no trial reaches the end of an epoch (which would restart the data loader
    # inside the measured window), small enough that any sampler over it is cheap to build.
    length = 1 << 20

    def __init__(self, seq_len: int, vocab_size: int, task: Task, num_labels: int, seed: int) -> None:
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.task = task
        self.num_labels = num_labels
        self.seed = seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        input_ids = torch.randint(0, self.vocab_size, (self.seq_len,), generator=generator)
        sample = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if self.task != "sequence-classification":  # masked LM on random tokens: predict them all
            sample["labels"] = input_ids.clone()
        else:
            sample["labels"] = torch.randint(0, self.num_labels, (), generator=generator)
        return sample
