"""The study store: optuna's RDB storage, and reading trials back as summaries.

No home-made schema: everything autotune keeps is optuna trials, params and user attrs, so
optuna's own CLI and optuna-dashboard read the same store.
"""

from __future__ import annotations

import re
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import StoreError, UsageError
from autotune.feasibility import NOT_TRAINED, PastTrial
from autotune.progress import TrialSummary

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def default_study_name(model: str, space: str, seq_len: int) -> str:
    """``tiny-gpt2-quick-seq128``: one study per model, space and sequence length."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model.strip("/")).strip("_")
    return f"{slug}-{space}-seq{seq_len}"


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """Open (and create if needed) the RDB store at `url`.

    Raises:
        UsageError: the URL is not a database URL.
        StoreError: the database cannot be reached or opened.
    """
    if "://" not in url:
        raise UsageError(
            f"invalid storage URL {url!r}",
            "use sqlite:///autotune.db or postgresql://user@host:5432/db",
        )
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
    except ImportError as exc:
        raise StoreError(
            f"cannot open {url}: {exc}", "install the database driver (pip install autotune[postgres])"
        ) from None
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreError(
            f"cannot open storage {url}: {first}", "check the URL and that the database is up"
        ) from None


def _engine_kwargs(url: str) -> dict[str, Any]:
    # Many workers on one SQLite file wait for the lock instead of failing at once.
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}
    return {"pool_pre_ping": True}


SKIPPED_REASON = "unavailable"


def was_trained(trial: FrozenTrial) -> bool:
    """Whether a trial trained (or tried to): skipped, reused and predicted trials did not."""
    return bool(trial.user_attrs.get("trained", trial.user_attrs.get("reason") not in NOT_TRAINED))


def measured_count(study: optuna.Study) -> int:
    """Trials that count against the study's total budget: finished trials that tried to train,
    whatever their outcome. Trials that were skipped, reused or predicted cost nothing."""
    return sum(1 for t in study.get_trials(deepcopy=False, states=FINISHED) if was_trained(t))


def as_past(trial: FrozenTrial) -> PastTrial:
    """A finished trial as the pre-checks of a new trial see it."""
    return PastTrial(trial.number, dict(trial.params), trial.user_attrs.get("reason"))


def summarize_trial(trial: FrozenTrial) -> TrialSummary:
    attrs = dict(trial.user_attrs)
    return TrialSummary(
        number=trial.number,
        params=dict(trial.params),
        state=trial.state.name,
        tokens_per_s=attrs.get("tokens_per_s"),
        samples_per_s=attrs.get("samples_per_s"),
        peak_memory_bytes=attrs.get("peak_memory_bytes"),
        rel_ci_halfwidth=attrs.get("rel_ci_halfwidth"),
        reason=attrs.get("reason"),
        message=attrs.get("message"),
        attrs=attrs,
    )


def ranked_trials(study: optuna.Study) -> list[TrialSummary]:
    """Finished trials, best first: feasible completed ones by tokens/s (reused duplicates left
    out of the ranking), then the rest by number."""
    summaries = [summarize_trial(t) for t in study.get_trials(deepcopy=False, states=FINISHED)]
    scored = sorted(
        (s for s in summaries if _rankable(s)),
        key=lambda s: -float(s.tokens_per_s or 0.0),
    )
    rest = sorted((s for s in summaries if s not in scored), key=lambda s: s.number)
    return scored + rest


def _rankable(summary: TrialSummary) -> bool:
    return (
        summary.state == "COMPLETE"
        and summary.tokens_per_s is not None
        and "duplicate_of" not in summary.attrs
        and summary.attrs.get("feasible", True)
    )


def best_trial(study: optuna.Study) -> TrialSummary | None:
    """The best feasible trial: the finalists' winner when they were re-measured, else the completed
    trial with the highest measured tokens/s. Never an infeasible trial."""
    ranked = ranked_trials(study)
    winner = study.user_attrs.get("winner")
    if winner is not None:
        for summary in ranked:
            if summary.number == winner["number"] and _rankable(summary):
                return summary
    return ranked[0] if ranked and _rankable(ranked[0]) else None
