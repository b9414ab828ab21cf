"""The search's sampler (autotune.store.sampler): seeded, a short random start then TPE, and
conditional knobs."""

from __future__ import annotations

import warnings
from typing import Any

import optuna

from autotune.store.sampler import STARTUP_TRIALS, search_sampler

KNOBS: dict[str, list[Any]] = {
    "per_device_train_batch_size": [4, 8, 16, 32],
    "precision": ["fp32", "bf16"],
    "torch_compile": ["off", "inductor"],
    "attn_implementation": ["eager", "sdpa"],
}
MODES = ["default", "max-autotune-no-cudagraphs"]


def _suggest(trial: optuna.Trial) -> dict[str, Any]:
    values = {name: trial.suggest_categorical(name, choices) for name, choices in KNOBS.items()}
    if values["torch_compile"] == "inductor":
        values["torch_compile_mode"] = trial.suggest_categorical("torch_compile_mode", MODES)
    return values


def _throughput(values: dict[str, Any]) -> float:
    speed = float(values["per_device_train_batch_size"])
    speed *= 2.0 if values["precision"] == "bf16" else 1.0
    speed *= 1.5 if values["torch_compile"] == "inductor" else 1.0
    speed *= 1.2 if values.get("torch_compile_mode") == "max-autotune-no-cudagraphs" else 1.0
    return speed


def _search(seed: int, trials: int) -> list[dict[str, Any]]:
    """Trials as a search runs them: a fresh sampler per trial, seeded by the trials stored."""
    study = optuna.create_study(direction="maximize")
    for _ in range(trials):
        study.sampler = search_sampler(seed + len(study.trials))
        study.optimize(lambda t: _throughput(_suggest(t)), n_trials=1)
    return [t.params for t in study.trials]


def test_the_sampler_is_deterministic_per_seed() -> None:
    assert _search(7, 12) == _search(7, 12)
    assert _search(7, 12) != _search(8, 12)


def test_it_starts_exploiting_after_a_few_trials_with_concurrent_workers_spread() -> None:
    sampler = search_sampler(0)
    assert isinstance(sampler, optuna.samplers.TPESampler)
    # Fewer random start-up trials than optuna's default of 10 (benchmarks/replay.py measures them).
    assert 0 < STARTUP_TRIALS < 10
    assert sampler._n_startup_trials == STARTUP_TRIALS
    assert sampler._constant_liar, "running trials must count, or concurrent workers repeat them"
    assert search_sampler(0, startup_trials=5)._n_startup_trials == 5


def test_the_search_concentrates_on_the_best_values_after_the_start() -> None:
    """On a clearly structured objective, the trials after the start-up pick the best values of the
    knobs more often than chance (a uniform pick gets bf16 half the time, batch 32 a quarter)."""
    later = [p for seed in range(4) for p in _search(seed, 20)[STARTUP_TRIALS + 4 :]]
    assert sum(p["precision"] == "bf16" for p in later) / len(later) > 0.65
    assert sum(p["per_device_train_batch_size"] == 32 for p in later) / len(later) > 0.45


def test_the_conditional_knob_is_sampled_only_where_it_applies_and_modelled_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no independent-sampling fallback or experimental warning
        proposed = _search(3, 20)
    with_mode = [p for p in proposed if "torch_compile_mode" in p]
    assert with_mode, "inductor was never proposed"
    assert all(p["torch_compile"] == "inductor" for p in with_mode)
    assert all(p["torch_compile"] == "off" for p in proposed if "torch_compile_mode" not in p)
    assert {p["torch_compile_mode"] for p in with_mode} <= set(MODES)
