"""What padding-free batches gained a trial over the same configuration with padded batches.

A padding-free trial (``padding_free=True``) is compared with its padded twin, the completed trial
of the study (or its baseline) whose knob values are the same but for ``padding_free``: the ratio of
their tokens/s (real tokens only, so padding saved is speed gained), and, when it is no gain, why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna

BASELINE = -1  # the baseline's number as a twin


def padded_twin(
    values: Mapping[str, Any], candidates: list[tuple[int, Mapping[str, Any], Mapping[str, Any]]]
) -> tuple[int, Mapping[str, Any]] | None:
    """The first of `candidates` (number, knob values, attrs) measured with the same values as
    `values` but with padded batches; None without one. Only the knobs `values` has are compared:
    the baseline's params name every knob, a trial's only those its space searches (the others
    are held at the baseline's)."""
    wanted = {k: v for k, v in values.items() if k != "padding_free"}
    for number, params, attrs in candidates:
        if params.get("padding_free", False) or not attrs.get("tokens_per_s"):
            continue
        if all(params.get(k) == v for k, v in wanted.items()):
            return number, attrs
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


def padding_free_comparison(trial: Any, values: Mapping[str, Any], tokens_per_s: float) -> dict[str, Any]:
    """The attrs a padding-free trial records: ``padding_free_vs_padded`` (its twin's number and
    padding fraction, and the ratio of tokens/s) and, when that ratio is not above 1,
    ``padding_free_note`` saying why. {} for other trials, or without a measured twin."""
    study = getattr(trial, "study", None)
    if not values.get("padding_free") or not isinstance(trial, optuna.Trial) or study is None:
        return {}
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    candidates = [(t.number, t.params, t.user_attrs) for t in complete if "duplicate_of" not in t.user_attrs]
    baseline = study.user_attrs.get("baseline") or {}
    if baseline.get("params"):
        candidates.append((BASELINE, baseline["params"], baseline))
    twin = padded_twin(values, candidates)
    if twin is None:
        return {}
    number, attrs = twin
    ratio = tokens_per_s / float(attrs["tokens_per_s"])
    padding = attrs.get("padding_fraction")
    out: dict[str, Any] = {
        "padding_free_vs_padded": {"twin": number, "ratio": ratio, "twin_padding_fraction": padding}
    }
    if ratio <= 1:
        out["padding_free_note"] = why_not_faster(ratio, padding, values.get("attn_implementation"))
    return out
