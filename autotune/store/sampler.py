"""The sampler a trial job proposes its trial with (`search_sampler`).

Every trial job makes a fresh sampler, seeded by the trials already stored (`autotune.trial.entry`),
so the sampler keeps no state of its own: all it knows is what the shared study holds.
"""

from __future__ import annotations

import warnings

import optuna

# Trials proposed at random before TPE models the results (optuna's default is 10).
STARTUP_TRIALS = 3


def search_sampler(seed: int, startup_trials: int = STARTUP_TRIALS) -> optuna.samplers.BaseSampler:
    """A TPE sampler that starts exploiting after `startup_trials` random trials.

    Why these settings. How they fare against random search and plain TPE is measured on replayed
    grids (every configuration of a few small spaces measured, then each sampler replayed against
    them over many seeds): ``python -m benchmarks.replay``, section "The search's efficiency on
    replayed grids" of benchmarks/RESULTS.md.

    - ``n_startup_trials``: optuna's default of 10 makes the first 10 trials random search, so a
      search of the default budget (8 trials) would never use what it measured. With 3, TPE models
      the results from the fourth trial on. On the replay, after 10 trials that puts it ahead of
      random search (and of plain TPE, which is random search for its first 10) on some grids and
      level on the others; after 5 it is mostly level (the start-up is most of 5 trials), and
      after 20 mostly level with plain TPE: modelling early pays within a short budget, not later.
      Under a memory cap it can trail both, where the search's out-of-memory pre-check (not the
      sampler) skips the best configuration. The choice says nothing about which values are fast.
    - ``multivariate`` and ``group``: the knobs interact (batch size with precision, compile with
      attention), so they are modelled jointly; ``group`` keeps a conditional knob
      (the compile mode, only with inductor) in a joint model of its own instead of falling
      back to independent sampling. On a space without conditional knobs it proposes exactly what
      ``multivariate`` alone does.
    - ``constant_liar``: trials running in other workers count as bad results, so concurrent
      proposals spread out instead of repeating a running one.

    Args:
        seed: the sampler's seed (the caller varies it per trial and per concurrent job).
        startup_trials: random trials (completed or pruned, as optuna counts them) before TPE.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # `group`
        return optuna.samplers.TPESampler(
            seed=seed,
            n_startup_trials=startup_trials,
            multivariate=True,
            group=True,
            constant_liar=True,
        )
