"""The machine probe: a fixed small amount of torch work, timed, and the slowdown it reads."""

from __future__ import annotations

import math

import pytest
import torch

from autotune.measure import drift


@pytest.mark.parametrize(
    ("then", "now", "expected"),
    [
        (0.002, 0.006, 3.0),
        (0.002, 0.002, 1.0),
        (0.002, 0.001, 1.0),
        (None, 0.006, 1.0),
        (0.002, None, 1.0),
        (0.0, 0.006, 1.0),
        (0.002, 0.2, drift.MAX_SLOWDOWN),
    ],
    ids=[
        "three times slower",
        "as fast",
        "faster now: judged as the plain comparison",
        "no probe with the reference (an older store)",
        "no probe now",
        "a zero probe",
        "100x slower: excused up to the cap",
    ],
)
def test_the_slowdown_is_the_probe_ratio_between_one_and_the_cap(
    then: float | None, now: float | None, expected: float
) -> None:
    assert drift.slowdown(then, now) == pytest.approx(expected)


def test_the_probe_times_its_work_without_touching_the_random_streams() -> None:
    state = torch.random.get_rng_state()
    seconds = drift.probe_s("cpu")
    assert math.isfinite(seconds) and seconds > 0  # a duration, measured: its size is a benchmark's
    assert torch.equal(torch.random.get_rng_state(), state)  # the trial's seeded draws are its own


def test_the_probe_runs_with_the_thread_count_it_finds() -> None:
    # The trial's own thread count: the probe waits for descheduled threads as training does.
    threads = torch.get_num_threads()
    drift.probe_s("cpu")
    assert torch.get_num_threads() == threads


@pytest.mark.gpu
def test_the_probe_times_the_current_cuda_device() -> None:
    assert 0 < drift.probe_s("cuda") < 5.0
