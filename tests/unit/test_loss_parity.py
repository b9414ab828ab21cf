"""Loss parity under noise: paired steps on identical data, the noise model, what is compared at all
(`autotune.store.objective.compare_losses`, `autotune.trial.judge`, `autotune.store.semantics`),
and masked-LM masks that are a function of the sample (`autotune.workloads.masking`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoTokenizer, DataCollatorForLanguageModeling

from autotune.records import Baseline, measured_record
from autotune.store.objective import LossComparison, compare_losses, loss_diverged
from autotune.store.outcomes import LOSS_DIVERGED
from autotune.store.semantics import loss_compared, semantic_changes
from autotune.trial.judge import judge
from autotune.workloads.masking import MaskedSamples, SampleMasking, padding_collator
from autotune.workloads.user import UserWorkload
from tests.local_models import write_tokenizer

TOLERANCE = 0.05
# The baseline's per-step losses: the batches differ, so the loss jumps from step to step.
BASE = [10.0, 14.0, 8.0, 12.0, 9.0, 13.0, 10.0, 11.0, 9.0, 12.0, 10.0, 13.0]


def _curve(losses: list[float], step_tokens: int = 100) -> list[list[float]]:
    return [[step_tokens * (i + 1), loss] for i, loss in enumerate(losses)]


def _trial(second_half: list[float]) -> list[list[float]]:
    """The baseline's curve, plus `second_half` on each step of its second half."""
    differences = [0.0] * (len(BASE) - len(second_half)) + second_half
    return _curve([b + d for b, d in zip(BASE, differences, strict=True)])


def _record(curve: list[list[float]]) -> Any:
    return measured_record({"tokens_per_s": 1000.0, "loss_curve": curve})


BASELINE = Baseline(tokens_per_s=900.0, loss_curve=_curve(BASE)).as_trial()


# -- the noise model ------------------------------------------------------------------------------


def test_a_difference_within_the_noise_is_not_diverged_past_the_tolerance() -> None:
    # 6.9% worse on average, but the paired steps scatter by more than that: A/A noise, as a
    # configuration that keeps the math shows (dropout drawn otherwise). Today's guard prunes it.
    noisy = _trial([2.4, -1.1, 2.2, -0.9, 2.5, -0.6])
    comparison = compare_losses(noisy, _curve(BASE))
    assert comparison.delta == pytest.approx(0.069, abs=0.001) and comparison.paired_steps == 6
    assert comparison.interval is not None and comparison.interval[0] < 0 < comparison.interval[1]
    assert not comparison.significant and not loss_diverged(comparison, TOLERANCE)
    verdict = judge(_record(noisy), None, BASELINE, TOLERANCE)
    assert verdict.complete and verdict.loss_delta == pytest.approx(comparison.delta)


def test_a_consistent_difference_past_the_tolerance_diverges_and_says_its_interval() -> None:
    worse = _trial([0.7, 0.6, 0.8, 0.7, 0.75, 0.65])
    comparison = compare_losses(worse, _curve(BASE))
    assert comparison.significant and comparison.interval is not None
    assert 0.05 < comparison.interval[0] < comparison.delta < comparison.interval[1] < 0.08  # type: ignore[operator]
    verdict = judge(_record(worse), None, BASELINE, TOLERANCE)
    assert verdict.reason == LOSS_DIVERGED
    low, high = (f"{100 * bound:.1f}%" for bound in comparison.interval)
    assert verdict.message == (
        "the loss is 6.5% worse than the baseline's at equal tokens "
        f"(95% interval {low} to {high} over 6 paired steps; tolerance 5%)"
    )
    # Significant but within the tolerance: a small real difference is no divergence.
    assert not loss_diverged(comparison, 0.1)


def test_a_gap_that_grows_smoothly_is_no_noise() -> None:
    # A numerics problem opens a gap step by step: its step-to-step scatter is small.
    growing = compare_losses(_trial([0.1, 0.3, 0.5, 0.7, 0.9, 1.1]), _curve(BASE))
    assert growing.significant and loss_diverged(growing, TOLERANCE)
    # As does a blow-up the training recovers from.
    recovering = compare_losses(_trial([5.0, 4.0, 3.0, 2.5, 2.0, 1.5]), _curve(BASE))
    assert recovering.significant and loss_diverged(recovering, TOLERANCE)


def test_the_same_effective_batch_in_another_split_pairs_its_steps() -> None:
    # Accumulation 2 of batch 4 records one point per optimizer step of 8 samples, as batch 8 does.
    split = compare_losses(_trial([0.7, 0.6, 0.8, 0.7, 0.75, 0.65]), _curve(BASE))
    assert split.paired_steps == 6
    # Steps over other tokens (another effective batch) do not pair: no interval, no verdict.
    halves = _curve([loss for loss in BASE for _ in (0, 1)], step_tokens=50)
    unpaired = compare_losses([[t, loss * 1.2] for t, loss in halves], _curve(BASE))
    assert unpaired.delta == pytest.approx(0.2) and unpaired.interval is None
    assert unpaired.paired_steps == 0 and not loss_diverged(unpaired, TOLERANCE)


def test_fewer_than_two_paired_steps_cannot_tell_a_difference_from_noise() -> None:
    one = compare_losses(_curve([10.0, 12.0]), _curve([10.0, 10.0]))
    assert one.delta == pytest.approx(0.2) and one.paired_steps == 1 and one.interval is None
    assert not loss_diverged(one, TOLERANCE)
    # A loss that is not finite where the baseline's is needs no noise model.
    broken = compare_losses(_curve([10.0, math.nan]), _curve([10.0, 10.0]))
    assert broken == LossComparison(math.inf) and loss_diverged(broken, TOLERANCE)


def test_identical_losses_are_no_difference() -> None:
    same = compare_losses(_curve(BASE), _curve(BASE))
    assert same.delta == 0.0 and same.interval == (0.0, 0.0) and not same.significant


# -- what is compared ------------------------------------------------------------------------------

MATH = {
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "precision": "fp32",
    "optim": "adamw_torch",
    "group_by_length": False,
}


@pytest.mark.parametrize(
    ("chosen", "compared"),
    [
        ({"activation_checkpointing": True, "attn_implementation": "eager"}, True),  # keeps the math
        ({"dataloader_num_workers": 2, "torch_compile": "inductor"}, True),
        ({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}, True),  # same 8
        ({"precision": "bf16"}, True),  # numerics: what the guard is for
        ({"optim": "sgd"}, True),
        ({"per_device_train_batch_size": 16}, False),  # fewer steps at equal tokens, same LR
        ({"gradient_accumulation_steps": 4, "precision": "bf16"}, False),
        ({"group_by_length": True}, False),  # other samples at equal tokens
    ],
)
def test_the_loss_guard_judges_numerics_at_the_baselines_effective_batch(
    chosen: dict[str, Any], compared: bool
) -> None:
    assert loss_compared(semantic_changes(MATH, chosen)) is compared


def test_a_larger_effective_batch_is_not_pruned_but_keeps_its_delta() -> None:
    # bs=16 at equal tokens: half the optimizer steps at an unscaled learning rate, 9.3% worse
    # by construction. Today's guard prunes it; the answer discloses the batch change instead.
    pairs = zip(BASE[::2], BASE[1::2], strict=True)
    larger = _curve([(a + b) / 2 * 1.093 for a, b in pairs], step_tokens=200)
    verdict = judge(_record(larger), None, BASELINE, TOLERANCE, compared=False)
    assert verdict.complete and verdict.loss_delta == pytest.approx(0.093)
    # The same curve, compared, would be judged (here: no paired steps, so no verdict either way).
    assert judge(_record(larger), None, BASELINE, TOLERANCE).complete
    # A loss that is not finite where the baseline's is still diverges.
    broken = _curve([*BASE[:5], math.inf], step_tokens=200)
    assert judge(_record(broken), None, BASELINE, TOLERANCE, compared=False).reason == LOSS_DIVERGED


# -- masks that are a function of the sample ------------------------------------------------------

MASKING = SampleMasking(mask_token_id=4, vocab_size=22, special_ids=(0, 1, 2, 3, 4), mlm_probability=0.3)
SAMPLES = [{"input_ids": [2, *range(5, 5 + n), 3]} for n in (6, 9, 12, 15, 8, 11, 7, 10)]


def _read(dataset: Any, batch_size: int, workers: int = 0, collate: Any = None) -> list[list[int]]:
    """Every sample's masked ids and labels, in the order a data loader hands them out."""
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, num_workers=workers, collate_fn=collate or (lambda rows: rows)
    )
    rows = []
    for batch in loader:
        rows += [[*row["input_ids"].tolist(), -1, *row["labels"].tolist()] for row in batch]
    return rows


def test_masks_are_the_same_whatever_the_batch_split_the_workers_or_the_global_rng() -> None:
    masked = MaskedSamples(SAMPLES, MASKING, seed=42)
    torch.manual_seed(0)
    by_eight = _read(masked, 8)
    torch.manual_seed(1)  # dropout and every other draw before the batch moved the global RNG
    torch.rand(1000)
    assert _read(masked, 2) == by_eight
    assert _read(masked, 3, workers=1) == by_eight  # a loader worker draws nothing of its own
    assert _read(MaskedSamples(SAMPLES, MASKING, seed=7), 8) != by_eight  # another run's seed


def test_each_pass_over_the_data_masks_anew_and_the_rule_is_the_collators() -> None:
    ids = list(range(5, 21))  # no special token
    looped = MaskedSamples([{"input_ids": ids}] * 4000, MASKING, seed=3)
    samples = [looped[i] for i in range(4000)]
    assert not torch.equal(samples[0]["labels"], samples[1]["labels"])  # dynamic masking
    labels = torch.stack([s["labels"] for s in samples])
    inputs = torch.stack([s["input_ids"] for s in samples])
    masked = labels != -100
    assert masked.float().mean().item() == pytest.approx(0.3, abs=0.01)
    assert torch.equal(labels[masked], torch.tensor(ids).expand_as(labels)[masked])
    as_mask = (inputs == 4)[masked].float().mean().item()
    assert as_mask == pytest.approx(0.8, abs=0.02)
    unchanged = (inputs == labels)[masked].float().mean().item()  # 10%, plus random draws that hit it
    assert unchanged == pytest.approx(0.1 + 0.1 / 22, abs=0.02)
    assert torch.equal(inputs[~masked], torch.tensor(ids).expand_as(inputs)[~masked])


def test_special_tokens_are_never_masked() -> None:
    rows = [MaskedSamples(SAMPLES, MASKING, seed=s)[0] for s in range(200)]
    assert all(row["labels"][0] == -100 and row["labels"][-1] == -100 for row in rows)
    given = MaskedSamples([{"input_ids": [7] * 8, "special_tokens_mask": [1] * 8}], MASKING, seed=0)
    assert (given[0]["labels"] == -100).all() and "special_tokens_mask" not in given[0]


def test_a_users_stock_masked_lm_collator_masks_per_sample(tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(write_tokenizer(tmp_path / "tokenizer"))
    stock = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=0.25, pad_to_multiple_of=8)
    masking = SampleMasking.of_collator(stock)
    assert masking == SampleMasking(
        tokenizer.mask_token_id, len(tokenizer), tuple(sorted(tokenizer.all_special_ids)), 0.25
    )
    assert SampleMasking.of_collator(DataCollatorForLanguageModeling(tokenizer, mlm=False)) is None
    assert SampleMasking.of_collator(None) is None

    workload = UserWorkload("user", "masked-lm", None, 16, train_dataset=SAMPLES, data_collator=stock)
    dataset, collate = workload.dataset(5), workload.collator()
    assert isinstance(dataset, MaskedSamples)
    samples = [dataset[i] for i in range(3)]
    batch = collate(samples)
    assert batch["input_ids"].shape == batch["labels"].shape == (3, 16)  # padded to a multiple of 8
    for row, sample in enumerate(samples):  # the masks are the samples', the padding is no label
        length = len(sample["input_ids"])
        assert torch.equal(batch["input_ids"][row, :length], sample["input_ids"])
        assert torch.equal(batch["labels"][row, :length], sample["labels"])
        assert (batch["labels"][row, length:] == -100).all()
        assert (batch["input_ids"][row, length:] == tokenizer.pad_token_id).all()
    assert type(padding_collator(tokenizer)) is type(collate)


def test_a_model_that_computes_its_own_loss_has_it_divided_by_the_accumulation() -> None:
    # BertForMaskedLM takes **kwargs but builds its own CrossEntropyLoss: the Trainer would leave
    # its loss undivided by the accumulation steps (a 4 x 2 step's loss twice 8 x 1's). GPT-2
    # averages over num_items_in_batch through transformers' loss function; a model may say so.
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    from autotune.trial.apply import averages_over_items

    bert = BertForMaskedLM(
        BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=37)
    )
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2))
    assert not averages_over_items(bert) and averages_over_items(gpt2)

    class Declared(BertForMaskedLM):
        accepts_loss_kwargs = True

    assert averages_over_items(Declared(bert.config))
