"""What a trial's score is, and how its loss compares with the baseline's at equal tokens.

A trial is scored on its steady-state tokens/s; with the length of the user's run given
(``--train-tokens`` or ``--train-steps``) on the rate of that whole run: its tokens over the
predicted wall time (set-up + compilation + tokens / throughput), so that a configuration whose
compilation cannot pay for itself in a short run loses to one that does not compile. One helper,
`score`, says this for the trial's objective, the ranking and the finalists alike.

Loss parity: trials read the same data in the same order from the same seed, masked-LM masks
included (`autotune.workloads.masking`), so after the same number of tokens every configuration has
seen the same inputs and labels, whatever its batch split. Its loss curve (tokens seen, loss per
optimizer step) is compared with the baseline's as the token-weighted mean loss over the second half
of the token range both curves cover (`loss_delta`), with the noise of that difference
(`compare_losses`, which says the model): a loss is diverged only when it is worse than the
tolerance and the difference stands out of the noise (`loss_diverged`).

Pure: no torch, no optuna.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.measure.stats import t95
from autotune.records import Baseline, StudyRecord, TrialRecord

Curve = Sequence[Sequence[float]]  # [(tokens seen after the step, the step's mean loss), ...]


# -- the user's run ------------------------------------------------------------------------------


def run_tokens(
    train_tokens: float | None, train_steps: int | None, baseline: Baseline | None
) -> float | None:
    """The tokens of the user's whole run: `train_tokens`, or `train_steps` optimizer steps of the
    baseline's (measured) tokens per step; None when neither is given or the baseline has no
    measurement to convert steps with (then the score is plain throughput)."""
    if train_tokens:
        return float(train_tokens)
    per_step = baseline.tokens_per_step if baseline is not None else None
    if train_steps and per_step:
        return float(train_steps) * float(per_step)
    return None


def compile_s(trial: TrialRecord) -> float:
    """A trial's one-off time before its steady state: the larger of dynamo's own compile seconds
    and the warm-up's time beyond steady-state steps (which also holds inductor's autotuning and
    the allocator's growth): what a run pays once."""
    return max(float(trial.compile.seconds or 0.0), float(trial.measurement.warmup_excess_s or 0.0))


def run_compile_s(trial: TrialRecord) -> float:
    """What a user's run pays to compile a trial's configuration: cold, since their run has no
    cache. The cold figure the study's compile cache recorded when the cache served the trial
    warm, else the trial's own (`compile_s`)."""
    return max(compile_s(trial), float(trial.compile.cold_s or 0.0))


def predicted_run_s(trial: TrialRecord, tokens: float) -> float | None:
    """The predicted wall time of a run of `tokens` tokens with a trial's configuration: set-up +
    compilation + tokens / steady-state throughput. None without a throughput."""
    rate = trial.tokens_per_s
    if not rate:
        return None
    return float(trial.measurement.setup_s or 0.0) + run_compile_s(trial) + tokens / float(rate)


def score(trial: TrialRecord, tokens: float | None) -> float | None:
    """What a trial is ranked by (higher is better): tokens/s, or with the run's `tokens` the
    effective rate of the whole run (tokens / `predicted_run_s`). None without a throughput."""
    rate = trial.tokens_per_s
    if rate is None:
        return None
    if tokens is None:
        return float(rate)
    predicted = predicted_run_s(trial, tokens)
    return tokens / predicted if predicted else None


def payoff_tokens(compiled: TrialRecord, uncompiled: TrialRecord) -> float | None:
    """After how many tokens a compiled configuration's whole run is as short as an uncompiled
    one's: where set-up + compile + N / rate are equal. 0 when the compiled one costs no more up
    front; None when it is not faster per token (it never pays for itself)."""
    rate_c, rate_u = compiled.tokens_per_s, uncompiled.tokens_per_s
    if not rate_c or not rate_u or float(rate_c) <= float(rate_u):
        return None
    fixed_c = float(compiled.measurement.setup_s or 0.0) + run_compile_s(compiled)
    fixed_u = float(uncompiled.measurement.setup_s or 0.0) + run_compile_s(uncompiled)
    extra_s = fixed_c - fixed_u
    if extra_s <= 0:
        return 0.0
    return extra_s / (1.0 / float(rate_u) - 1.0 / float(rate_c))


# -- loss parity ---------------------------------------------------------------------------------


def _mean_over(curve: Curve, start: float, end: float) -> float:
    """The token-weighted mean of a step-wise loss curve over tokens [start, end]: each step's loss
    holds over the tokens it trained on (from the previous step's count to its own)."""
    total, previous = 0.0, 0.0
    for tokens, loss in curve:
        low, high = max(previous, start), min(float(tokens), end)
        if high > low:
            total += (high - low) * float(loss)
        previous = float(tokens)
    return total / (end - start)


def _window(curve: Curve, baseline: Curve) -> tuple[float, float] | None:
    """The compared tokens: the second half of the range both curves cover (None: no overlap)."""
    if not curve or not baseline:
        return None
    end = min(float(curve[-1][0]), float(baseline[-1][0]))
    return (end / 2, end) if end > 0 else None


def loss_delta(curve: Curve, baseline: Curve) -> float | None:
    """The relative difference of a trial's loss from the baseline's at equal tokens: the
    token-weighted mean loss over the second half of the token range both curves cover, as
    (trial - baseline) / baseline. ``inf`` when the trial's loss is not finite there; None when
    the curves do not overlap or the baseline's loss is not a positive finite number."""
    window = _window(curve, baseline)
    if window is None:
        return None
    mine, theirs = _mean_over(curve, *window), _mean_over(baseline, *window)
    if not math.isfinite(theirs) or theirs <= 0:
        return None
    if not math.isfinite(mine):
        return math.inf
    return (mine - theirs) / theirs


@dataclass(frozen=True)
class LossComparison:
    """A trial's loss against the baseline's over the compared tokens (`compare_losses`).

    Attributes:
        delta: `loss_delta` (None: nothing to compare; ``inf``: not finite where the baseline's is).
        interval: the 95% interval of `delta` from the paired steps (None: fewer than two steps
            pair up, or a loss that is not finite).
        paired_steps: the optimizer steps of the compared tokens that pair up.
    """

    delta: float | None = None
    interval: tuple[float, float] | None = None
    paired_steps: int = 0

    @property
    def significant(self) -> bool:
        """Whether the difference stands out of the noise: its interval excludes 0."""
        return self.interval is not None and (self.interval[0] > 0 or self.interval[1] < 0)


def compare_losses(curve: Curve, baseline: Curve) -> LossComparison:
    """A trial's loss against the baseline's at equal tokens, with the noise of the difference.

    The noise model. Every trial trains on the same samples in the same order with the same masks,
    so where the trial's steps end at the same token counts as the baseline's (the same effective
    batch), step k of both trained on the same inputs and labels: their losses pair up, and the
    per-step difference d_k = trial_k - baseline_k holds no difference of data. What it still holds
    is what no knob decides: dropout draws (another kernel or batch split draws them differently)
    and rounding. For a configuration that keeps the math this is the baseline measured against
    itself, an A/A pair, and the scatter of d_k from step to step is its noise. That scatter is
    estimated as half the mean squared successive difference of d_k (von Neumann's estimator: a
    gap that grows or shrinks smoothly, as a numerics problem's does, does not count as noise),
    and the interval of the mean difference over the compared tokens (each step weighted by its
    tokens there) is a Student-t interval with one degree of freedom fewer than paired steps.
    Without two paired steps there is no interval: the difference cannot be told from noise.
    """
    delta = loss_delta(curve, baseline)
    window = _window(curve, baseline)
    if delta is None or window is None or not math.isfinite(delta):
        return LossComparison(delta)
    pairs = _paired_steps(curve, baseline, *window)
    theirs = _mean_over(baseline, *window)
    interval = _interval(delta, pairs, theirs) if len(pairs) >= 2 else None
    return LossComparison(delta, interval, len(pairs))


def _paired_steps(curve: Curve, baseline: Curve, start: float, end: float) -> list[tuple[float, float]]:
    """(the step's tokens inside [start, end], trial loss - baseline loss) for each step of the
    compared tokens; [] unless every one of them covers the same tokens in both curves."""
    theirs = {span: float(loss) for span, loss in _spans(baseline)}
    pairs = []
    for (low, high), loss in _spans(curve):
        inside = min(high, end) - max(low, start)
        if inside <= 0:
            continue
        if (low, high) not in theirs:
            return []
        pairs.append((inside, float(loss) - theirs[(low, high)]))
    return pairs


def _spans(curve: Curve) -> list[tuple[tuple[float, float], float]]:
    """Each step of a curve as ((tokens before it, tokens after it), its loss)."""
    spans, previous = [], 0.0
    for tokens, loss in curve:
        spans.append(((previous, float(tokens)), float(loss)))
        previous = float(tokens)
    return spans


def _interval(delta: float, pairs: list[tuple[float, float]], theirs: float) -> tuple[float, float] | None:
    """The 95% interval of `delta` from the paired per-step differences (see `compare_losses`)."""
    weights = [w for w, _ in pairs]
    diffs = [d / theirs for _, d in pairs]
    if not all(math.isfinite(d) for d in diffs):
        return None
    # von Neumann: half the mean squared successive difference, blind to a smooth drift.
    variance = sum((b - a) ** 2 for a, b in itertools.pairwise(diffs)) / (2 * (len(diffs) - 1))
    error = math.sqrt(variance * sum(w * w for w in weights)) / sum(weights)
    half = t95(len(diffs) - 1) * error
    return (delta - half, delta + half)


def loss_diverged(comparison: LossComparison, tolerance: float) -> bool:
    """Whether a trial's loss diverged from the baseline's (see `compare_losses`): not finite
    where the baseline's is, or worse by more than `tolerance` with a difference that stands out
    of the noise (its interval excludes 0). No delta, or no interval, is no verdict."""
    delta = comparison.delta
    if delta is None:
        return False
    if not math.isfinite(delta):
        return True
    return delta > tolerance and comparison.significant


# -- the answer ----------------------------------------------------------------------------------


def compiles(trial: TrialRecord) -> bool:
    """Whether a trial's applied arguments compile the model."""
    return bool((trial.training_args or {}).get("torch_compile"))


def run_facts(
    study: StudyRecord, trial: TrialRecord, best_uncompiled: TrialRecord | None = None
) -> dict[str, Any]:
    """What the answer and the export say about the user's run with a trial's configuration:
    its loss delta against the baseline at equal tokens; with the run's length, the predicted run
    time of the trial and of the baseline (and with a price per hour their cost); without it, for
    a compiled trial, after how many tokens compilation pays for itself against `best_uncompiled`
    (the best trial that does not compile)."""
    tokens = study.train_tokens
    price = study.run_config.get("price_per_hour")
    facts: dict[str, Any] = {"loss_delta": trial.measurement.loss_delta, "train_tokens": tokens}
    if tokens is not None:
        for prefix, record in (("", trial), ("baseline_", study.baseline.as_trial())):
            seconds = predicted_run_s(record, tokens)
            facts[f"{prefix}predicted_run_s"] = seconds
            facts[f"{prefix}predicted_cost"] = (
                seconds / 3600 * float(price) if seconds is not None and price else None
            )
    elif compiles(trial) and best_uncompiled is not None:
        facts["compile_payoff_tokens"] = payoff_tokens(trial, best_uncompiled)
    return facts


def defaults_run_facts(study: StudyRecord) -> dict[str, Any]:
    """`run_facts` of the defaults (the baseline's configuration): its loss is the baseline's, its
    predicted run the baseline's."""
    facts = run_facts(study, study.baseline.as_trial())
    facts["loss_delta"] = None  # the baseline itself: no delta to state
    return facts


def format_duration(seconds: float) -> str:
    """``42 s``, ``3.5 min``, ``2.1 h``, ``3.0 days``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def run_lines(facts: Mapping[str, Any]) -> list[str]:
    """`run_facts` in words, one line each (the answer and the export's comments)."""
    lines = []
    delta = facts.get("loss_delta")
    if delta is not None:
        lines.append(f"loss vs the baseline at equal tokens: {100 * delta:+.1f}%")
    seconds, tokens = facts.get("predicted_run_s"), facts.get("train_tokens")
    if seconds is not None and tokens is not None:
        text = f"predicted run of {tokens:,.0f} tokens: {format_duration(seconds)}"
        if facts.get("predicted_cost") is not None:
            text += f" ({facts['predicted_cost']:,.2f} at the given price)"
        base_s = facts.get("baseline_predicted_run_s")
        if base_s is not None:
            text += f"; the baseline: {format_duration(base_s)}"
            if facts.get("baseline_predicted_cost") is not None:
                text += f" ({facts['baseline_predicted_cost']:,.2f})"
        lines.append(text)
    if "compile_payoff_tokens" in facts:
        payoff = facts["compile_payoff_tokens"]
        lines.append(
            "compilation never pays for itself: the best uncompiled configuration is as fast per token"
            if payoff is None
            else f"compilation pays for itself after {payoff:,.0f} tokens (against the best uncompiled trial)"
        )
    return lines
