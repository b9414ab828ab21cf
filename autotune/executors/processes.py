"""What the forkserver and torchrun executors share: the machine split into slots, a watched
process per job (its watchdog deadline, the messages it sends, how it ended), and the loop that
waits on them."""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import multiprocessing.connection
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import UsageError
from autotune.executors.base import Ended, Executor, watchdog_seconds
from autotune.plan.resolved import Plan
from autotune.progress import Reporter
from autotune.scratch import make_folder
from autotune.store.outcomes import CRASHED, HUNG, KILLED
from autotune.store.owner import stat_fields
from autotune.store.retry import store_unreachable_s
from autotune.trial.job import Event, Job, JobFailed, JobResult, Measured, TrialDone

# How often the watchdog thread looks at the deadlines while the supervisor's loop is elsewhere.
WATCH_EVERY_S = 1.0

# Signals that mean the process itself failed (crashed), as opposed to being killed from outside.
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}


@dataclass(frozen=True)
class Slot:
    """The share of the machine one job gets: CPU cores, or one GPU."""

    cpu_cores: tuple[int, ...] | None = None
    cuda_device: str | None = None


def worker_slots(plan: Plan, workers: int | None, devices_per_job: int = 1) -> list[Slot]:
    """One slot per concurrent job. GPUs: `devices_per_job` visible devices each, disjoint (one
    per rank of a torchrun group of that many: two groups never measure on the same GPU); by
    default as many jobs as the visible GPUs hold. CPU: the cores split between the jobs (default:
    one job with all of them).

    Raises:
        UsageError: more workers (times their ranks) than GPUs, or more workers than CPU cores.
    """
    if plan.hardware.cuda:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = [d.strip() for d in visible.split(",") if d.strip()] if visible else None
        devices = devices or [str(i) for i in range(plan.hardware.count)]
        per = max(1, devices_per_job)
        count = workers or max(1, len(devices) // per)
        if count * per > len(devices):
            if per == 1:
                raise UsageError(
                    f"workers={count} but {len(devices)} GPU(s) visible",
                    "one worker per GPU at most",
                    field="workers",
                )
            raise UsageError(
                f"workers={count} x nproc_per_node={per} needs {count * per} GPUs but {len(devices)} "
                "are visible",
                f"use workers={len(devices) // per} or fewer (each worker's ranks get GPUs of their own)",
                field=("workers", "nproc_per_node"),
            )
        return [Slot(cuda_device=",".join(devices[i * per : (i + 1) * per])) for i in range(count)]
    count = workers or 1
    cores = sorted(os.sched_getaffinity(0))
    if count > len(cores):
        raise UsageError(
            f"workers={count} but {len(cores)} CPU core(s) here", f"use workers={len(cores)}", field="workers"
        )
    if count == 1:
        return [Slot()]
    share = len(cores) // count
    return [Slot(cpu_cores=tuple(cores[i * share : (i + 1) * share])) for i in range(count)]


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def signal_failure(number: int, who: str, tail: str) -> JobFailed:
    """How a process that died of signal `number` ended: ``crashed`` (its own fault) or ``killed``."""
    name = signal_name(number)
    if number in CRASH_SIGNALS:
        return JobFailed(CRASHED, f"{who} died of {name}{tail}")
    why = f"killed by {name}"
    if number == signal.SIGKILL:
        why += " (on Linux most often the kernel's out-of-memory killer: check `dmesg`)"
    return JobFailed(KILLED, why + tail)


def descendants(root: int) -> list[tuple[int, str]]:
    """Every process below `root` (children, theirs, ...), as (pid, start time) read from /proc."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(int(entry))) is not None:
            children.setdefault(int(fields[1]), []).append((int(entry), fields[19]))
    found: list[tuple[int, str]] = []
    frontier = [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child[0])
    return found


def kill_tree(root: int) -> list[tuple[int, str]]:
    """SIGKILL every process below `root` and the process group each one leads (torchrun starts
    each rank in a session of its own, which its data-loader workers share); return them, for
    `wait_gone`. `root` itself is the caller's to end."""
    found = descendants(root)
    mine = os.getpgrp()
    for pid, _ in found:
        fields = stat_fields(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if fields is not None and int(fields[2]) == pid and pid != mine:
                os.killpg(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
    return found


def wait_gone(processes: list[tuple[int, str]], timeout_s: float) -> bool:
    """Wait (at most `timeout_s`) until every (pid, start time) has ended: no such process, a
    zombie, or its pid taken by a newer one. Whether they all did."""
    deadline = time.monotonic() + timeout_s
    left = list(processes)
    while left:
        left = [
            (pid, start)
            for pid, start in left
            if (fields := stat_fields(pid)) is not None
            and fields[0] not in ("Z", "X")
            and fields[19] == start
        ]
        if not left:
            break
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class Watched(abc.ABC):
    """One job's process as its executor watches it: its watchdog deadline, whether the watchdog
    ended it, the result it sent, and how it ended."""

    conn: Any = None

    def __init__(self, job: Job, watchdog_s: float) -> None:
        self.job = job
        self.watchdog_s = watchdog_s
        self.deadline = time.monotonic() + watchdog_s
        self.store_wait_at_start = store_unreachable_s()
        self.hung = False
        self.result: JobResult | None = None

    @abc.abstractmethod
    def alive(self) -> bool: ...

    @abc.abstractmethod
    def kill_group(self) -> None: ...

    @abc.abstractmethod
    def join(self, timeout_s: float = 10.0) -> None: ...

    @abc.abstractmethod
    def waitables(self) -> list[Any]:
        """What `multiprocessing.connection.wait` watches: its messages and its exit."""

    @abc.abstractmethod
    def exit_failure(self) -> JobFailed | None:
        """How the process ended (after `join`): None for a clean exit."""

    def poll_connect(self) -> None:  # noqa: B027  # most processes' connection is there from the start
        """Take a pending messages connection (torchrun groups connect back; a pipe is there)."""

    def overdue(self, now: float) -> bool:
        """Past its deadline and alive, not counting the time this process's store calls spent
        failing since it started (a trial blocked on the store is not hung), and never once it
        sent its result (it is only exiting)."""
        if isinstance(self.result, TrialDone | Measured):
            return False
        store_wait = store_unreachable_s() - self.store_wait_at_start
        return now > self.deadline + store_wait and self.alive()

    def kill_as_hung(self) -> None:
        self.hung = True
        self.kill_group()

    def hung_failure(self, what: str) -> JobFailed:
        return JobFailed(HUNG, f"no progress within {self.watchdog_s:.0f} s: the watchdog killed {what}")

    def log_tail(self, lines: int = 3) -> str:
        """The last lines the process wrote, for the message of one that died."""
        if not self.job.log_path:
            return ""
        try:
            text = Path(self.job.log_path).read_text(errors="replace")
        except OSError:
            return ""
        kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return f"; last output: {' | '.join(kept)}"[:400] if kept else ""

    def ended(self) -> Ended:
        """The job's end: the result it sent when it finished its work; else its own failure, or
        how its process ended when that says more (a signal, the watchdog, no result at all)."""
        if isinstance(self.result, TrialDone | Measured):
            return Ended(self.job, self.result)
        failure = self.exit_failure()
        if isinstance(self.result, JobFailed) and (failure is None or failure.reason == CRASHED):
            return Ended(self.job, self.result)  # it said why before it exited
        return Ended(self.job, failure or JobFailed(CRASHED, "the worker sent no result"))


class ProcessExecutor(Executor):
    """Jobs in fresh processes, one per slot, watched from this process (see `Watched`).

    Args:
        plan: the resolved run (its study already exists in the store).
        reporter: receives the jobs' progress events.
        workers: how many jobs run at once (None: one per GPU, or one on CPU).
    """

    def __init__(self, plan: Plan, reporter: Reporter, workers: int | None = None) -> None:
        self.plan = plan
        self.reporter = reporter
        self.slots = worker_slots(plan, workers, self.devices_per_job())
        self.capacity = len(self.slots)
        self.watchdog_s = watchdog_seconds(plan.config.measure.trial_timeout_s)
        self.active: dict[int, Watched] = {}  # slot index -> process
        self.logs: str | None = None  # made with the first job: an executor that starts none leaves none
        self.started = 0
        self.watch_lock = threading.Lock()
        self.watcher: threading.Thread | None = None

    @abc.abstractmethod
    def _spawn(self, job: Job) -> Watched:
        """Start the process of a job that has its slot and log path."""

    def describe(self) -> str | None:
        if self.capacity > 1 and not self.plan.hardware.cuda:
            return (
                f"{self.capacity} workers share this CPU's cores and memory bandwidth: "
                "each trial measures its share of the machine"
            )
        return None

    def devices_per_job(self) -> int:
        """The GPUs one job uses: one process, one GPU (a torchrun group: one per rank)."""
        return 1

    def start(self, job: Job) -> None:
        index = next(i for i in range(len(self.slots)) if i not in self.active)
        slot = self.slots[index]
        self.started += 1
        if self.logs is None:
            self.logs = make_folder("autotune-logs-", self.plan.config.output_dir)
        job = dataclasses.replace(
            job,
            cpu_cores=slot.cpu_cores,
            cuda_device=slot.cuda_device,
            log_path=os.path.join(self.logs, f"worker-{self.started}.log"),
        )
        watched = self._spawn(job)
        with self.watch_lock:
            self.active[index] = watched
        self._watch()

    def _watch(self) -> None:
        """Keep the watchdog thread running while jobs are: the deadlines are checked even while
        the supervisor's loop waits on the store (the thread ends when no job is left)."""
        if self.watcher is None or not self.watcher.is_alive():
            self.watcher = threading.Thread(target=self._watchdog, name="autotune-watchdog", daemon=True)
            self.watcher.start()

    def _watchdog(self) -> None:
        while True:
            time.sleep(WATCH_EVERY_S)
            with self.watch_lock:
                if not self.active:
                    return
                self._kill_overdue()

    def _kill_overdue(self) -> None:
        now = time.monotonic()
        for worker in list(self.active.values()):
            if not worker.hung and worker.overdue(now):
                worker.kill_as_hung()

    def running(self) -> list[Job]:
        return [worker.job for worker in self.active.values()]

    def wait(self, timeout_s: float) -> list[Ended]:
        waitables = [w for worker in self.active.values() for w in worker.waitables()]
        if waitables:
            multiprocessing.connection.wait(waitables, timeout_s)
        else:
            time.sleep(timeout_s)
        for worker in list(self.active.values()):
            worker.poll_connect()
            self._drain(worker)
        with self.watch_lock:
            self._kill_overdue()
            gone = [(index, worker) for index, worker in self.active.items() if not worker.alive()]
            for index, _ in gone:
                del self.active[index]
        ended = []
        for _, worker in gone:
            self._drain(worker)
            worker.join()
            ended.append(worker.ended())
        return ended

    def _drain(self, worker: Watched) -> None:
        if worker.conn is None:
            return
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                if isinstance(message, Event):
                    getattr(self.reporter, message.name)(*message.args)
                else:
                    worker.result = message
        except (EOFError, OSError):
            pass  # the process is gone; its exit says why

    def close(self) -> None:
        for worker in list(self.active.values()):
            worker.kill_group()
            worker.join()
        self.active.clear()
        if self.logs is not None:
            shutil.rmtree(self.logs, ignore_errors=True)
            self.logs = None
