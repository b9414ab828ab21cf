"""A worker: one fresh process that measures one trial of a stored study, then exits.

It loads the study, rebuilds the run from the configuration stored with it (so a worker on another
host needs nothing but the study's name and store), builds the trial `Trainer` and runs
`Trainer.hyperparameter_search(backend="optuna")` on the shared study until it has measured one
trial. Pre-checked trials that train nothing (unavailable, duplicates, predicted out of memory) cost
milliseconds and may come first. A `measure` job instead measures given knob values once (the
baseline, a finalist).

Progress events go back to the supervisor through a pipe; the process's own stdout and stderr go to
a log file, whose tail explains a crash. The worker runs in its own process group (the watchdog
kills the group: data-loader and compile workers included) and dies with its parent.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import faulthandler
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from autotune.progress import Reporter
from autotune.study.owner import Owner, is_alive

# Messages from a worker to the supervisor: (kind, payload).
EVENT, DONE, MEASURED, ERROR = "event", "done", "measured", "error"


@dataclass(frozen=True)
class WorkerJob:
    """What one worker process is asked to do.

    Attributes:
        study_name, storage_url: the stored study to work on.
        kind: ``"trial"`` (measure one trial of the search) or ``"measure"`` (given values).
        budget: the study's total budget of measured trials (``trial``): a worker that finds it
            spent, counting the trials running elsewhere, measures nothing.
        params, number, verbatim: what to measure (``measure``), as `AutotuneTrainer.measure_config`.
        cpu_cores: CPU cores the worker may use (its share of the machine), None: all.
        cuda_device: the one GPU it sees (``CUDA_VISIBLE_DEVICES``), None: as inherited.
        env: the supervisor's environment, applied first (the forkserver's is older).
        log_path: where the process's stdout and stderr go.
        callbacks: extra Trainer callbacks (pickled; tests inject faults with them).
        max_skips: pre-checked trials after which the worker gives up finding one to train.
        check_fingerprint: refuse a study measured on other hardware (workers on other hosts).
        supervisor: the process that started the worker: the worker ends itself when it is gone.
        job_id: recorded with the trial it runs (``worker.job``): how the supervisor finds it.
        events_path: where rank 0 of a torchrun group connects to send its events (a Unix socket).
        ddp_timeout_s: how long a collective of a DDP trial may wait.
        seed_offset: added to the sampler's seed, different for each concurrent worker.
    """

    study_name: str
    storage_url: str
    kind: Literal["trial", "measure"] = "trial"
    budget: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    number: int = 0
    verbatim: bool = False
    cpu_cores: tuple[int, ...] | None = None
    cuda_device: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None
    callbacks: tuple[Any, ...] = ()
    debug: bool = False
    max_skips: int = 50
    check_fingerprint: bool = False
    supervisor: Owner | None = None
    job_id: str | None = None
    events_path: str | None = None
    ddp_timeout_s: float = 300.0
    seed_offset: int = 0


class PipeReporter(Reporter):
    """Forwards every progress event to the supervisor, which hands it to its own reporter."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def _send(self, name: str, *args: Any) -> None:
        with contextlib.suppress(OSError, ValueError):  # the supervisor is gone: nothing to tell
            self.conn.send((EVENT, (name, args)))

    def on_trial_start(self, number: int, params: dict[str, Any]) -> None:
        self._send("on_trial_start", number, params)

    def on_step(self, phase: str, step: int, step_s: float) -> None:
        self._send("on_step", phase, step, step_s)

    def on_trial_end(self, trial: Any) -> None:
        self._send("on_trial_end", trial)

    def on_note(self, text: str) -> None:
        self._send("on_note", text)


def worker_main(job: WorkerJob, conn: Any) -> None:
    """The worker process's entry point (the supervisor starts it from the forkserver)."""
    _become_worker(job)
    try:
        payload = _run_job(job, PipeReporter(conn))
        conn.send((MEASURED if job.kind == "measure" else DONE, payload))
    except BaseException as exc:
        from autotune.run.trainer import failure_reason, one_line

        with contextlib.suppress(OSError, ValueError):
            conn.send((ERROR, {"reason": failure_reason(exc), "message": one_line(exc)}))
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    finally:
        conn.close()


def _become_worker(job: WorkerJob) -> None:
    os.setpgrp()  # its own group: the watchdog ends it with everything it started
    _die_with_parent()
    if job.supervisor is not None:
        threading.Thread(target=_watch_supervisor, args=(job.supervisor,), daemon=True).start()
    os.environ.update(job.env)
    if job.cuda_device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = job.cuda_device  # before CUDA is initialised here
    if job.log_path:
        log = os.open(job.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
    faulthandler.enable()  # a segfault leaves its Python traceback in the log
    if job.cpu_cores:
        import torch

        os.sched_setaffinity(0, job.cpu_cores)
        torch.set_num_threads(len(job.cpu_cores))


def _die_with_parent() -> None:
    # The parent is the forkserver, which exits when the supervisor does (even on SIGKILL), once
    # no process holds the write end of its "alive" pipe. multiprocessing hands each child a copy
    # (for grandchildren started from the forkserver): close it, or the forkserver outlives the
    # supervisor for as long as this worker runs.
    from multiprocessing import forkserver

    server: Any = getattr(forkserver, "_forkserver", None)
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    if alive_fd is not None:
        with contextlib.suppress(OSError):
            os.close(alive_fd)
        server._forkserver_alive_fd = None
    kill_me_with_my_parent()
    if os.getppid() == 1:  # the parent died before the line above took effect
        os._exit(1)


def kill_me_with_my_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent ends (``PR_SET_PDEATHSIG``; it survives
    ``exec``, so a launcher can call it in a child before the program starts)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)


def _watch_supervisor(supervisor: Owner) -> None:
    """End this worker's process group as soon as its supervisor is gone (killed with SIGKILL,
    say): a worker must never outlive what started it."""
    while is_alive(supervisor):
        time.sleep(0.5)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _run_job(job: WorkerJob, reporter: Reporter) -> dict[str, Any]:
    from autotune.measure.memory import frozen_heap
    from autotune.run.driver import build_trainer, quiet_libraries
    from autotune.run.plan import plan_from_study

    with quiet_libraries():
        # The supervisor created and checked the store's schema: do not load its migrations again.
        plan, study = plan_from_study(job.study_name, job.storage_url, job.check_fingerprint, existing=True)
        # In the supervisor's folder by default: it removes that folder even when a worker was killed.
        folder = plan.config.output_dir or (os.path.dirname(job.log_path) if job.log_path else None)
        with tempfile.TemporaryDirectory(prefix="autotune-worker-", dir=folder) as scratch:
            trainer = build_trainer(plan, scratch, reporter, job.callbacks, job.debug)
            trainer.job_id = job.job_id
            with frozen_heap():
                if job.kind == "measure":
                    return dict(trainer.measure_config(job.params, job.number, verbatim=job.verbatim))
                return _one_trial(trainer, plan, study, job)


def _one_trial(trainer: Any, plan: Any, study: Any, job: WorkerJob) -> dict[str, Any]:
    """Ask the study for trials until one is trained; return which (or why none was).

    In a DDP trial only rank 0 asks the study (the Trainer broadcasts each trial's values); every
    decision to go on or stop is rank 0's, broadcast, so all ranks run the same trials."""
    import optuna

    from autotune.measure.ranks import from_rank_zero, is_rank_zero
    from autotune.run.driver import distinct_params, hyperparameter_search
    from autotune.study.owner import OWNER_ATTR
    from autotune.study.store import measured_count, was_trained

    collided = 0  # proposals that another worker was already training
    for _ in range(job.max_skips):
        verdict: dict[str, Any] | None = None
        if is_rank_zero():
            running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if measured_count(study) + len(running) >= job.budget:
                verdict = {"trained": False, "why": "budget"}
            elif distinct_params(study) >= plan.space.grid_size():
                verdict = {"trained": False, "why": "exhausted"}
        verdict = from_rank_zero(verdict)
        if verdict is not None:
            return verdict
        # Concurrent workers must not all draw the sampler's same next proposal: each slot has its
        # own stream, and a worker whose proposal collided with a running one leaves the shared one.
        seed = plan.config.seed + job.seed_offset + len(study.get_trials(deepcopy=False))
        seed += collided * (os.getpid() % 65_521)
        # On ranks other than 0 a skipped or failed trial leaves the Trainer's loop as TrialPruned.
        with contextlib.suppress(optuna.TrialPruned):
            hyperparameter_search(trainer, plan, 1, seed)
        if is_rank_zero():
            mine = [
                t
                for t in study.get_trials(deepcopy=False)
                if t.user_attrs.get(OWNER_ATTR) == trainer.owner_attrs()
            ]
            verdict = {"trained": True, "number": mine[-1].number} if mine and was_trained(mine[-1]) else None
            collided += bool(mine and mine[-1].user_attrs.get("reason") == "duplicate_running")
        verdict = from_rank_zero(verdict)
        if verdict is not None:
            return verdict
    return {"trained": False, "why": "skips"}
