"""The batch ladder: a batch list ending with ``fits`` goes on by doublings while the memory
estimate fits (under the cap), stored once per study, the same for every process."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.errors import SpaceError
from autotune.measure.memory_model import fitting_rungs
from autotune.space.loading import parse_space
from autotune.space.searchspace import LADDER_RUNGS, SearchSpace


def _space(batches: list[object]) -> SearchSpace:
    knobs = {"per_device_train_batch_size": batches, "precision": ["fp32", "bf16"]}
    return parse_space({"knobs": knobs}, name="s", source="s.yaml")


def test_a_list_ending_with_fits_offers_doublings_past_its_largest_batch() -> None:
    space = _space([4, 16, 8, "fits"])
    assert space.ladder and space.knobs["per_device_train_batch_size"] == (4, 16, 8)
    assert space.ladder_candidates() == (32, 64, 128) and LADDER_RUNGS == 3
    assert _space([4, 8]).ladder_candidates() == ()  # no ladder asked for


def test_a_resolved_ladder_is_searched_and_stored_beside_the_file_form() -> None:
    space = _space([4, 8, "fits"])
    resolved = space.with_ladder([16, 32])
    assert resolved.knobs["per_device_train_batch_size"] == (4, 8, 16, 32)
    assert resolved.grid_size() == 4 * 2
    assert resolved.ladder_candidates() == ()  # resolved once
    # The file form keeps `fits`, the rungs go in their own key: a worker re-reads both.
    assert resolved.to_dict()["knobs"]["per_device_train_batch_size"] == [4, 8, "fits"]
    assert resolved.describe()["batch_ladder"] == [16, 32]
    assert space.describe()["batch_ladder"] is None
    assert resolved.fingerprint() == space.fingerprint()  # the rungs follow from the machine's memory
    assert "+ 16, 32 [ladder" in resolved.notes[-1]
    reread = parse_space(resolved.to_dict(), name="s", source="stored").with_ladder([16, 32])
    assert reread.knobs == resolved.knobs
    assert space.with_ladder([]).knobs == space.knobs  # nothing larger fits


def test_a_stored_ladder_that_does_not_continue_the_space_is_refused() -> None:
    with pytest.raises(SpaceError, match=r"batch ladder \[24\] does not continue"):
        _space([4, 8, "fits"]).with_ladder([24])


def test_fits_needs_a_batch_before_it() -> None:
    with pytest.raises(SpaceError, match="'fits' needs a batch size before it"):
        _space(["fits"])


def test_a_fixed_global_batch_gets_only_its_splits() -> None:
    knobs = {"per_device_train_batch_size": [4, 8, "fits"], "gradient_accumulation_steps": [1, 2]}
    space = parse_space({"knobs": knobs}, name="s", source="s.yaml").with_global_batch(16)
    assert space.ladder_candidates() == ()
    assert space.knobs["per_device_train_batch_size"] == (8,)


def test_the_ladder_goes_on_while_under_the_cap_and_stops_at_the_first_over() -> None:
    per_sample = 100
    estimate = {16: 1600, 32: 3200, 64: 6400}.get  # a batch's estimate in bytes

    assert fitting_rungs((16, 32, 64), estimate, limit_bytes=4000) == ([16, 32], None)
    assert fitting_rungs((16, 32, 64), estimate, limit_bytes=10_000) == ([16, 32, 64], None)
    assert fitting_rungs((16, 32, 64), estimate, limit_bytes=1000) == ([], None)
    # An estimate that cannot be made ends the ladder (never a guess).
    assert fitting_rungs((16, 32, 64), lambda b: None if b == 32 else b * per_sample, 10_000) == ([16], None)


def test_one_probe_decides_the_first_batch_in_doubt_and_calibrates_the_rest() -> None:
    estimate = {16: 1600, 32: 3200, 64: 6400, 128: 12_800}.get
    probed: list[int] = []

    def probe(measured: dict[int, int]) -> Any:
        def run(batch: int) -> int:
            probed.append(batch)
            return measured[batch]

        return run

    # 64's estimate (6400) is within the 25% margin of the 6000 limit: in doubt. The probe finds it
    # lighter than estimated (5000): it fits, and 128 is judged on its estimate scaled by 5000/6400.
    rungs, found = fitting_rungs((16, 32, 64, 128), estimate, 6000, probe({64: 5000}))
    assert rungs == [16, 32, 64]
    assert found == {"batch": 64, "estimated_bytes": 6400, "measured_bytes": 5000}
    assert probed == [64]  # one probe, and only where in doubt
    # The same estimate measured heavier than the limit: the ladder stops before it.
    probed.clear()
    assert fitting_rungs((16, 32, 64, 128), estimate, 6000, probe({64: 6100}))[0] == [16, 32]
    assert probed == [64]
    # Measured far lighter, the scaled estimates let a later rung in without a second probe.
    probed.clear()
    assert fitting_rungs((16, 32, 64, 128), estimate, 6000, probe({64: 2000}))[0] == [16, 32, 64, 128]
    assert probed == [64]
    # Clearly under or clearly over: no probe at all.
    probed.clear()
    assert fitting_rungs((16, 32), estimate, 100_000, probe({}))[0] == [16, 32]
    assert fitting_rungs((16, 32, 64), estimate, 1900, probe({16: 1800}))[0] == [16]
    assert probed == [16]  # 16 (1600) was in doubt under 1900; 32 (3200 x 1800/1600) is clearly over
    # A probe that cannot run (None) ends the ladder there.
    assert fitting_rungs((16, 32, 64), estimate, 6000, lambda b: None)[0] == [16, 32]
