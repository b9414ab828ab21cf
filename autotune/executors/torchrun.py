"""The torchrun executor: each job (a DDP trial, the baseline, a finalist) in a fresh
``torchrun --standalone --nproc-per-node N`` group running `autotune.executors.torchrun_rank`, in
its own session. torchrun starts each rank in a session of its own too: ending a group (the
watchdog, Ctrl-C, SIGTERM, an error) kills the agent's and every rank's, and waits until they are
gone. Rank 0 connects back to a Unix socket for its messages (in a short private folder when the
log folder is too deep for a socket's path); a failing rank writes its reason next to the job
file."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from autotune.executors.processes import (
    CRASH_SIGNALS,
    ProcessExecutor,
    Watched,
    kill_tree,
    signal_name,
    wait_gone,
)
from autotune.executors.torchrun_rank import describe_failure
from autotune.scratch import make_folder
from autotune.store.outcomes import CRASHED, KILLED
from autotune.trial.job import Job, JobFailed
from autotune.trial.process import kill_me_with_my_parent

# The longest path a Unix socket can be bound to on Linux (108 bytes with the closing NUL).
MAX_SOCKET_PATH = 107


def events_socket(folder: str, name: str) -> tuple[str, str | None]:
    """Where a job's events socket goes: `folder`/`name` when that path fits a Unix socket's
    limit, else `name` in a private folder made for it under the system's temporary folder (or
    ``/tmp`` when that is deep too), which the caller removes with the job. Returns the path and
    that private folder (None when none was made)."""
    path = os.path.join(folder, name)
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        return path, None
    for parent in (tempfile.gettempdir(), "/tmp"):
        # mkdtemp adds 8 characters after the prefix.
        if len(os.fsencode(os.path.join(parent, "autotune-sock-12345678", name))) <= MAX_SOCKET_PATH:
            private = make_folder("autotune-sock-", parent)
            return os.path.join(private, name), private
    raise OSError(f"no folder short enough for a Unix socket named {name!r}")


class TorchrunWorker(Watched):
    """One torchrun group running one job."""

    def __init__(self, job: Job, nproc: int, watchdog_s: float, folder: str) -> None:
        base = os.path.join(folder, f"job-{job.job_id}")
        self.events_path, self._socket_dir = events_socket(folder, f"job-{job.job_id}.sock")
        self._ranks: list[tuple[int, str]] = []  # every process below torchrun seen when it was killed
        job = dataclasses.replace(job, events_path=self.events_path)
        self.job_file = f"{base}.pkl"
        with open(self.job_file, "wb") as handle:
            pickle.dump(job, handle)
        self.nproc = nproc
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.events_path)
        self.listener.listen(1)
        self.listener.setblocking(False)
        self.conn: Connection | None = None
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        command += ["-m", "autotune.executors.torchrun_rank", self.job_file]
        with open(job.log_path or os.devnull, "ab") as log:
            self.popen = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: torchrun and all its ranks
                env={**os.environ, **job.env, **_visible(job.cuda_device)},
                preexec_fn=kill_me_with_my_parent,
            )
        self.pid = self.popen.pid
        self._pidfd = os.pidfd_open(self.pid)
        super().__init__(job, watchdog_s)

    def waitables(self) -> list[Any]:
        return [self.conn if self.conn is not None else self.listener, self._pidfd]

    def poll_connect(self) -> None:
        if self.conn is not None:
            return
        with contextlib.suppress(BlockingIOError, OSError):
            sock, _ = self.listener.accept()
            sock.setblocking(True)
            self.conn = Connection(sock.detach())

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill_group(self) -> None:
        """SIGKILL the group: torchrun's agent (its process group) and every rank, each of which
        torchrun starts in a session of its own (with its data-loader workers), found below the
        agent before it dies: an orphaned rank can no longer be told from any other process."""
        if self.popen.poll() is None:
            self._ranks += kill_tree(self.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def join(self, timeout_s: float = 10.0) -> None:
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill_group()
            self.popen.wait(timeout_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # what is left of the agent's own group
        # The killed ranks are not this process's children: wait until they are gone, so that
        # their trial's owner is seen dead (and the trial recorded) as soon as this returns.
        wait_gone(self._ranks, timeout_s)
        for closing in (self.conn, self.listener):
            if closing is not None:
                with contextlib.suppress(OSError):
                    closing.close()
        with contextlib.suppress(OSError):
            os.close(self._pidfd)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    def exit_failure(self) -> JobFailed | None:
        """Why the group ended: the failing rank's own reason when one wrote it."""
        code = self.popen.returncode
        tail = self.log_tail()
        if self.hung:
            return self.hung_failure(f"the group{tail}")
        if code == 0:
            return None
        failed = describe_failure(self.job_file, self.nproc)
        if failed is not None:
            return JobFailed(failed["reason"], f"rank {failed['rank']}: {failed['message']}")
        rank_code = rank_exitcode(self.job.log_path)
        if rank_code is not None and rank_code < 0:
            reason = CRASHED if -rank_code in CRASH_SIGNALS else KILLED
            return JobFailed(reason, f"a rank died of {signal_name(-rank_code)}{tail}")
        if code is not None and code < 0:
            return JobFailed(KILLED, f"torchrun was killed by {signal_name(-code)}{tail}")
        return JobFailed(CRASHED, f"the torchrun group exited with code {code}{tail}")


def rank_exitcode(log_path: str | None) -> int | None:
    """The exit code torchrun reports for its failed rank ("exitcode  : -9")."""
    if not log_path:
        return None
    with contextlib.suppress(OSError):
        found = re.findall(r"exitcode\s*:\s*(-?\d+)", Path(log_path).read_text(errors="replace"))
        if found:
            return int(found[0])
    return None


class TorchrunExecutor(ProcessExecutor):
    """Each job in a fresh torchrun group of ``--nproc-per-node`` ranks."""

    def devices_per_job(self) -> int:
        """A group's ranks each use a GPU of their own: its slot holds ``--nproc-per-node`` of them."""
        return self.plan.config.nproc_per_node

    def _spawn(self, job: Job) -> Watched:
        # the job's log lies in the executor's log folder, made with its first job
        folder = os.path.dirname(job.log_path or "") or tempfile.gettempdir()
        return TorchrunWorker(job, self.plan.config.nproc_per_node, self.watchdog_s, folder)


def _visible(devices: str | None) -> dict[str, str]:
    """The environment that shows a group's ranks only the GPUs of its slot (torchrun hands rank
    r the r-th of them); nothing where the slot names none (CPU, or as inherited)."""
    return {"CUDA_VISIBLE_DEVICES": devices} if devices else {}
