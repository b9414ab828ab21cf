"""The forkserver executor: each job in a fresh worker process started from the forkserver
(`autotune.executors.warm`), which has already imported everything a trial needs.

A `WorkerProcess` is one worker: its exit is turned into a reason (``killed`` by a signal,
``crashed`` on a non-zero exit or a fatal signal, ``hung`` when the watchdog had to kill its process
group), with the tail of its log as the message.
"""

from __future__ import annotations

import contextlib
import os
import signal
from multiprocessing.connection import Connection
from typing import Any

from autotune.executors.processes import ProcessExecutor, Watched, signal_failure
from autotune.executors.warm import ForkServerProcess, forkserver_context
from autotune.store.outcomes import CRASHED
from autotune.trial.entry import serve_job
from autotune.trial.job import Job, JobFailed
from autotune.trial.process import become_trial_process


def worker_main(job: Job, conn: Any) -> None:
    """A forkserver worker's entry point."""
    become_trial_process(job, own_group=True, redirect_output=True)
    try:
        serve_job(job, conn.send)
    finally:
        conn.close()


class WorkerProcess(Watched):
    """One worker started from the forkserver: its process and its message pipe."""

    def __init__(self, context: Any, job: Job, watchdog_s: float) -> None:
        receive, send = context.Pipe(duplex=False)
        self.conn: Connection = receive
        self.process = ForkServerProcess(target=worker_main, args=(job, send), name="autotune-worker")
        self.process.start()
        send.close()
        assert self.process.pid is not None
        self.pid: int = self.process.pid
        super().__init__(job, watchdog_s)  # the deadline counts from the start

    def waitables(self) -> list[Any]:
        return [self.conn, int(self.process.sentinel)]

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill_group(self) -> None:
        """SIGKILL the worker's process group (it made its own), falling back to the process."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                os.kill(self.pid, signal.SIGKILL)

    def join(self, timeout_s: float = 10.0) -> None:
        self.process.join(timeout_s)
        if self.process.is_alive():
            self.kill_group()
            self.process.join(timeout_s)
        # Its children (data-loader workers) die with the group; leave no stragglers behind.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self.conn.close()

    def exit_failure(self) -> JobFailed | None:
        code = self.process.exitcode
        tail = self.log_tail()
        if self.hung:
            return self.hung_failure(f"it{tail}")
        if code is None or code == 0:
            return None
        if code < 0:
            return signal_failure(-code, "the worker", tail)
        return JobFailed(CRASHED, f"the worker exited with code {code}{tail}")


class ForkserverExecutor(ProcessExecutor):
    """Each job in a fresh worker process from the forkserver (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.context = forkserver_context()

    def _spawn(self, job: Job) -> Watched:
        return WorkerProcess(self.context, job, self.watchdog_s)
