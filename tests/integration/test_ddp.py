"""DDP trials from the supervisor: each trial a fresh `torchrun --nproc-per-node 2` group (gloo on CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

import autotune
from autotune.study.store import measured_count
from tests.helpers import FAST, Fault, RankRecorder, write_space

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]


def test_ddp_trials_through_the_supervisor(tmp_path: Path) -> None:
    knobs = {"per_device_train_batch_size": [2, 4], "attn_implementation": ["eager", "sdpa"]}
    failing = {"per_device_train_batch_size": 4, "attn_implementation": "eager"}
    records = tmp_path / "ranks"
    records.mkdir()
    result = autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, knobs),
        trials=3,
        storage=f"sqlite:///{tmp_path / 'ddp.db'}",
        seq_len=16,
        measure=FAST,
        finalists=0,
        measure_baseline=False,
        nproc_per_node=2,
        ddp_timeout_s=60,
        enqueue=[failing, {"per_device_train_batch_size": 2, "attn_implementation": "sdpa"}],
        callbacks=[RankRecorder(str(records)), Fault("raise", {"per_device_train_batch_size": 4}, rank=1)],
    )
    study = result.study
    assert measured_count(study) == 3
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]

    # The fault on rank 1 only ended its trial on both ranks, recorded with rank 1's reason.
    first = study.trials[0]
    assert first.params == failing
    assert first.state == optuna.trial.TrialState.FAIL
    assert first.user_attrs["reason"] == "error"
    assert first.user_attrs["message"].startswith("rank 1: RuntimeError: injected failure")

    # Both ranks trained every trial with the same values, the model-load knob included.
    seen = [
        [json.loads(line) for line in (records / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)
    ]
    assert len(seen[0]) == len(seen[1]) >= 3
    assert seen[0] == seen[1]
    assert {s["world_size"] for s in seen[0]} == {2}
    completed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert completed
    trained_with = {(s["batch_size"], s["attn_implementation"]) for s in seen[0]}
    for trial in completed:
        assert (
            trial.params["per_device_train_batch_size"],
            trial.params["attn_implementation"],
        ) in trained_with
        attrs = trial.user_attrs
        # Tokens/s is the whole job's: each step counts both ranks' samples.
        assert attrs["world_size"] == 2
        assert attrs["samples_per_step"] == 2 * trial.params["per_device_train_batch_size"]
        assert attrs["tokens_per_step"] == attrs["samples_per_step"] * 16
        # Peak memory is the largest rank's, and each rank's is kept.
        assert len(attrs["rank_peak_memory_bytes"]) == 2
        assert attrs["peak_memory_bytes"] == max(attrs["rank_peak_memory_bytes"]) > 0
