"""The replay benchmark (benchmarks/replay.py) on a tiny synthetic grid: regret arithmetic, the
grid's noise and cap, each strategy replayed deterministically, and its section rendered."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from benchmarks import replay
from benchmarks.replay import Config, Grid, key_of
from tests.unit.bench_helpers import section

MIB = 2**20


def _space(tmp_path: Path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(
        "knobs:\n  per_device_train_batch_size: [4, 8, 16, 32]\n  precision: [fp32, bf16]\n"
        "  activation_checkpointing: [false, true]\n"
    )
    return path


def _stored(tmp_path: Path) -> dict[str, Any]:
    """Two passes of every configuration: faster with the batch and bf16, slower with checkpointing;
    memory grows with the batch and shrinks with checkpointing; batch 32 in fp32 failed."""
    rows = []
    for batch, precision, checkpointing in itertools.product([4, 8, 16, 32], ["fp32", "bf16"], [False, True]):
        params = {
            "per_device_train_batch_size": batch,
            "precision": precision,
            "activation_checkpointing": checkpointing,
        }
        figure = 1000.0 * batch * (1.5 if precision == "bf16" else 1.0) * (0.8 if checkpointing else 1.0)
        failed = batch == 32 and precision == "fp32"
        growth = batch * (10 if checkpointing else 40) * MIB
        rows.append(
            {
                "params": params,
                "tokens_per_s": [None, None] if failed else [figure * 0.95, figure * 1.05],
                "peak_memory_bytes": [None, None] if failed else [500 * MIB + growth, 600 * MIB + growth],
                "rss_start_bytes": [500 * MIB, 600 * MIB],
                "reason": "error" if failed else None,
            }
        )
    return {"space": str(_space(tmp_path)), "configs": rows}


@pytest.fixture
def grid(tmp_path: Path) -> Grid:
    return replay.load_grid(_stored(tmp_path))


def _config(grid: Grid, batch: int, precision: str = "bf16", checkpointing: bool = False) -> Config:
    return grid.configs[
        key_of(
            {
                "per_device_train_batch_size": batch,
                "precision": precision,
                "activation_checkpointing": checkpointing,
            }
        )
    ]


def test_a_grid_knows_its_best_its_memory_in_a_fresh_process_and_its_noise(grid: Grid) -> None:
    best = grid.best(None)
    assert best.params == {
        "per_device_train_batch_size": 32,
        "precision": "bf16",
        "activation_checkpointing": False,
    }
    assert best.figure == pytest.approx(48_000.0)
    # growth over each trial's start, on the smallest start of the grid
    assert _config(grid, 8).memory_bytes == 500 * MIB + 8 * 40 * MIB
    # each configuration's two passes are 5% either side: a relative deviation of 0.05 * sqrt(2)
    assert grid.noise() == pytest.approx(0.05 * 2**0.5 / 0.6745)
    cap = grid.cap_excluding(1 / 3)
    over = [c for c in grid.configs.values() if c.memory_bytes is not None and c.memory_bytes > cap]
    # 14 ran; peaks tie in pairs, so 3 or 6 over a measured peak: 6 is closer to a third
    assert len(over) == 6
    assert grid.best(cap).figure < best.figure
    assert grid.observe(_config(grid, 32, "fp32"), None, random.Random(0)) == (None, "error")
    assert grid.observe(best, cap, random.Random(0)) == (None, "over_memory_cap")


def test_a_configuration_is_measured_again_until_its_two_fastest_passes_agree() -> None:
    def row(*passes: float | None, reason: str | None = None) -> dict[str, Any]:
        return {"tokens_per_s": list(passes), "reason": reason}

    assert replay._wanted(row()) and replay._wanted(row(30_000.0))
    assert replay._wanted(row(3_000.0, 30_000.0))  # one disturbed pass
    assert not replay._wanted(row(30_000.0, 25_000.0))  # within 20%
    assert not replay._wanted(row(3_000.0, 30_000.0, 4_000.0, 2_000.0))  # four passes: enough
    assert not replay._wanted(row(None, reason="error"))  # a failure is not tried again
    assert replay.settled([3_000.0, 30_000.0, None, 29_000.0]) == (30_000.0, 29_000.0)
    assert replay.settled([3_000.0, 30_000.0]) == (30_000.0,)  # a disturbed pass is left out


def test_regret_is_the_best_observed_configurations_shortfall_at_each_count(grid: Grid) -> None:
    optimum = grid.best(None)
    half = _config(grid, 16)  # 24k: half the optimum
    observed: replay.Observed = [
        (_config(grid, 32, "fp32"), None),  # failed: nothing feasible yet
        (half, 25_000.0),
        (_config(grid, 16, "fp32"), 15_000.0),  # observed slower: the pick stays
        (optimum, 47_000.0),
    ]
    assert replay.regrets(grid, None, observed, at=(1, 2, 3, 4, 9)) == {
        "1": 1.0,
        "2": pytest.approx(0.5),
        "3": pytest.approx(0.5),
        "4": 0.0,
        "9": 0.0,  # a replay that ended sooner: its last
    }
    # the pick is the best *observed*, scored by its figure: a lucky pass of a slower one misleads
    misled = [(optimum, 45_000.0), (_config(grid, 32, "bf16", True), 46_000.0)]
    assert replay.regrets(grid, None, misled, at=(2,)) == {"2": pytest.approx(0.2)}


@pytest.mark.parametrize("strategy", list(replay.STRATEGIES))
def test_each_strategy_replays_the_same_way_from_its_seed(grid: Grid, strategy: str) -> None:
    cap = grid.cap_excluding(1 / 3)
    run = replay.STRATEGIES[strategy]
    first = run(grid, cap, 3, 6)
    assert [(c.params, v) for c, v in first] == [(c.params, v) for c, v in run(grid, cap, 3, 6)]
    assert len(first) == 6
    assert all(v is None or grid.feasible(c, cap) for c, v in first)
    if strategy == "autotune":  # a repeat reuses its result: every trained trial is a new configuration
        assert len({key_of(c.params) for c, _ in first}) == len(first)


def test_autotune_stops_when_every_configuration_was_tried(grid: Grid) -> None:
    observed = replay.replay_autotune(grid, None, 0, 40)
    assert 1 <= len(observed) <= len(grid.configs)
    assert replay.regrets(grid, None, observed, at=(40,)) == {"40": 0.0}


def test_the_replay_summarises_and_renders_every_grid_and_case(grid: Grid, tmp_path: Path) -> None:
    results = replay.replay({"synthetic": grid}, seeds=2, workers=1, at=(2, 4))
    cases = results["synthetic"]
    assert set(cases) == {"no cap", "capped"}
    assert set(cases["capped"]["regret"]) == set(replay.STRATEGIES)
    assert all(0 <= n <= 2 for case in cases.values() for n in case["missed"].values())
    for case in cases.values():
        for regret in case["regret"].values():
            assert set(regret) == {"2", "4"}
            assert all(0.0 <= r["mean"] <= 1.0 and r["se"] >= 0.0 for r in regret.values())
    machine = {"date": "2026-11-28 08:00 UTC", "cpu": "Intel(R) Xeon(R) Processor", "cores": 2, "gpu": None}
    machine.update(
        python="3.11.7", torch="2.13.0+cpu", transformers="5.23.0", optuna="5.0.0", commit="abc1234"
    )
    stored = {"model": "tiny-gpt2", "space": "space_replay.yaml", "wall_s": 600.0, "machine": machine}
    data = {
        "machine": machine,
        "seeds": 2,
        "regret_at": ["2", "4"],
        "replay_s": 1.0,
        "grids": {
            "synthetic": {**stored, **replay.describe(grid, _stored(tmp_path)["configs"]), "cases": cases}
        },
    }
    claims: list[str] = []
    text = section(replay, data, claims)
    assert "### synthetic" in text and "| strategy | cap | after 2 | after 4 | best never trained |" in text
    assert "16 configurations, 2 failed; measured 2026-11-28 08:00 UTC: 32 passes in 10 minutes, 0 " in text
    assert len(claims) == 2 and claims[0].startswith(
        "Replay, synthetic (no cap): mean regret after 2/4 trials"
    )
