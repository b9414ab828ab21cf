"""What padding-free batches gained a trial over the same configuration with padded batches.

A padding-free trial (``padding_free=True``) is compared with its padded twin, the completed trial
of the study (or its baseline) whose knob values are the same but for ``padding_free``: the ratio of
their tokens/s (real tokens only, so padding saved is speed gained), and, when it is no gain, why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from autotune.records import TrialRecord, read_study
from autotune.store.session import StudyStore

BASELINE = -1  # the baseline's number as a twin


def padded_twin(values: Mapping[str, Any], candidates: Sequence[TrialRecord]) -> TrialRecord | None:
    """The first of `candidates` measured with the same values as `values` but with padded
    batches; None without one. Only the knobs `values` has are compared: the baseline's params
    name every knob, a trial's only those its space searches (the others are held at the
    baseline's)."""
    wanted = {k: v for k, v in values.items() if k != "padding_free"}
    for candidate in candidates:
        params = candidate.params
        if params.get("padding_free", False) or not candidate.tokens_per_s:
            continue
        if all(params.get(k) == v for k, v in wanted.items()):
            return candidate
    return None


def why_not_faster(ratio: float, padding_fraction: float | None, attention: Any) -> str:
    """Why padding-free batches were no faster than padded ones, in one line."""
    said = f"padding-free ran at {ratio:.2f}x the padded batches"
    if padding_fraction is not None and padding_fraction < 0.1:
        return f"{said}: they were only {100 * padding_fraction:.0f}% padding, too little to save"
    share = f" ({100 * padding_fraction:.0f}% of their tokens)" if padding_fraction is not None else ""
    kernel = attention or "the model's default"
    return (
        f"{said}: with {kernel} attention the flattened row's attention is "
        f"computed across all its texts and masked between them, which cost more than the padding "
        f"saved{share}; flash_attention_2's variable-length kernels skip it"
    )


def padding_free_comparison(
    study: StudyStore | None, values: Mapping[str, Any], tokens_per_s: float | None
) -> tuple[dict[str, Any] | None, str | None]:
    """What a padding-free trial of `study` records against its padded twin: the comparison
    (`TrialRecord.padding_compared`: the twin's number and padding fraction, and the ratio of
    tokens/s) and, when that ratio is not above 1, a note saying why (`padding_note`). Neither for
    other trials, outside a study, or without a measured twin."""
    if not values.get("padding_free") or study is None or not tokens_per_s:
        return None, None
    candidates = [r for r in study.records(("COMPLETE",)) if not r.reused]
    baseline = read_study(study).baseline
    if baseline.params:
        candidates.append(replace(baseline.as_trial(), number=BASELINE, params=dict(baseline.params)))
    twin = padded_twin(values, candidates)
    if twin is None or not twin.tokens_per_s:
        return None, None
    ratio = float(tokens_per_s) / float(twin.tokens_per_s)
    padding = twin.measurement.padding_fraction
    compared = {"twin": twin.number, "ratio": ratio, "twin_padding_fraction": padding}
    note = why_not_faster(ratio, padding, values.get("attn_implementation")) if ratio <= 1 else None
    return compared, note
