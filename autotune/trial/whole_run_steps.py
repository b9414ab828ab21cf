"""The whole-run check inside a trial process: one configuration run once as a whole run does.

A throughput trial trains with evaluation and saving off (`autotune.plan.resolved.base_training_args`)
on whatever batches its window drew. A whole run also meets its data's longest batch, evaluates and
saves checkpoints, and each of those can need more memory than the window ever saw. The check runs
the stock training loop for one optimizer step with the Trainer's own evaluation and saving at that
step (its public arguments: ``eval_strategy``, ``save_strategy``), on the longest samples of the
data, and measures the peak of each step (`WholeRunSteps`, with the trial's own meter:
`autotune.measure.peak.PeakMemoryMeter`). The verdict against the cap is the supervisor's
(`autotune.driver.wholerun`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import TrainerCallback

from autotune.measure.peak import PeakMemoryMeter
from autotune.records import WHOLE_RUN_STEPS, WholeRunFindings
from autotune.space.defaults import training_args_defaults


def longest_indices(lengths: Sequence[int] | None, count: int) -> list[int]:
    """The indices of the `count` longest samples, longest first (read in a loop where the data
    holds fewer; ties in data order); with no lengths (all samples alike) the first `count`."""
    if not lengths:
        return list(range(count))
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i % len(order)] for i in range(count)]


def check_args(kwargs: dict[str, Any], eval_batch_size: int | None) -> dict[str, Any]:
    """A trial's `TrainingArguments` kwargs as the check runs them: one optimizer step, then the
    Trainer's own evaluation (`eval_batch_size` per device, default the train batch) and checkpoint
    save at that step; the samples in the order given (the longest batch, chosen by the check)."""
    default = training_args_defaults()["per_device_train_batch_size"]
    train_batch = kwargs.get("per_device_train_batch_size") or default
    return {
        **kwargs,
        "max_steps": 1,
        "eval_strategy": "steps",
        "eval_steps": 1,
        "save_strategy": "steps",
        "save_steps": 1,
        "per_device_eval_batch_size": eval_batch_size or int(train_batch),
        "train_sampling_strategy": "sequential",
    }


def largest_peaks(ranks: Sequence[dict[str, int]]) -> dict[str, int]:
    """Each step's peak over every rank's (`autotune.measure.ranks.gather`), in step order."""
    return {
        step: max(peaks[step] for peaks in ranks if step in peaks)
        for step in WHOLE_RUN_STEPS
        if any(step in peaks for peaks in ranks)
    }


class WholeRunSteps(TrainerCallback):
    """Measures the peak of each step of a whole-run check: the optimizer step (from train begin
    to its end), the evaluation (to ``on_evaluate``) and the save (to ``on_save``). `step` is the
    one under way: the one that failed when training raises.

    Args:
        meter: the trial's peak-memory meter (reset at each step's start, read at its end).
    """

    def __init__(self, meter: PeakMemoryMeter) -> None:
        self.meter = meter
        self.step_peaks: dict[str, int] = {}
        self.step: str | None = None
        self.memory_source: str | None = None
        self.widest = 0  # the padded width of the widest batch the optimizer step trained

    def saw(self, batches: Sequence[Any]) -> None:
        """The batches of the optimizer step (`Trainer.get_batch_samples`)."""
        for batch in batches:
            ids = batch.get("input_ids") if hasattr(batch, "get") else None
            if isinstance(ids, torch.Tensor):
                self.widest = max(self.widest, int(ids.shape[-1]))

    def begin(self, step: str) -> None:
        self.step = step
        self.meter.reset()

    def end(self) -> None:
        """Read the peak of the step under way (also after it failed: what it reached)."""
        if self.step is None:
            return
        read = self.meter.read()
        if read.get("peak_memory_bytes") is not None:
            self.step_peaks[self.step] = int(read["peak_memory_bytes"])  # type: ignore[arg-type]
        self.memory_source = str(read.get("memory_source"))

    def _next(self, step: str | None) -> None:
        self.end()
        if step is None:
            self.step = None
        else:
            self.begin(step)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.begin(WHOLE_RUN_STEPS[0])

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._next(WHOLE_RUN_STEPS[1])

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._next(WHOLE_RUN_STEPS[2])

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._next(None)


def check_datasets(full: Any, lengths: Sequence[int] | None, args: Any) -> tuple[Any, Any]:
    """The check's train and eval samples, drawn from the data (`full`, read in a loop): the
    longest ones, enough for one optimizer step on every process (longest first), and for one
    evaluation batch on each."""
    world = max(1, int(args.world_size))
    train = args.per_device_train_batch_size * args.gradient_accumulation_steps * world
    evaluated = args.per_device_eval_batch_size * world
    subset = torch.utils.data.Subset
    return subset(full, longest_indices(lengths, train)), subset(full, longest_indices(lengths, evaluated))


def findings(
    steps: WholeRunSteps, ranks: Sequence[dict[str, int]], args: Any, reason: str | None, message: str | None
) -> WholeRunFindings:
    """What a whole-run job found (`autotune.driver.wholerun.judged` reads it): each step's
    peak over every rank (`ranks`), the step that failed with its `reason` and `message` (None: none
    did), and the sizes of its batches (`args`: the check's `TrainingArguments`)."""
    world = max(1, int(args.world_size))
    return WholeRunFindings(
        step_peaks=dict(largest_peaks(ranks)),
        failed_step=(steps.step or "setup") if reason is not None else None,
        reason=reason,
        message=message,
        train_samples=args.per_device_train_batch_size * args.gradient_accumulation_steps * world,
        train_tokens=steps.widest or None,
        eval_samples=args.per_device_eval_batch_size * world,
        memory_source=steps.memory_source,
    )
