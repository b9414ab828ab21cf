"""The layout benchmark's runs, summaries and section, with parents faked here: which figures a run
keeps, how the arms are summed up, what the section states."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pytest

from benchmarks import layout_noise
from benchmarks.process_noise import split


class _FakeParent:
    """A parent whose ratio is its own (1.2x, 1.5x, ...): the first pair it measures reads cold."""

    made: ClassVar[list[_FakeParent]] = []

    def __init__(self, arm: str) -> None:
        self.arm, self.index, self.asked, self.ended = arm, len(_FakeParent.made), [], False
        _FakeParent.made.append(self)

    def measure(self, kind: str) -> float:
        self.asked.append(kind)
        cold = 0.5 if len(self.asked) <= 2 else 1.0
        return 100.0 * cold if kind == "on" else 100.0 * (1.2 + 0.3 * self.index)

    def end(self) -> None:
        self.ended = True


def test_a_run_keeps_every_parents_rounds_but_not_its_warming_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    _FakeParent.made = []
    monkeypatch.setattr(layout_noise, "Parent", _FakeParent)
    logs = layout_noise.one_run("drawn", parents=2, rounds=3)
    assert logs == [[pytest.approx(math.log(1.2))] * 3, [pytest.approx(math.log(1.5))] * 3]
    assert all(p.ended and p.arm == "drawn" for p in _FakeParent.made)
    assert [p.asked.count("on") for p in _FakeParent.made] == [4, 4]  # the warming pair and 3 rounds


def test_a_run_ends_its_parents_when_a_measurement_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing(_FakeParent):
        def measure(self, kind: str) -> float:
            raise RuntimeError("a measurement failed")

    _FakeParent.made = []
    monkeypatch.setattr(layout_noise, "Parent", Failing)
    with pytest.raises(RuntimeError):
        layout_noise.one_run("inherited", parents=3, rounds=2)
    assert len(_FakeParent.made) == 3 and all(p.ended for p in _FakeParent.made)


def _run(arm: str, offsets: list[float]) -> dict[str, Any]:
    logs = [[0.3 + o + d for d in (-0.01, 0.0, 0.01)] for o in offsets]
    return {"arm": arm, "logs": logs, "split": split(logs, permutations=200)}


def test_each_arm_is_summed_up_from_its_own_runs() -> None:
    runs = [
        _run("inherited", [-0.1, 0.0, 0.1]),
        _run("drawn", [0.0, 0.0, 0.0]),
        _run("inherited", [0.0, 0.1, 0.2]),
    ]
    inherited, drawn = (layout_noise.summary(runs, arm) for arm in layout_noise.ARMS)
    assert inherited["runs"] == 2 and drawn["runs"] == 1
    assert inherited["found"] == 2 and drawn["found"] == 0
    assert inherited["between_sd"] == pytest.approx(0.1, rel=0.05)
    assert drawn["between_sd"] == 0.0
    assert inherited["within_sd"] == pytest.approx(0.01) and drawn["within_sd"] == pytest.approx(0.01)
    assert inherited["lowest"] == pytest.approx(math.exp(0.2)) and inherited["highest"] == pytest.approx(
        math.exp(0.5)
    )
    assert layout_noise.summary(runs[:1], "drawn") == {"runs": 0}


def test_the_section_states_every_run_and_both_arms() -> None:
    runs = [_run("inherited", [-0.1, 0.0, 0.1]), _run("drawn", [0.0, 0.0, 0.0])]
    machine = {k: "x" for k in ("date", "cpu", "cores", "torch", "transformers", "commit")}
    text = layout_noise.render(
        {
            "machine": machine,
            "command": "python -m benchmarks.layout_noise",
            "wall_s": 300.0,
            "parents": 3,
            "rounds": 3,
            "runs": runs,
            "arms": {arm: layout_noise.summary(runs, arm) for arm in layout_noise.ARMS},
        }
    )
    assert "| 0     | inherited | 1.22, 1.35, 1.49" in text
    assert "inherited: 1 of 1 runs found a parent's own effect" in text
    assert "drawn: 0 of 1 runs found" in text and "1.35-1.35x" in text
