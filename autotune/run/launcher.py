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
import multiprocessing
import multiprocessing.context
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing import popen_forkserver, spawn
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from autotune.run.worker import WorkerJob, worker_main
from autotune.study.owner import Owner, start_ticks, this_host

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


class WorkerProcess:
    """One running worker: its process, its event pipe, its owner identity and its deadline."""

    def __init__(self, context: Any, job: WorkerJob, watchdog_s: float, slot: int = 0) -> None:
        self.job = job
        self.slot = slot
        receive, send = context.Pipe(duplex=False)
        self.conn: Connection = receive
        self.process = _ForkServerProcess(target=worker_main, args=(job, send), name="autotune-worker")
        self.process.start()
        send.close()
        assert self.process.pid is not None
        self.pid: int = self.process.pid
        self.owner = Owner(this_host(), self.pid, start_ticks(self.pid))
        self.started = time.monotonic()
        self.deadline = self.started + watchdog_s
        self.hung = False
        self.result: tuple[str, Any] | None = None

    @property
    def sentinel(self) -> int:
        return int(self.process.sentinel)

    def alive(self) -> bool:
        return self.process.is_alive()

    def overdue(self, now: float) -> bool:
        return now > self.deadline and self.alive()

    def kill_group(self) -> None:
        """SIGKILL the worker's process group (it made its own), falling back to the process."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                os.kill(self.pid, signal.SIGKILL)

    def kill_as_hung(self) -> None:
        self.hung = True
        self.kill_group()

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

    def log_tail(self, lines: int = 3) -> str:
        if not self.job.log_path:
            return ""
        try:
            text = Path(self.job.log_path).read_text(errors="replace")
        except OSError:
            return ""
        kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return f"; last output: {' | '.join(kept)}"[:400] if kept else ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
