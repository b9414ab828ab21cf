"""The rounds' decisions under simulated noise: safety, power, coverage and what a disturbed window
costs, through the real rounds (`remeasure_finalists`) and the real answer (`decide`), each run a
fixed seed and a fake clock.

A simulated measurement is the contestant's true rate times the machine's drift (a random walk,
5% a round) times its own noise (lognormal); a disturbed one (another job on the machine) runs at
40-85% of that. The figures asserted are the issue's bars, with the margin a few hundred runs need.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from autotune.answer.decide import decide
from autotune.driver.finalists import BASELINE, remeasure_finalists
from autotune.options import MeasureSettings
from autotune.progress import Reporter
from autotune.records import TrialRecord, measured_record, read_study
from autotune.store.session import StudyStore
from autotune.store.trials import read_trials
from tests.helpers import rated_study

RUNS = 120


@dataclass
class _Machine:
    truth: dict[int, float]
    rng: random.Random
    noise: float
    disturbed: float = 0.0
    drift: float = 0.0
    now: float = 0.0

    def clock(self) -> float:
        return self.now

    def __call__(self, params: Any, number: int, verbatim: bool = False, window: Any = None) -> TrialRecord:
        self.now += 1.5
        self.drift += self.rng.gauss(0, 0.05 / 3)
        rate = self.truth[BASELINE if number < 0 else number] * math.exp(
            self.drift + self.rng.gauss(0, self.noise)
        )
        if self.rng.random() < self.disturbed:
            rate *= self.rng.uniform(0.4, 0.85)
        return measured_record({"tokens_per_s": rate, "samples_per_s": rate / 10, "peak_memory_bytes": 1})


def _runs(
    truth: dict[int, float], noise: float, budget_s: float | None, disturbed: float = 0.0
) -> dict[str, Any]:
    """`RUNS` rounds of three finalists and the baseline (true rate 100): how many answers claimed a
    speedup, and how many of those intervals held the true ratio."""
    claims = held = 0
    for seed in range(RUNS):
        rng = random.Random(seed)
        study = rated_study({n: v * math.exp(rng.gauss(0, noise)) for n, v in truth.items()})
        machine = _Machine({**truth, BASELINE: 100.0}, rng, noise, disturbed)
        plan = SimpleNamespace(
            config=SimpleNamespace(finalists=3, finalist_rounds=2, measure=MeasureSettings())
        )
        remeasure_finalists(machine, plan, StudyStore(study), Reporter(), budget_s, clock=machine.clock)
        choice = decide(read_study(study), read_trials(StudyStore(study))).choice
        if choice is not None and not choice.is_defaults:
            claims += 1
            speedup = choice.speedup
            assert speedup is not None and speedup.low is not None and speedup.high is not None
            held += speedup.low <= machine.truth[choice.trial] / 100.0 <= speedup.high
    return {"claims": claims, "held": held}


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    yield
    optuna.logging.set_verbosity(optuna.logging.INFO)


@pytest.mark.parametrize("noise", [0.06, 0.08])
def test_configurations_as_fast_as_the_defaults_are_rarely_claimed(noise: float) -> None:
    # every finalist is exactly the defaults' speed: a claim is a false one (the bar: 1 in 10)
    found = _runs({0: 100.0, 1: 100.0, 2: 100.0}, noise, budget_s=30.0)
    assert found["claims"] <= 0.05 * RUNS


@pytest.mark.parametrize("noise", [0.06, 0.08])
def test_a_real_speedup_is_found_and_its_interval_holds_it(noise: float) -> None:
    # one finalist 1.3x the defaults, the others slower; a budget of 20 measurements
    found = _runs({0: 130.0, 1: 90.0, 2: 85.0}, noise, budget_s=30.0)
    assert found["claims"] >= (0.9 if noise == 0.06 else 0.75) * RUNS
    assert found["held"] >= 0.9 * found["claims"]


def test_a_disturbed_window_costs_little_power() -> None:
    # one window in twenty runs at 40-85% of its speed
    found = _runs({0: 130.0, 1: 90.0, 2: 85.0}, 0.06, budget_s=None, disturbed=0.05)
    assert found["claims"] >= 0.85 * RUNS and found["held"] >= 0.9 * found["claims"]
