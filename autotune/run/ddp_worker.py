"""One rank of a DDP trial: ``torchrun --nproc-per-node N -m autotune.run.ddp_worker JOB_FILE``.

The supervisor starts a fresh torchrun group per trial (and per baseline or finalist
measurement). Every rank loads the plan from the store and builds the trial Trainer; rank 0 asks
the study for the trial (the Trainer's own rank-zero trial generation), the other ranks receive its
values. A failure on any rank ends that rank's process with its reason written next to the job;
torchrun then ends the whole group and the supervisor records the trial with that reason. The
process group is made here with `--ddp-timeout`, on CPU too, so a desynchronised group fails
within it instead of the default 30 minutes.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from autotune.measure.ranks import init_group
from autotune.progress import Reporter
from autotune.run.worker import (
    DONE,
    ERROR,
    MEASURED,
    PipeReporter,
    WorkerJob,
    _die_with_parent,
    _watch_supervisor,
)


def rank_error_path(job_file: str, rank: int) -> Path:
    """Where rank `rank` of the group running `job_file` writes why it failed."""
    return Path(f"{job_file}.rank{rank}.json")


def main(argv: list[str] | None = None) -> None:
    job_file = (argv if argv is not None else sys.argv[1:])[0]
    with open(job_file, "rb") as handle:
        job: WorkerJob = pickle.load(handle)
    rank = int(os.environ.get("RANK", "0"))
    _die_with_parent()
    if job.supervisor is not None:
        threading.Thread(target=_watch_supervisor, args=(job.supervisor,), daemon=True).start()
    conn = _connect(job.events_path) if rank == 0 and job.events_path else None
    reporter: Reporter = PipeReporter(conn) if conn is not None else Reporter()
    try:
        init_group(job.ddp_timeout_s)
        from autotune.run.worker import _run_job

        payload = _run_job(job, reporter)
        if conn is not None:
            conn.send((MEASURED if job.kind == "measure" else DONE, payload))
    except BaseException as exc:
        from autotune.run.trainer import failure_reason, one_line

        failure = {"rank": rank, "reason": failure_reason(exc), "message": one_line(exc)}
        rank_error_path(job_file, rank).write_text(json.dumps(failure))
        if conn is not None:
            conn.send((ERROR, {**failure, "message": f"rank {rank}: {failure['message']}"}))
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
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


if __name__ == "__main__":
    main()
