"""A Trainer callback that makes bf16 steps about ten times slower: what bf16 autocast costs on a CPU
without native bf16 (AVX2 only), simulated on one that has it, so the screening benchmark measures
the same kind of space on either machine. Imported by the workers (pickled by reference)."""

from __future__ import annotations

import time
from typing import Any

from transformers import TrainerCallback

# A training step is a forward and a backward of about twice its cost.
_STEP_PER_FORWARD = 3.0


class SlowBf16(TrainerCallback):
    """In a bf16 trial, each forward of the model is followed by a sleep of `factor - 1` times the
    step it belongs to (taken as three forwards), so every step, the first one included, is about
    `factor` times slower and the slowing lies inside the step as the trial times it."""

    def __init__(self, factor: float = 10.0) -> None:
        self.factor = factor

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not getattr(args, "bf16", False) or model is None:
            return
        began: list[float] = []
        extra = (self.factor - 1) * _STEP_PER_FORWARD

        def before(module: Any, inputs: Any) -> None:
            began.append(time.perf_counter())

        def after(module: Any, inputs: Any, output: Any) -> None:
            if began:
                time.sleep(extra * (time.perf_counter() - began.pop()))

        model.register_forward_pre_hook(before)
        model.register_forward_hook(after)
