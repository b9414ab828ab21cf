"""The batch ladder in a real search: a job estimates which larger batches fit before the first
trial, the study stores them, trials are drawn from the longer list, and a resumed search keeps
the ladder it stored instead of estimating again."""

from __future__ import annotations

from pathlib import Path

import pytest

import autotune
from autotune.driver.supervisor import Supervisor
from autotune.plan.build import plan_from_study
from autotune.store.trials import measured_count
from tests.helpers import FAST_RUN, IN_PROCESS, write_space

pytestmark = pytest.mark.timeout(300)


def test_the_ladder_goes_past_the_listed_batches_when_memory_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    space = write_space(tmp_path, {"per_device_train_batch_size": [4, "fits"]})
    storage = f"sqlite:///{tmp_path / 'ladder.db'}"
    # Worker processes: the ladder job runs like a trial, in a process of its own.
    first = autotune.search(
        model="tiny-gpt2", space=space, trials=1, storage=storage, seq_len=16, study="l", **FAST_RUN
    )
    # A tiny model fits every rung in this machine's memory (no cap): 8, 16 and 32 are searched.
    assert first.study.user_attrs["batch_ladder"] == [8, 16, 32]
    assert first.study.user_attrs["space"]["batch_ladder"] == [8, 16, 32]
    plan, _ = plan_from_study("l", storage)  # what a worker (or another host) plans
    assert plan.space.knobs["per_device_train_batch_size"] == (4, 8, 16, 32)
    # A resumed search keeps the stored ladder: no second estimate.
    monkeypatch.setattr(Supervisor, "batch_ladder", lambda *a: pytest.fail("estimated again"))
    again = autotune.search(
        model="tiny-gpt2", space=space, trials=3, storage=storage, seq_len=16, study="l", **IN_PROCESS
    )
    batches = {t.params["per_device_train_batch_size"] for t in again.study.optuna_study.trials}
    assert batches <= {4, 8, 16, 32}
    assert measured_count(again.study) == 3  # (a repeated proposal is reused, not measured)


def test_a_memory_cap_stops_the_ladder(tmp_path: Path) -> None:
    # The cap is under what the process holds before any model: nothing larger than listed fits.
    space = write_space(tmp_path, {"per_device_train_batch_size": [4, "fits"]})
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=1,
        storage=f"sqlite:///{tmp_path / 'cap.db'}",
        seq_len=16,
        memory_cap="64MiB",
        **IN_PROCESS,
    )
    assert result.study.user_attrs["batch_ladder"] == []
    assert {t.params["per_device_train_batch_size"] for t in result.study.optuna_study.trials} <= {4}


def test_a_batch_in_doubt_is_probed_once_and_the_probe_decides(tmp_path: Path) -> None:
    from autotune.measure.estimator import MemoryEstimator
    from autotune.plan.build import plan_search

    space = write_space(tmp_path, {"per_device_train_batch_size": [4, "fits"]})
    config = autotune.RunConfig(model="tiny-gpt2", space=space, seq_len=16)
    plan = plan_search(config, open_store=False)
    estimator = MemoryEstimator(plan.workload, plan.hardware.device, plan.base_args, 1)
    estimated = estimator.estimate({"per_device_train_batch_size": 8}).total_bytes
    # A cap at batch 8's own estimate puts it in doubt (within the safety margin either side).
    cap_mib = estimated // 2**20
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=1,
        storage=f"sqlite:///{tmp_path / 'doubt.db'}",
        seq_len=16,
        memory_cap=f"{cap_mib}MiB",
        **IN_PROCESS,
    )
    attrs = result.study.user_attrs
    probe = attrs["batch_ladder_probe"]
    assert probe["batch"] == 8 and probe["limit_bytes"] == cap_mib * 2**20
    assert probe["values"]["per_device_train_batch_size"] == 8
    assert probe["measured_bytes"] > 0
    # The measurement, not the estimate, decided batch 8.
    assert (8 in attrs["batch_ladder"]) is (probe["measured_bytes"] <= probe["limit_bytes"])
