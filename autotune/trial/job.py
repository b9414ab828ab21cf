"""What a trial process is asked to do (`Job`), and the typed messages it sends back: progress
events, then one result (`TrialDone`, `Measured` or `JobFailed`). Plain picklable values: they
cross pipes, sockets, torchrun job files and Ray actors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from autotune.store.owner import Owner


@dataclass(frozen=True)
class Job:
    """One job for one trial process.

    Attributes:
        study_name, storage_url: the stored study to work on.
        kind: ``"trial"`` (measure one trial of the search), ``"measure"`` (given values),
            ``"ladder"`` (which of the space's larger batches fit: ``params["candidates"]``) or
            ``"whole_run"`` (given values run once as a whole run does: the longest batch, an
            evaluation step, a checkpoint save; `AutotuneTrainer.whole_run_check`).
        job_id: recorded with the trial it runs (``worker.job``): how the supervisor finds it.
        budget: the study's total budget of measured trials (``trial``): a process that finds it
            spent, counting the trials running elsewhere, measures nothing.
        params, number, verbatim: what to measure (``measure``, ``whole_run``), as
            `AutotuneTrainer.measure_config`.
        window: measurement settings replaced for a ``measure`` job (`MeasureSettings` fields: a
            finalists' round measures shorter windows); None: the run's own.
        seed_offset: added to the sampler's seed, different for each concurrent job.
        cpu_cores: CPU cores the process may use (its share of the machine), None: all.
        cuda_device: the GPUs it sees (``CUDA_VISIBLE_DEVICES``: one, or a torchrun group's, one per
            rank, comma-separated), None: as inherited.
        env: the supervisor's environment, applied first (a forkserver's is older).
        log_path: where the process's stdout and stderr go.
        callbacks: extra Trainer callbacks (pickled; tests inject faults with them).
        debug: keep tracebacks of failed trials.
        check_fingerprint: refuse a study measured on other hardware (processes on other hosts).
        supervisor: the process that started the job: the job's process ends itself when it is gone.
        events_path: where rank 0 of a torchrun group connects to send its messages (a Unix socket).
        ddp_timeout_s: how long a collective of a DDP trial may wait.
        watchdog_s: how long the job may run before its process ends itself as hung (Ray actors,
            which no supervisor watches from outside); None: its executor watches it.
        workload: a file holding the run's workload (`autotune.workloads.user.dump`: the Python
            API's own model, data and Trainer class), used instead of the one the stored run
            configuration names; None: that one.
    """

    study_name: str
    storage_url: str
    kind: Literal["trial", "measure", "ladder", "whole_run"] = "trial"
    job_id: str | None = None
    budget: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    number: int = 0
    verbatim: bool = False
    window: dict[str, Any] | None = None
    seed_offset: int = 0
    cpu_cores: tuple[int, ...] | None = None
    cuda_device: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None
    callbacks: tuple[Any, ...] = ()
    debug: bool = False
    check_fingerprint: bool = False
    supervisor: Owner | None = None
    events_path: str | None = None
    ddp_timeout_s: float = 300.0
    watchdog_s: float | None = None
    workload: str | None = None


@dataclass(frozen=True)
class Event:
    """A progress event: the name of a `Reporter` method and its arguments."""

    name: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class TrialDone:
    """A ``trial`` job ended: it trained trial `number`, or nothing (`why`: ``budget`` spent,
    space ``exhausted``, only ``skips`` proposed)."""

    trained: bool
    number: int | None = None
    why: str = ""


@dataclass(frozen=True)
class Measured:
    """A ``measure`` job's measurements (tokens/s, samples/s, peak memory, ...); a ``ladder`` or
    ``whole_run`` job's findings."""

    values: dict[str, Any]


@dataclass(frozen=True)
class JobFailed:
    """A job that did not finish: the reason (see `autotune.store.outcomes`) and one line; for a
    Ray trial, Ray's own text of the failure as well."""

    reason: str
    message: str
    ray_error: str | None = None


JobResult = TrialDone | Measured | JobFailed
