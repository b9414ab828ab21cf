"""One rank of a DDP trial: ``torchrun --nproc-per-node N -m autotune.executors.torchrun_rank JOB_FILE``.

The torchrun executor starts a fresh group per trial (and per baseline or finalist measurement).
Every rank loads the plan from the store and builds the trial Trainer; rank 0 asks the study for
the trial (the Trainer's own rank-zero trial generation), the other ranks receive its values. A
failure on any rank ends that rank's process with its reason written next to the job; torchrun
then ends the whole group and the executor reports the job with that reason. The process group is
made here with `--ddp-timeout`, on CPU too, so a desynchronised group fails within it instead of
the default 30 minutes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import socket
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from autotune.trial.job import Job, JobFailed


def rank_error_path(job_file: str, rank: int) -> Path:
    """Where rank `rank` of the group running `job_file` writes why it failed."""
    return Path(f"{job_file}.rank{rank}.json")


def describe_failure(job_file: str, world_size: int) -> dict[str, Any] | None:
    """The first rank's written failure, if any rank wrote one."""
    for rank in range(world_size):
        path = rank_error_path(job_file, rank)
        if path.exists():
            try:
                return dict(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
    return None


def main(argv: list[str] | None = None) -> None:
    # The trial machinery is imported here, not at the top: the torchrun executor reads
    # `describe_failure` from this module without paying for torch and transformers.
    from autotune.measure.ranks import init_group
    from autotune.trial.entry import serve_job
    from autotune.trial.process import become_trial_process

    job_file = (argv if argv is not None else sys.argv[1:])[0]
    with open(job_file, "rb") as handle:
        job: Job = pickle.load(handle)
    rank = int(os.environ.get("RANK", "0"))
    # torchrun gives each rank its environment and devices, and sends its output to the job's log.
    become_trial_process(
        dataclasses.replace(job, cpu_cores=None, cuda_device=None), own_group=False, redirect_output=False
    )
    conn = _connect(job.events_path) if rank == 0 and job.events_path else None

    def noted(failed: JobFailed) -> JobFailed:
        failure = {"rank": rank, "reason": failed.reason, "message": failed.message}
        rank_error_path(job_file, rank).write_text(json.dumps(failure))
        return dataclasses.replace(failed, message=f"rank {rank}: {failed.message}")

    send = conn.send if conn is not None else None
    serve_job(job, send, on_failure=noted, setup=lambda: init_group(job.ddp_timeout_s))
    _end_process_group()


def _connect(path: str) -> Connection | None:
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
    except OSError:
        return None  # no supervisor listening: run without progress events
    return Connection(sock.detach())


def _end_process_group() -> None:
    import torch

    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
