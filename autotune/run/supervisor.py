"""The supervisor: keeps worker processes busy on one stored study until it holds its budget.

Every trial, the baseline and every finalist re-measurement runs in a fresh worker (see
`autotune.run.worker`). The supervisor starts them from the forkserver, forwards their progress
events to its reporter, and turns a worker that dies into a recorded trial result: ``killed`` (a
signal), ``crashed`` (a non-zero exit, a fatal signal) or ``hung`` (its watchdog killed the
worker's process group). The search goes on either way.

The budget is global: a worker is started only while the measured trials, the trials running
anywhere (other supervisors included) and this supervisor's starting workers are fewer than it,
and a worker checks again right before it asks the study for a trial.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.errors import AutotuneError, UsageError
from autotune.progress import Reporter, TrialSummary
from autotune.run.launcher import TorchrunWorker, WorkerProcess, forkserver_context, watchdog_seconds
from autotune.run.plan import Plan
from autotune.run.worker import DONE, ERROR, EVENT, MEASURED, WorkerJob
from autotune.study.owner import OWNER_ATTR, this_process
from autotune.study.store import (
    fail_interrupted_trials,
    fail_running_trial,
    measured_count,
    trials_of_job,
)

# Workers in a row that end without measuring anything (a broken environment, not a bad trial)
# after which the search stops with their error.
MAX_FAILED_STARTS = 3
RECOVER_EVERY_S = 2.0


class WorkerFailed(AutotuneError):
    """Workers keep dying before they measure anything."""

    exit_code = 1


@dataclass(frozen=True)
class Slot:
    """The share of the machine one worker gets: CPU cores, or one GPU."""

    cpu_cores: tuple[int, ...] | None = None
    cuda_device: str | None = None


def worker_slots(plan: Plan, workers: int | None) -> list[Slot]:
    """One slot per worker. GPUs: one visible device each (default: one worker per GPU). CPU:
    the cores split between the workers (default: one worker with all of them).

    Raises:
        UsageError: more workers than GPUs, or than CPU cores.
    """
    if plan.hardware.cuda:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = [d.strip() for d in visible.split(",") if d.strip()] if visible else None
        devices = devices or [str(i) for i in range(plan.hardware.count)]
        count = workers or len(devices)
        if count > len(devices):
            raise UsageError(
                f"--workers {count} but {len(devices)} GPU(s) visible", "one worker per GPU at most"
            )
        return [Slot(cuda_device=devices[i]) for i in range(count)]
    count = workers or 1
    cores = sorted(os.sched_getaffinity(0))
    if count > len(cores):
        raise UsageError(
            f"--workers {count} but {len(cores)} CPU core(s) here", f"use --workers {len(cores)}"
        )
    if count == 1:
        return [Slot()]
    share = len(cores) // count
    return [Slot(cpu_cores=tuple(cores[i * share : (i + 1) * share])) for i in range(count)]


class Supervisor:
    """Runs a plan's trials and measurements in worker processes (see the module docstring).

    Args:
        plan: the resolved run (its study already exists in the store).
        reporter: receives the workers' events and the supervisor's notes.
        callbacks: Trainer callbacks handed to every worker (they must pickle).
        debug: keep tracebacks of failed trials.
        workers: how many workers run at once (None: one per GPU, or one on CPU).
        seed_offset: added to the sampler seeds of this supervisor's workers (pool members that
            join a study pass a random one, so that they do not repeat each other's proposals).
    """

    def __init__(
        self,
        plan: Plan,
        reporter: Reporter,
        callbacks: Sequence[Any] = (),
        debug: bool = False,
        workers: int | None = None,
        seed_offset: int = 0,
    ) -> None:
        self.plan = plan
        self.seed_offset = seed_offset
        self.reporter = reporter
        self.callbacks = tuple(callbacks)
        self.debug = debug
        self.slots = worker_slots(plan, workers)
        self.watchdog_s = watchdog_seconds(plan.config.measure.trial_timeout_s)
        self.context = forkserver_context()
        self.active: dict[int, WorkerProcess] = {}  # slot -> worker
        self.logs = tempfile.mkdtemp(prefix="autotune-logs-", dir=plan.config.output_dir)
        self.started = 0
        self.failed_starts = 0
        self.study = optuna.load_study(study_name=plan.study_name, storage=plan.storage)
        self.me = this_process()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End every worker still running (their trials are failed as interrupted)."""
        for worker in list(self.active.values()):
            worker.kill_group()
            worker.join()
        self.active.clear()
        fail_interrupted_trials(self.study)
        shutil.rmtree(self.logs, ignore_errors=True)

    # -- measurements of given values (baseline, finalists) -------------------------------------

    def measure(self, params: dict[str, Any], number: int, verbatim: bool = False) -> dict[str, Any]:
        """Measure knob values once in a fresh worker and return its measurements.

        Raises:
            RuntimeError: the measurement failed, or its worker died (with the reason).
        """
        job = self._job(self.slots[0], kind="measure", params=dict(params), number=number, verbatim=verbatim)
        worker = self._start(0, job)
        while worker.alive():
            self._pump(1.0)
            self._watchdog()
        self._drain(worker)
        worker.join()
        del self.active[0]
        ended = worker.exit(self.watchdog_s)
        if worker.result is not None and worker.result[0] == MEASURED:
            return dict(worker.result[1])
        if worker.result is not None and worker.result[0] == ERROR:
            raise RuntimeError(worker.result[1]["message"])
        raise RuntimeError(f"{ended.reason or 'crashed'}: {ended.message or 'the worker sent no result'}")

    # -- the search -----------------------------------------------------------------------------

    def run_search(self, target: int, should_stop: Callable[[], str | None]) -> None:
        """Keep the workers busy until the study holds `target` measured trials, or `should_stop`
        returns why no more trials are worth starting (then running ones finish).

        The store is read when a worker ended, and every `RECOVER_EVERY_S` otherwise (to see
        other processes' trials): not on every progress event, which would take CPU from the
        trials being measured."""
        stopping: str | None = None
        last_look = float("-inf")
        changed = True
        while True:
            now = time.monotonic()
            if changed or now - last_look > RECOVER_EVERY_S:
                last_look = now
                self._recover()
                measured = measured_count(self.study)
                if stopping is None and measured < target:
                    stopping = should_stop()
                    if stopping:
                        self.reporter.on_note(stopping)
                if not self.active and (measured >= target or stopping):
                    return
                if stopping is None:
                    self._fill_slots(target, measured)
            self._pump(0.5)
            self._watchdog()
            changed = self._reap()

    def _fill_slots(self, target: int, measured: int) -> None:
        mine = {w.job.job_id for w in self.active.values()}
        elsewhere = [
            t
            for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if (t.user_attrs.get(OWNER_ATTR) or {}).get("job") not in mine
        ]
        for index, slot in enumerate(self.slots):
            if index in self.active:
                continue
            if measured + len(self.active) + len(elsewhere) >= target:
                return
            offset = self.seed_offset + index * 1_000_003  # a sampler stream per concurrent slot
            self._start(index, self._job(slot, kind="trial", budget=target, seed_offset=offset))

    def _job(self, slot: Slot, **fields: Any) -> WorkerJob:
        self.started += 1
        return WorkerJob(
            study_name=self.plan.study_name,
            storage_url=self.plan.config.storage_url,
            cpu_cores=slot.cpu_cores,
            cuda_device=slot.cuda_device,
            env=dict(os.environ),
            log_path=os.path.join(self.logs, f"worker-{self.started}.log"),
            callbacks=self.callbacks,
            debug=self.debug,
            supervisor=self.me,
            job_id=uuid.uuid4().hex[:12],
            ddp_timeout_s=self.plan.config.ddp_timeout_s,
            **fields,
        )

    def _start(self, index: int, job: WorkerJob) -> Any:
        nproc = self.plan.config.nproc_per_node
        worker: Any
        if nproc > 1:
            worker = TorchrunWorker(job, nproc, self.watchdog_s, self.logs)
        else:
            worker = WorkerProcess(self.context, job, self.watchdog_s)
        self.active[index] = worker
        return worker

    # -- watching the workers -------------------------------------------------------------------

    def _pump(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for an event or an exit, and hand on the events that came."""
        waitables: list[Any] = [w for worker in self.active.values() for w in worker.waitables()]
        if not waitables:
            time.sleep(timeout_s)
            return
        multiprocessing.connection.wait(waitables, timeout_s)
        for worker in list(self.active.values()):
            worker.poll_connect()
            self._drain(worker)

    def _drain(self, worker: Any) -> None:
        if worker.conn is None:
            return
        try:
            while worker.conn.poll():
                kind, payload = worker.conn.recv()
                if kind == EVENT:
                    name, args = payload
                    getattr(self.reporter, name)(*args)
                elif kind in (DONE, MEASURED, ERROR):
                    worker.result = (kind, payload)
        except (EOFError, OSError):
            pass  # the worker is gone; its exit says why

    def _watchdog(self) -> None:
        now = time.monotonic()
        for worker in self.active.values():
            if worker.overdue(now):
                worker.kill_as_hung()

    def _reap(self) -> bool:
        """Settle the workers that ended; whether any did."""
        ended = False
        for index, worker in list(self.active.items()):
            if worker.alive():
                continue
            self._drain(worker)
            worker.join()
            del self.active[index]
            self._settle(worker)
            ended = True
        return ended

    def _settle(self, worker: WorkerProcess) -> None:
        """Record what a finished trial worker leaves behind."""
        ended = worker.exit(self.watchdog_s)
        result = worker.result
        if ended.reason is None and result is not None and result[0] == DONE:
            if result[1].get("trained"):
                self.failed_starts = 0
            return
        reason = ended.reason or "crashed"
        message = ended.message or (result[1]["message"] if result and result[0] == ERROR else "")
        if ended.reason is None and result is not None and result[0] == ERROR:
            reason = result[1].get("reason") or reason
        ran = trials_of_job(self.study, worker.job.job_id)
        trials = [t for t in ran if t.state == optuna.trial.TrialState.RUNNING]
        if ran and not trials:  # the worker recorded its own trial before it ended (a DDP rank 0)
            self.failed_starts = 0
            return
        for trial in trials:
            if fail_running_trial(self.study, trial._trial_id, reason, message, trained=True):
                self.reporter.on_trial_end(
                    TrialSummary(trial.number, dict(trial.params), "FAIL", reason=reason, message=message)
                )
        if trials:
            self.failed_starts = 0
            return
        self.failed_starts += 1
        self.reporter.on_note(f"a worker ended before it measured a trial ({reason}): {message}")
        if self.failed_starts >= MAX_FAILED_STARTS:
            raise WorkerFailed(
                f"{self.failed_starts} workers in a row ended before measuring a trial: {message}",
                "rerun with --isolation none --debug to see the error in this process",
            )

    def _recover(self) -> None:
        jobs = {w.job.job_id for w in self.active.values() if w.job.job_id is not None}
        interrupted = fail_interrupted_trials(self.study, jobs)
        if interrupted:
            self.reporter.on_note(
                f"trial(s) {', '.join(map(str, interrupted))} were interrupted: marked failed"
            )
