"""Masked-LM masks as a function of the sample: every trial trains on the same inputs and labels.

`DataCollatorForLanguageModeling` draws its masks per batch, from the global torch RNG (or from one
generator per data loader worker). Which tokens of a sample are masked then depends on the batch
size, the accumulation, the number of loader workers and on every draw made before it (dropout, a
kernel that draws differently): two trials at equal tokens would train on different labels, and
their loss difference would hold noise that no knob made. Here each sample is masked as it is read
(`MaskedSamples`), by a generator seeded from the run's seed and the sample's position in the
data read in a loop: sample ``i`` is masked alike in every trial, whatever batch split, worker or
process reads it, and differently each time the data comes round again (dynamic masking, as the
collator does). The collator then only pads, labels with -100 (`padding_collator`).

The masking rule is the collator's (`mlm_probability` of the tokens that are not special, of which
`mask_replace_prob` become the mask token, `random_replace_prob` a random token, the rest
unchanged); whole-word masking is not offered here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch


@dataclass(frozen=True)
class SampleMasking:
    """How masked-LM samples are masked (the collator's rule, see the module docstring).

    Attributes:
        mask_token_id: the id the masked tokens become, most of the time.
        vocab_size: random replacements are drawn from ids ``0 .. vocab_size - 1`` (the tokenizer's
            length, as the collator draws them).
        special_ids: ids that are never masked (padding, CLS, SEP, ...).
        mlm_probability: the share of the other tokens that are masked.
        mask_replace_prob: of the masked tokens, the share replaced by the mask token.
        random_replace_prob: of the masked tokens, the share replaced by a random token.
    """

    mask_token_id: int
    vocab_size: int
    special_ids: tuple[int, ...]
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1

    @classmethod
    def of_tokenizer(cls, tokenizer: Any, mlm_probability: float = 0.15) -> SampleMasking:
        """The stock collator's masking for `tokenizer` (which has a mask token)."""
        return cls(
            int(tokenizer.mask_token_id),
            len(tokenizer),
            tuple(sorted(int(i) for i in tokenizer.all_special_ids)),
            mlm_probability,
        )

    @classmethod
    def of_collator(cls, collator: Any) -> SampleMasking | None:
        """The masking a user's `DataCollatorForLanguageModeling` does, to be done per sample; None
        for any other collator (a subclass, whole-word masking or ``mlm=False`` included: its
        batches are the user's to make)."""
        from transformers import DataCollatorForLanguageModeling

        if type(collator) is not DataCollatorForLanguageModeling or not collator.mlm:
            return None
        if getattr(collator, "whole_word_mask", False):
            return None
        return replace(
            cls.of_tokenizer(collator.tokenizer, float(collator.mlm_probability or 0.0)),
            mask_replace_prob=float(getattr(collator, "mask_replace_prob", 0.8)),
            random_replace_prob=float(getattr(collator, "random_replace_prob", 0.1)),
        )

    def mask(self, input_ids: Any, generator: torch.Generator, special: Any = None) -> dict[str, Any]:
        """One sample's masked ``input_ids`` and its ``labels`` (-100 where nothing is predicted).

        Args:
            input_ids: the sample's token ids (a list or a 1-D tensor).
            generator: where every random draw of this sample comes from.
            special: the sample's ``special_tokens_mask`` where the data has one; else the
                special ids decide.
        """
        ids = torch.as_tensor(input_ids, dtype=torch.long).clone()
        if special is not None:
            never = torch.as_tensor(special, dtype=torch.bool)
        else:
            never = torch.isin(ids, torch.tensor(self.special_ids, dtype=torch.long))
        chance = torch.full(ids.shape, self.mlm_probability).masked_fill_(never, 0.0)
        masked = torch.bernoulli(chance, generator=generator).bool()
        labels = ids.masked_fill(~masked, -100)
        replaced = torch.bernoulli(torch.full(ids.shape, self.mask_replace_prob), generator=generator).bool()
        replaced &= masked
        ids[replaced] = self.mask_token_id
        rest = 1.0 - self.mask_replace_prob
        if rest > 0 and self.random_replace_prob > 0:
            scaled = self.random_replace_prob / rest
            random = torch.bernoulli(torch.full(ids.shape, scaled), generator=generator).bool()
            random &= masked & ~replaced
            words = torch.randint(self.vocab_size, ids.shape, dtype=torch.long, generator=generator)
            ids[random] = words[random]
        return {"input_ids": ids, "labels": labels}


class MaskedSamples(torch.utils.data.Dataset):
    """`data` with each sample masked by `masking`, from a generator seeded by (`seed`, index)."""

    def __init__(self, data: Any, masking: SampleMasking, seed: int) -> None:
        self.data, self.masking, self.seed = data, masking, int(seed)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> dict[str, Any]:
        sample = dict(self.data[index])
        special = sample.pop("special_tokens_mask", None)
        generator = torch.Generator().manual_seed(sample_seed(self.seed, index))
        return {**sample, **self.masking.mask(sample["input_ids"], generator, special)}


def sample_seed(seed: int, index: int) -> int:
    """The seed of sample `index`'s masks in a run of `seed`: distinct per sample and per run."""
    return (int(seed) * 1_000_003 + int(index) + 1) % 2**63


def padding_collator(tokenizer: Any, pad_to_multiple_of: int | None = None) -> Any:
    """A collator for samples already masked: pads ``input_ids`` (and the attention mask) with the
    tokenizer's padding, ``labels`` with -100."""
    from transformers import DataCollatorForTokenClassification

    return DataCollatorForTokenClassification(tokenizer, pad_to_multiple_of=pad_to_multiple_of)
