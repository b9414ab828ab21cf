"""A search run under `torchrun --nproc-per-node 2` by test_ddp.py (each rank runs this file)."""

from __future__ import annotations

import sys
import time
from typing import Any

import optuna
import torch
from transformers import TrainerCallback

import autotune
from autotune.cli._render import print_error
from autotune.errors import AutotuneError
from tests.helpers import FAST, Fault, RankRecorder


class SlowBatch(TrainerCallback):
    """Makes the trials of one batch size slower than the trial timeout allows."""

    def __init__(self, batch: int) -> None:
        self.batch = batch

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if args.per_device_train_batch_size == self.batch:
            time.sleep(1.0)


def main(storage: str, space: str, records: str, mode: str) -> None:
    a = {"per_device_train_batch_size": 2, "precision": "fp32"}
    slow = {"per_device_train_batch_size": 8, "precision": "fp32"}
    c = {"per_device_train_batch_size": 4, "precision": "bf16"}
    settings: dict[str, Any] = dict(
        model="tiny-gpt2",
        space=space,
        storage=storage,
        study=mode,
        seq_len=16,
        measure=autotune.MeasureSettings(**{**FAST.__dict__, "trial_timeout_s": 1.5}),
        finalists=0,
        measure_baseline=False,
        ddp_timeout_s=60,
    )
    callbacks: list[Any] = [RankRecorder(records), SlowBatch(8)]
    try:
        if mode == "agreed":  # a trial, its duplicate (skipped), a timeout (pruned), a trial
            autotune.search(trials=1, enqueue=[a], callbacks=callbacks, **settings)
            if torch.distributed.get_rank() == 0:  # as a concurrent proposal would: the same again
                optuna.load_study(study_name=mode, storage=storage).enqueue_trial(a)
            autotune.search(trials=3, enqueue=[slow, c], callbacks=callbacks, **settings)
        else:  # a failure on rank 1 alone
            callbacks.append(Fault("raise", {"per_device_train_batch_size": 4}, rank=1))
            autotune.search(trials=2, enqueue=[c], callbacks=callbacks, **settings)
    except AutotuneError as exc:
        print_error(f"error: {exc}")
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main(*sys.argv[1:])
