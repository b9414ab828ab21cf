"""The set-up benchmark's RESULTS.md section (benchmarks/setup_cost.py, setup_cost.render):
the first trial of a memory kind and a later one, each with its share, and the run it replaced."""

from __future__ import annotations

from typing import Any

from benchmarks import setup_cost
from tests.unit.bench_helpers import section

MACHINE = {"date": "2026-11-25 10:00 UTC", "cpu": "Test CPU", "cores": 2, "commit": "abc1234"}
MACHINE |= {"python": "3.11", "torch": "2.13.0+cpu", "transformers": "5.24.0", "optuna": "5.0.0"}


def _trial(setup: float, first: float, warmup: float, window: float) -> dict[str, Any]:
    return {"setup_s": setup, "first_step_s": first, "warmup_s": warmup, "window_s": window}


def _data(previous: dict[str, Any] | None = None) -> dict[str, Any]:
    cases = [
        {"params": 494e6, "pretrained": False, "wall_s": 120.0, **_trial(14.0, 10.0, 20.0, 6.0)}
        | {"later": _trial(4.0, 9.0, 18.0, 18.0)},
        {"params": 494e6, "pretrained": True, "wall_s": 110.0, **_trial(8.0, 16.0, 25.0, 7.0)}
        | {"later": _trial(2.0, 15.0, 24.0, 14.0)},
    ]
    return {"machine": MACHINE, "args": ["--trials", "2"], "cases": cases, "previous": previous}


def test_the_first_and_a_later_trial_each_get_their_set_up_and_share() -> None:
    claims: list[str] = []
    text = section(setup_cost, _data(), claims)
    row = next(line for line in text.splitlines() if line.startswith("| random init"))
    # first 14 s of 14+20+6 = 35%; later 4 s of 4+18+18 = 10%; the other columns are the later trial's
    assert row.startswith(
        "| random init | 494M | 14.0 s | 4.0 s | 9.0 s | 18.0 s | 18.0 s | 35% / 10% | 120 s |"
    )
    assert "| set-up before" not in text
    assert claims[0] == (
        "Set-up of a fresh worker, 494M-parameter model (random-init): 4.0 s, 10% of a later trial; "
        "the first trial of its kind, which probes it for the memory estimate: 14.0 s (35%)."
    )


def test_the_run_it_replaced_is_shown_beside_it() -> None:
    previous = {
        "commit": "0ld0000",
        "cases": [
            {"pretrained": False, "setup_s": 17.6, "later_setup_s": 7.5, "wall_s": 130.0},
            {"pretrained": True, "setup_s": 7.8, "later_setup_s": None, "wall_s": 120.0},
        ],
    }
    text = section(setup_cost, _data(previous), [])
    assert "set-up before (commit 0ld0000): first, later |" in text
    rows = [line for line in text.splitlines() if line.startswith(("| random", "| `--pre"))]
    assert rows[0].endswith("| 120 s | 17.6 s, 7.5 s |")
    assert rows[1].endswith("| 110 s | 7.8 s, - |")  # a run that measured no later trial


def test_repeats_show_their_median_and_range() -> None:
    data = _data()
    second = {"params": 494e6, "pretrained": False, "wall_s": 140.0, **_trial(10.0, 10.0, 20.0, 6.0)}
    data["cases"].append(second | {"later": _trial(6.0, 9.0, 18.0, 16.0)})
    claims: list[str] = []
    text = section(setup_cost, data, claims)
    assert "Medians of 2 runs, with their range" in text
    row = next(line for line in text.splitlines() if line.startswith("| random init"))
    # first trials 14 and 10 s, later ones 4 and 6 s; shares 35% and 27.8%, 10% and 15%
    assert row.startswith(
        "| random init | 494M | 12.0 s (10.0 s-14.0 s) | 5.0 s (4.0 s-6.0 s) | 9.0 s (9.0 s-9.0 s) |"
    )
    assert "| 31% (28%-35%) / 12% (10%-15%) | 130 s (120 s-140 s) |" in row
    pretrained = next(line for line in text.splitlines() if line.startswith("| `--pretrained`"))
    assert pretrained.startswith(
        "| `--pretrained` (safetensors) | 494M | 8.0 s | 2.0 s |"
    )  # one run: no range
    assert claims[0].startswith(
        "Set-up of a fresh worker, 494M-parameter model (random-init): 5.0 s (4.0 s-6.0 s)"
    )
