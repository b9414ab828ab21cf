"""The process-noise benchmark's split of log ratios by lineage, and its section, on figures made
up here."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks.process_noise import render, split


def _lineages(offsets: list[float], rounds: int, noise: float, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    return [[0.3 + offset + rng.gauss(0, noise) for _ in range(rounds)] for offset in offsets]


def test_a_lineage_effect_the_rounds_cannot_see_is_found_and_sized() -> None:
    found = split(_lineages([-0.08, 0.0, 0.08, 0.16, -0.16, 0.04], rounds=6, noise=0.02, seed=1))
    assert found["p"] < 0.01
    assert found["within_sd"] == pytest.approx(0.02, rel=0.35)
    assert 0.07 < found["between_sd"] < 0.15  # the offsets' spread is 0.11


def test_lineages_that_differ_only_by_their_rounds_noise_show_no_lineage_effect() -> None:
    found = split(_lineages([0.0] * 6, rounds=6, noise=0.05, seed=2))
    assert found["p"] > 0.05
    assert found["between_sd"] < 0.03
    assert found["ratios"] == pytest.approx([math.exp(0.3)] * 6, rel=0.06)


def test_the_split_refuses_what_cannot_be_split() -> None:
    with pytest.raises(ValueError, match="two lineages"):
        split([[0.1, 0.2], [0.3]])


def test_the_section_states_the_split_and_every_lineage() -> None:
    servers = [[{"time": 0.0, "on": 100.0, "off": 130.0 + i + j} for j in range(3)] for i in range(2)]
    fresh = [{"time": 0.0, "on": 100.0, "off": 140.0}, {"time": 0.0, "on": 110.0, "off": 140.0}]
    logs = [[math.log(r["off"] / r["on"]) for r in s] for s in servers]
    machine = {k: "x" for k in ("date", "cpu", "cores", "torch", "transformers", "commit")}
    text = render(
        {
            "machine": machine,
            "command": "python -m benchmarks.process_noise",
            "wall_s": 600.0,
            "servers": servers,
            "fresh": fresh,
            "split": split(logs, permutations=50),
            "fresh_sd": 0.07,
            "fresh_ratio": 1.33,
        }
    )
    assert "| forkserver 1 " in text and "| fresh interpreters " in text
    assert "1.31, 1.32, 1.33" in text and "1.40, 1.27" in text
    assert "(10 minutes)" in text and "spreads 7.0%" in text
