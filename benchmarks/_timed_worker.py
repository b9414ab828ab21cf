"""Worker-side timestamps for `benchmarks/isolation.py`: imported inside the worker processes.

`timed_worker_main` stands in for `autotune.executors.forkserver.worker_main` (the benchmark patches the
launcher's reference in its own process, so the supervisor's code is otherwise unchanged). It runs the
real `worker_main` and records, on the system-wide monotonic clock shared by every process, when the
worker started running, when it planned, built its trainer, measured and returned. With the
``AUTOTUNE_BENCH_PROFILE`` directory in the job's environment it also writes a cProfile of the worker.
Kept free of torch imports at module level: the worker imports it before its job.
"""

from __future__ import annotations

import cProfile
import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STAMPS_ENV = "AUTOTUNE_BENCH_STAMPS"  # a directory: each worker writes <pid>.json there
PROFILE_ENV = "AUTOTUNE_BENCH_PROFILE"  # a directory: each worker writes <pid>.prof there


def _wrap(owner: Any, name: str, stamps: dict[str, Any], label: str) -> None:
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        stamps.setdefault(f"{label}_start", time.monotonic())
        try:
            return original(*args, **kwargs)
        finally:
            stamps[f"{label}_end"] = time.monotonic()
            stamps[f"{label}_calls"] = stamps.get(f"{label}_calls", 0) + 1

    setattr(owner, name, timed)


def timed_worker_main(job: Any, conn: Any) -> None:
    """`worker_main` with timestamps (and optionally a profile) written for the benchmark."""
    stamps: dict[str, Any] = {"started": time.monotonic(), "pid": os.getpid()}
    from autotune.executors import forkserver as worker
    from autotune.trial import entry
    from autotune.trial.trainer import AutotuneTrainer

    _wrap(entry, "plan_from_study", stamps, "plan")
    _wrap(entry, "build_trainer", stamps, "trainer")
    _wrap(AutotuneTrainer, "measure_config", stamps, "measure")
    _wrap(entry, "hyperparameter_search", stamps, "search")
    profile_dir = job.env.get(PROFILE_ENV)
    try:
        if profile_dir:
            profiler = cProfile.Profile()
            try:
                profiler.runcall(worker.worker_main, job, conn)
            finally:
                profiler.dump_stats(str(Path(profile_dir) / f"{os.getpid()}.prof"))
        else:
            worker.worker_main(job, conn)
    finally:
        stamps["returned"] = time.monotonic()
        directory = job.env.get(STAMPS_ENV)
        if directory:
            (Path(directory) / f"{os.getpid()}.json").write_text(json.dumps(stamps))


def report_started(conn: Any) -> None:
    """A trivial worker target: sends the time it started running (forkserver start-up cost)."""
    conn.send(time.monotonic())
    conn.close()
