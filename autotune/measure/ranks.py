"""The few collectives a DDP trial needs so that every rank takes the same decision at the same
point: rank 0 decides (it alone asks the study), the others follow. Outside a process group of
more than one rank every function here is the identity."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch


def distributed() -> bool:
    """Whether this process is one rank of a process group of more than one."""
    return bool(torch.distributed.is_available() and torch.distributed.is_initialized()) and (
        torch.distributed.get_world_size() > 1
    )


def is_rank_zero() -> bool:
    return not distributed() or torch.distributed.get_rank() == 0


def from_rank_zero(value: Any) -> Any:
    """Rank 0's `value`, on every rank (a picklable object)."""
    if not distributed():
        return value
    box = [value]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def gather(value: Any) -> list[Any]:
    """Every rank's `value`, in rank order, on every rank."""
    if not distributed():
        return [value]
    everyone: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, value)
    return everyone


def init_group(timeout_s: float) -> tuple[int, int]:
    """Join the process group a launcher (torchrun, accelerate) describes in the environment, with
    `timeout_s` for every collective (also on CPU, where the Trainer would leave gloo's 30
    minutes). Returns (rank, world size)."""
    if not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        torch.distributed.init_process_group(backend=backend, timeout=timedelta(seconds=float(timeout_s)))
    return torch.distributed.get_rank(), torch.distributed.get_world_size()
