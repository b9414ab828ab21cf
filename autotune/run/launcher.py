"""Starting and watching worker processes.

Workers start from a forkserver that has already imported torch, transformers (the package is
lazy: `transformers.trainer` must be named) and autotune's trial modules, so a worker starts in
milliseconds instead of paying the imports. Never plain `fork` after torch has run threaded work:
the child deadlocks in OpenMP. A preload module that fails to import is skipped silently by
multiprocessing, so `autotune.run._preload` imports them all and fails loudly instead.

A `WorkerProcess` is one worker: its exit is turned into a reason (``killed`` by a signal,
``crashed`` on a non-zero exit or a fatal signal, ``hung`` when the watchdog had to kill its process
group), with the tail of its log as the message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import multiprocessing.context
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing import popen_forkserver, spawn
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from autotune.run.worker import WorkerJob, kill_me_with_my_parent, worker_main

PRELOAD = ["autotune.run._preload"]
# Signals that mean the process itself failed (crashed), as opposed to being killed from outside.
_CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}


class _WorkerPopen(popen_forkserver.Popen):
    """A forkserver launch that does not make the worker import the caller's ``__main__``.

    multiprocessing re-imports the parent's main script in every child it does not fork, so a
    user's script that calls `autotune.search()` at module level would run again in each worker
    (and fail there). The worker's target lives in autotune, which needs no main module.
    """

    def _launch(self, process_obj: Any) -> None:
        original = spawn.get_preparation_data

        def without_main(name: str) -> dict[str, Any]:
            data = original(name)
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
            return data

        spawn.get_preparation_data = without_main  # read by the base class's _launch
        try:
            super()._launch(process_obj)  # type: ignore[misc]
        finally:
            spawn.get_preparation_data = original


class _ForkServerProcess(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _WorkerPopen(process_obj)


def forkserver_context() -> Any:
    """The multiprocessing context workers start from (its server is started on first use)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def start_forkserver() -> None:
    """Start the forkserver now, in the background: it imports while the caller goes on (planning,
    opening the store), instead of when the first worker is asked for."""
    from multiprocessing import forkserver

    forkserver_context()
    forkserver.ensure_running()


def start_forkserver_for(config: Any) -> None:
    """Start the forkserver early for a run whose trials will need it: its imports (torch,
    transformers: about 3 s) then overlap the caller's own. Not for an ``org/name`` hub id, whose
    lookup may fail on the network: a run that stops there should stop fast. Decided without
    importing the workload code (it imports torch)."""
    local_model = os.path.isdir(config.model) or "/" not in config.model
    if config.isolation == "process" and local_model:
        start_forkserver()


def watchdog_seconds(trial_timeout_s: float) -> float:
    """How long a worker may run before its process group is killed as hung: the trial's own
    timeout (which a trial that still takes steps honours itself) plus a grace for start-up."""
    return trial_timeout_s + min(120.0, max(5.0, 0.25 * trial_timeout_s))


@dataclass
class Exit:
    """How a worker ended. `reason` is None for a clean exit."""

    reason: str | None
    message: str
    exitcode: int | None


class _Watched:
    """What the supervisor keeps of any worker: its job, its watchdog deadline, whether the
    watchdog killed it, and the result it sent."""

    def __init__(self, job: WorkerJob, watchdog_s: float) -> None:
        self.job = job
        self.deadline = time.monotonic() + watchdog_s
        self.hung = False
        self.result: tuple[str, Any] | None = None

    def alive(self) -> bool:
        raise NotImplementedError

    def kill_group(self) -> None:
        raise NotImplementedError

    def overdue(self, now: float) -> bool:
        return now > self.deadline and self.alive()

    def kill_as_hung(self) -> None:
        self.hung = True
        self.kill_group()

    def log_tail(self, lines: int = 3) -> str:
        """The last lines the worker wrote, for the message of a worker that died."""
        if not self.job.log_path:
            return ""
        try:
            text = Path(self.job.log_path).read_text(errors="replace")
        except OSError:
            return ""
        kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return f"; last output: {' | '.join(kept)}"[:400] if kept else ""


class WorkerProcess(_Watched):
    """One worker started from the forkserver: its process and its event pipe."""

    def __init__(self, context: Any, job: WorkerJob, watchdog_s: float) -> None:
        receive, send = context.Pipe(duplex=False)
        self.conn: Connection = receive
        self.process = _ForkServerProcess(target=worker_main, args=(job, send), name="autotune-worker")
        self.process.start()
        send.close()
        assert self.process.pid is not None
        self.pid: int = self.process.pid
        super().__init__(job, watchdog_s)  # the deadline counts from the start

    def waitables(self) -> list[Any]:
        """What `multiprocessing.connection.wait` watches for this worker: events and its exit."""
        return [self.conn, int(self.process.sentinel)]

    def poll_connect(self) -> None:
        """Take a pending events connection (torchrun groups connect back; this one is a pipe)."""

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

    def exit(self, watchdog_s: float) -> Exit:
        """Why the worker ended (after `join`)."""
        code = self.process.exitcode
        tail = self.log_tail()
        if self.hung:
            return Exit("hung", f"no progress within {watchdog_s:.0f} s: the watchdog killed it{tail}", code)
        if code is None or code == 0:
            return Exit(None, "", code)
        if code < 0:
            number = -code
            name = _signal_name(number)
            if number in _CRASH_SIGNALS:
                return Exit("crashed", f"the worker died of {name}{tail}", code)
            why = f"killed by {name}"
            if number == signal.SIGKILL:
                why += " (on Linux most often the kernel's out-of-memory killer: check `dmesg`)"
            return Exit("killed", why + tail, code)
        return Exit("crashed", f"the worker exited with code {code}{tail}", code)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class TorchrunWorker(_Watched):
    """A DDP worker: a fresh ``torchrun --standalone --nproc-per-node N`` group running
    `autotune.run.ddp_worker` on one job, in its own session (the watchdog kills the group: the
    torchrun agent and every rank). Rank 0 connects back to a Unix socket for events; a failing
    rank writes its reason next to the job file. Same interface as `WorkerProcess`."""

    def __init__(self, job: WorkerJob, nproc: int, watchdog_s: float, folder: str) -> None:
        base = os.path.join(folder, f"job-{job.job_id}")
        self.events_path = f"{base}.sock"
        job = dataclasses.replace(job, events_path=self.events_path)
        self.job = job
        self.job_file = f"{base}.pkl"
        with open(self.job_file, "wb") as handle:
            pickle.dump(self.job, handle)
        self.nproc = nproc
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.events_path)
        self.listener.listen(1)
        self.listener.setblocking(False)
        self.conn: Connection | None = None
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        command += ["-m", "autotune.run.ddp_worker", self.job_file]
        with open(self.job.log_path or os.devnull, "ab") as log:
            self.popen = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: torchrun and all its ranks
                env={**os.environ, **job.env},
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
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def join(self, timeout_s: float = 10.0) -> None:
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill_group()
            self.popen.wait(timeout_s)
        self.kill_group()  # ranks that outlived the agent
        for closing in (self.conn, self.listener):
            if closing is not None:
                with contextlib.suppress(OSError):
                    closing.close()
        with contextlib.suppress(OSError):
            os.close(self._pidfd)

    def exit(self, watchdog_s: float) -> Exit:
        """Why the group ended: the failing rank's own reason when one wrote it."""
        from autotune.run.ddp_worker import describe_failure

        code = self.popen.returncode
        tail = self.log_tail()
        if self.hung:
            return Exit(
                "hung", f"no progress within {watchdog_s:.0f} s: the watchdog killed the group{tail}", code
            )
        if code == 0:
            return Exit(None, "", code)
        failed = describe_failure(self.job_file, self.nproc)
        if failed is not None:
            return Exit(failed["reason"], f"rank {failed['rank']}: {failed['message']}", code)
        rank_code = _rank_exitcode(self.job.log_path)
        if rank_code is not None and rank_code < 0:
            name = _signal_name(-rank_code)
            reason = "crashed" if -rank_code in _CRASH_SIGNALS else "killed"
            return Exit(reason, f"a rank died of {name}{tail}", code)
        if code is not None and code < 0:
            return Exit("killed", f"torchrun was killed by {_signal_name(-code)}{tail}", code)
        return Exit("crashed", f"the torchrun group exited with code {code}{tail}", code)


def _rank_exitcode(log_path: str | None) -> int | None:
    """The exit code torchrun reports for its failed rank ("exitcode  : -9")."""
    if not log_path:
        return None
    with contextlib.suppress(OSError):
        found = re.findall(r"exitcode\s*:\s*(-?\d+)", Path(log_path).read_text(errors="replace"))
        if found:
            return int(found[0])
    return None
