"""Where a search's time went: stored with its study as the ``time_breakdown`` user attr.

Every measured job (each trial of this search, the baseline, every finalist re-measurement)
reports how its process spent its time: set-up (from taking the job to the first step: loading the
study, building the model and the Trainer), compile (dynamo's own timer, within the warm-up), the
rest of the warm-up, and the measured window; a trial that screening stopped, its set-up and the
steps it ran before it was stopped (screening). Summed over jobs, these are worker-seconds; the
search had ``wall_s x slots`` of them (slots: jobs the executor runs at once), and what no job
accounts for is ``between_s``: starting processes, the supervisor and the store, pre-checked
trials that train nothing, jobs that failed, idle slots. So the phases sum to ``wall_s x slots``
exactly, and ``measured_share`` is the part of it that measured throughput. The stages (baseline,
search, finalists, the whole-run check) are wall-clock seconds of each part of the search;
``by_stage`` sums the phases of the measure jobs each of the baseline and finalists stages ran (the
answer states the finalists').
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from autotune.records import TrialRecord, write_study
from autotune.store.session import FINISHED_STATES, StudyStore
from autotune.store.trials import counts_as_trained, trial_summaries

PHASES = ("setup_s", "compile_s", "warmup_s", "window_s", "screening_s", "between_s")
STAGES = ("baseline_s", "search_s", "finalists_s", "whole_run_s")


def job_phases(record: TrialRecord) -> dict[str, float]:
    """The set-up, compile, warm-up and window seconds of one measured job (its record). Compiling
    happens in the first steps: the compile seconds are counted out of the warm-up (at most all
    of it; a recompile inside the window stays part of the window, as it was measured)."""
    measured = record.measurement
    warmup_s = _seconds(measured.warmup_s)
    compile_s = min(_seconds(record.compile.seconds), warmup_s)
    return {
        "setup_s": _seconds(measured.setup_s),
        "compile_s": compile_s,
        "warmup_s": warmup_s - compile_s,
        "window_s": _seconds(measured.window_s),
        # A trial screening stopped: its steps (compile and warm-up included) until it was stopped.
        "screening_s": _seconds(record.screening.seconds),
    }


def _seconds(value: Any) -> float:
    """A stored duration, 0 where it is missing or not a positive finite number."""
    return float(value) if isinstance(value, int | float) and math.isfinite(value) and value > 0 else 0.0


def breakdown(
    wall_s: float,
    slots: int,
    jobs: list[dict[str, float]],
    stages: dict[str, float],
    by_stage: dict[str, list[dict[str, float]]] | None = None,
) -> dict[str, Any]:
    """The stored breakdown: phases summed over `jobs` (see `job_phases`), ``between_s`` the rest of
    ``wall_s x slots``, the measured share, the stages' wall-clock seconds, and the phases of the
    measure jobs of each stage (`by_stage`: stage name -> its jobs)."""
    phases = {name: math.fsum(job[name] for job in jobs) for name in PHASES[:-1]}
    slot_s = wall_s * slots
    # Jobs overlapping beyond the slots cannot happen; clock granularity can: never negative.
    phases["between_s"] = max(0.0, slot_s - math.fsum(phases.values()))
    return {
        "wall_s": wall_s,
        "slots": slots,
        "jobs": len(jobs),
        "phases": phases,
        "measured_share": phases["window_s"] / slot_s if slot_s > 0 else 0.0,
        "stages": {name: stages.get(name, 0.0) for name in STAGES},
        "by_stage": {
            stage: {
                "measurements": len(stage_jobs),
                **{name: math.fsum(job[name] for job in stage_jobs) for name in PHASES[:4]},
            }
            for stage, stage_jobs in (by_stage or {}).items()
        },
    }


class TimeAccount:
    """Accounts one run of a search (see the module docstring): made when the search starts, told
    about measure jobs through `measuring`, the stages through `stage`; `store` adds this search's
    trials from the study and writes the breakdown."""

    def __init__(self, study: StudyStore, slots: int) -> None:
        self.started_s = time.monotonic()
        self.slots = max(1, slots)
        # The trials that ended before this search (enqueued ones, still waiting, are this search's).
        self.before = study.numbers(FINISHED_STATES)
        self.jobs: list[dict[str, float]] = []
        self.stages: dict[str, float] = {}
        self.by_stage: dict[str, list[dict[str, float]]] = {}
        self._stage: str | None = None

    def measuring(self, measure: Callable[..., TrialRecord]) -> Callable[..., TrialRecord]:
        """`measure` (a measure job: the baseline, a finalist), its result accounted."""

        def accounted(*args: Any, **kwargs: Any) -> TrialRecord:
            measured = measure(*args, **kwargs)
            phases = job_phases(measured)
            self.jobs.append(phases)
            if self._stage is not None:
                self.by_stage.setdefault(self._stage, []).append(phases)
            return measured

        return accounted

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        began, self._stage = time.monotonic(), name
        try:
            yield
        finally:
            self._stage = None
            self.stages[f"{name}_s"] = self.stages.get(f"{name}_s", 0.0) + time.monotonic() - began

    def store(self, study: StudyStore) -> dict[str, Any]:
        """Write this search's breakdown as the study's ``time_breakdown`` (a resumed search writes
        its own) and return it."""
        trained = [t for t in trial_summaries(study) if t.number not in self.before and counts_as_trained(t)]
        jobs = [*self.jobs, *(job_phases(t) for t in trained if not t.reused)]
        result = breakdown(time.monotonic() - self.started_s, self.slots, jobs, self.stages, self.by_stage)
        write_study(study, time_breakdown=result)
        return result
