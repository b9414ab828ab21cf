"""What the answer reads from the finalists' rounds: their model of the noise (`rounds_fit`), its A/A
check as the answer states it (`aa_of`), and the finalists' part of the search's time
(`finalists_time`)."""

from __future__ import annotations

import math
from typing import Any

from autotune.answer.model import (
    AA,
)
from autotune.measure.rounds import RoundsFit, cells_of, fit_rounds
from autotune.records import FinalistRecord


def rounds_fit(
    finalists: dict[int, FinalistRecord], looks: int | None, look: int | None = None
) -> RoundsFit | None:
    """The model of the finalists' rounds (`fit_rounds`) from their stored records, its intervals
    those of the look `look` the rounds ended at, of the `looks` they could take
    (`StudyRecord.rounds_looks`, `rounds_look`)."""
    scores = {n: f.scores_by_round() for n, f in finalists.items()}
    positions = {n: f.positions_by_round() for n, f in finalists.items()}
    return fit_rounds(cells_of(scores, positions), looks=looks, look=look) if scores else None


def aa_of(fit: RoundsFit | None) -> AA | None:
    """The A/A figure the answer states: the model's check of itself (None: no rounds measured the
    baseline twice)."""
    if fit is None or fit.aa is None:
        return None
    check = fit.aa
    return AA(
        offset=math.log(check.ratio),
        spread=check.se if math.isfinite(check.se) else 0.0,
        rounds=check.rounds,
        largest=check.largest,
        pooled=fit.sigma,
        pooled_df=fit.df,
        low=check.low if math.isfinite(check.high) else None,
        high=check.high if math.isfinite(check.high) else None,
        scale=check.scale,
        slope=fit.slope,
        excluded=len(fit.excluded),
    )


def finalists_time(breakdown: dict[str, Any] | None) -> dict[str, Any] | None:
    """The finalists' part of a search's time breakdown (`autotune.driver.accounting`): their
    wall seconds and share of the search, and their measurements' set-up, warm-up and window
    seconds; None where the search ran no finalists."""
    if not breakdown:
        return None
    stages = breakdown.get("stages") or {}
    seconds = float(stages.get("finalists_s") or 0.0)
    if seconds <= 0:
        return None
    wall = float(breakdown.get("wall_s") or 0.0)
    jobs = (breakdown.get("by_stage") or {}).get("finalists") or {}
    return {
        "seconds": seconds,
        "share": seconds / wall if wall > 0 else None,
        "wall_s": wall,
        **{k: jobs[k] for k in ("measurements", "setup_s", "compile_s", "warmup_s", "window_s") if k in jobs},
    }
