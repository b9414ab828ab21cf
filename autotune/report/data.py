"""What the report shows, read once from the optuna study: the trials' and the study's records."""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.errors import UsageError, first_line
from autotune.options import cap_bytes
from autotune.progress import TrialSummary, describe_params
from autotune.records import read_study
from autotune.store.session import StudyStore
from autotune.store.trials import ranked_trials

# The figures, in page order: (file stem and div id, title).
FIGURES = {
    "history": "Optimisation history",
    "throughput_memory": "Throughput against peak memory",
    "importance": "Parameter importances",
    "memory_estimate": "Memory estimate against measured peak",
}


@dataclass
class Point:
    """One measured trial as the figures draw it."""

    number: int
    tokens_per_s: float
    peak_bytes: int | None
    feasible: bool
    label: str


@dataclass
class ReportData:
    """What the page and the PNGs show, computed once from the study."""

    study_name: str
    trials: list[TrialSummary]
    cap_bytes: int | None
    cap_text: str | None
    # Optimisation history: every measured trial, and the best feasible tokens/s so far.
    history: list[Point] = field(default_factory=list)
    best_so_far: list[tuple[int, float]] = field(default_factory=list)
    # Throughput against memory: measured trials with a peak (reused duplicates left out).
    scatter: list[Point] = field(default_factory=list)
    front: list[Point] = field(default_factory=list)
    # knob -> importance, or why there are none.
    importances: dict[str, float] = field(default_factory=dict)
    importance_note: str | None = None
    # (trial number, estimate bytes, measured peak bytes).
    estimates: list[tuple[int, int, int]] = field(default_factory=list)


def is_duplicate(t: TrialSummary) -> bool:
    """The trial reused an earlier trial's measurement (same parameters)."""
    return t.reused


def is_feasible(t: TrialSummary) -> bool:
    """The trial completed within the memory cap."""
    return t.state == "COMPLETE" and t.is_feasible


def available(data: ReportData) -> list[str]:
    """The names of the figures the data supports, in page order."""
    checks = {
        "history": bool(data.history),
        "throughput_memory": bool(data.scatter),
        "importance": bool(data.importances),
        "memory_estimate": bool(data.estimates),
    }
    return [name for name in FIGURES if checks[name]]


def memory_cap_bytes(study: StudyStore) -> int | None:
    """The study's memory cap in bytes, or None when it has none (or it cannot be read)."""
    text = read_study(study).memory_cap
    if not text:
        return None
    try:
        return cap_bytes(str(text), read_study(study).device_memory_bytes, study=study.study_name)
    except UsageError:
        return None


def collect(study: StudyStore) -> ReportData:
    """Read everything the report shows from `study`."""
    trials = ranked_trials(study)
    cap_text = read_study(study).memory_cap
    data = ReportData(
        study_name=study.study_name,
        trials=trials,
        cap_bytes=memory_cap_bytes(study),
        cap_text=str(cap_text) if cap_text else None,
    )
    by_number = sorted(trials, key=lambda t: t.number)
    best: float | None = None
    for t in by_number:
        if t.tokens_per_s is not None:
            point = Point(
                t.number,
                float(t.tokens_per_s),
                t.peak_memory_bytes,
                is_feasible(t),
                describe_params(t.params),
            )
            data.history.append(point)
            if t.peak_memory_bytes is not None and not is_duplicate(t):
                data.scatter.append(point)
            if point.feasible and (best is None or point.tokens_per_s > best):
                best = point.tokens_per_s
        if best is not None:
            data.best_so_far.append((t.number, best))
        estimate = t.memory.estimate_bytes
        if estimate is not None and t.peak_memory_bytes is not None and not is_duplicate(t):
            data.estimates.append((t.number, int(estimate), int(t.peak_memory_bytes)))
    data.front = pareto_front([p for p in data.scatter if p.feasible])
    data.importances, data.importance_note = _importances(study)
    return data


def pareto_front(points: list[Point]) -> list[Point]:
    """The points no other point beats on both counts (more tokens/s, less peak memory), by memory."""
    front: list[Point] = []
    for p in sorted(points, key=lambda p: (p.peak_bytes or 0, -p.tokens_per_s)):
        if not front or p.tokens_per_s > front[-1].tokens_per_s:
            front.append(p)
    return front


def _importances(study: StudyStore) -> tuple[dict[str, float], str | None]:
    distinct = {
        tuple(sorted((k, repr(v)) for k, v in t.params.items())) for t in study.records(("COMPLETE",))
    }
    if len(distinct) < 2:
        return {}, (
            f"Parameter importances need at least 2 completed trials with different knob values; "
            f"this study has {len(distinct)}."
        )
    try:
        values = study.param_importances()
    except Exception as exc:
        return {}, f"Parameter importances could not be computed: {first_line(exc)}"
    if not values:
        return {}, "Parameter importances: no knob varies across the completed trials."
    return {k: float(v) for k, v in values.items()}, None
