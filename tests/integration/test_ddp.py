"""DDP trials from the supervisor: each trial a fresh `torchrun --nproc-per-node 2` group (gloo on CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

import autotune
from autotune.answer.model import Answer
from autotune.records import read_study
from autotune.store.session import StudyStore
from autotune.store.trials import measured_count
from tests.helpers import FAST, Fault, RankRecorder, SkipLastBlock, write_space

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]


DDP_KNOBS = {
    "ddp_find_unused_parameters": [True, False],
    "ddp_bucket_cap_mb": [1, 50],
    "ddp_static_graph": [True, False],
    "ddp_broadcast_buffers": [True, False],
}


def _ddp_search(
    tmp_path: Path,
    name: str,
    enqueue: list[dict],
    knobs: dict = DDP_KNOBS,
    trials: int = 0,
    **options: object,
) -> autotune.SearchResult:
    """A 2-rank search of `knobs` (a trial per enqueued configuration unless `trials` says more).
    Its whole-run check (a torchrun group more) runs where a test asks for it."""
    return autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, knobs),
        trials=trials or len(enqueue),
        storage=f"sqlite:///{tmp_path / name}",
        seq_len=16,
        measure=FAST,
        finalists=0,
        measure_baseline=False,
        nproc_per_node=2,
        ddp_timeout_s=60,
        enqueue=enqueue,
        **{"whole_run_check": False, **options},
    )


def test_each_ddp_knob_reaches_the_wrapper_of_a_two_rank_trial(tmp_path: Path) -> None:
    first = {
        "ddp_find_unused_parameters": True,
        "ddp_bucket_cap_mb": 1,
        "ddp_static_graph": False,
        "ddp_broadcast_buffers": False,
    }
    second = {
        "ddp_find_unused_parameters": False,
        "ddp_bucket_cap_mb": 50,
        "ddp_static_graph": True,
        "ddp_broadcast_buffers": True,
    }
    result = _ddp_search(tmp_path, "knobs.db", [first, second])
    trials = {t.number: t for t in result.study.optuna_study.trials}
    for number, asked in ((0, first), (1, second)):
        trial = trials[number]
        assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs.get("message")
        assert trial.params == asked
        # Read back from the DistributedDataParallel wrapper the trial trained with.
        assert trial.user_attrs["ddp"] == {
            "find_unused_parameters": asked["ddp_find_unused_parameters"],
            "bucket_cap_mb": asked["ddp_bucket_cap_mb"],
            "static_graph": asked["ddp_static_graph"],
            "broadcast_buffers": asked["ddp_broadcast_buffers"],
        }


def test_unused_parameters_without_their_search_are_a_recorded_reason(tmp_path: Path) -> None:
    without = {
        "ddp_find_unused_parameters": False,
        "ddp_bucket_cap_mb": 50,
        "ddp_static_graph": False,
        "ddp_broadcast_buffers": True,
    }
    result = _ddp_search(
        tmp_path,
        "unused.db",
        [without, {**without, "ddp_bucket_cap_mb": 1}, {**without, "ddp_find_unused_parameters": True}],
        callbacks=[SkipLastBlock()],
        trials=2,  # the second trial is known to fail and costs no training
    )
    failed, known, searched = sorted(result.study.optuna_study.trials, key=lambda t: t.number)[:3]
    assert failed.params == without and failed.state != optuna.trial.TrialState.COMPLETE
    assert failed.user_attrs["reason"] == "unused_parameters", failed.user_attrs.get("message")
    # Learned: another trial without the search is not trained on this model.
    assert known.user_attrs["reason"] == "unused_parameters_known"
    assert known.user_attrs["trained"] is False
    assert f"trial {failed.number} failed without ddp_find_unused_parameters" in known.user_attrs["message"]
    # The search went on: the same model with the search for unused parameters on trains.
    assert searched.state == optuna.trial.TrialState.COMPLETE
    assert searched.user_attrs["ddp"]["find_unused_parameters"] is True


def test_ddp_trials_through_the_supervisor(tmp_path: Path) -> None:
    knobs = {"per_device_train_batch_size": [2, 4], "attn_implementation": ["eager", "sdpa"]}
    failing = {"per_device_train_batch_size": 4, "attn_implementation": "eager"}
    records = tmp_path / "ranks"
    records.mkdir()
    result = _ddp_search(
        tmp_path,
        "ddp.db",
        [failing, {"per_device_train_batch_size": 2, "attn_implementation": "sdpa"}],
        knobs,
        trials=3,
        callbacks=[RankRecorder(str(records)), Fault("raise", {"per_device_train_batch_size": 4}, rank=1)],
        whole_run_check=True,
    )
    study = result.study.optuna_study
    assert measured_count(StudyStore(study)) == 3
    # The answer's whole-run check ran as its trials did: a group of both ranks, each one's step.
    (check,) = read_study(study).whole_run
    assert check.trial == result.answer.choice.trial and check.fits is True, check
    assert check.train_samples == 2 * check.params["per_device_train_batch_size"]
    assert set(check.step_peaks) == {"train", "eval", "save"} and min(check.step_peaks.values()) > 0
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


def _torchrun(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)


def _launched_search(tmp_path: Path, mode: str) -> tuple[str, Path, subprocess.CompletedProcess[str]]:
    """`launched_search.py` under torchrun: its store, the ranks' records, and how it ended."""
    space = write_space(tmp_path, {"per_device_train_batch_size": [2, 4, 8], "precision": ["fp32", "bf16"]})
    storage = f"sqlite:///{tmp_path / (mode + '.db')}"
    records = tmp_path / "ranks"
    records.mkdir()
    script = str(Path(__file__).with_name("launched_search.py"))
    return storage, records, _torchrun(script, storage, space, str(records), mode, timeout_s=300)


def test_a_search_under_torchrun_agrees_on_every_trial(tmp_path: Path) -> None:
    storage, records, done = _launched_search(tmp_path, "agreed")
    assert done.returncode == 0, done.stdout + done.stderr
    study = optuna.load_study(study_name="agreed", storage=storage)
    trials = study.trials
    assert measured_count(StudyStore(study)) == 3
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    # The duplicate was skipped (its result reused) and the slow trial pruned: on both ranks.
    assert trials[1].user_attrs["duplicate_of"] == 0
    assert trials[2].user_attrs["reason"] == "timeout"
    seen = [[json.loads(x) for x in (records / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)]
    assert seen[0] == seen[1]
    # The skipped duplicate never trained; each search ends with the whole-run check of its answer,
    # run by both ranks of the group alike: a (batch 2) after the first; after the second the
    # faster of a and c as measured (the study's answer), checked only if it is c (a's check is
    # stored with the study already).
    batches = [s["batch_size"] for s in seen[0]]
    stored = read_study(study).answer
    answer = Answer.from_dict(stored) if stored else None
    assert answer is not None and answer.choice is not None
    picked = answer.choice.params["per_device_train_batch_size"]
    assert batches == [2, 2, 8, 4] + ([4] if picked == 4 else []), (batches, picked)


def test_a_failure_on_one_rank_under_torchrun_is_recorded_and_resumable(tmp_path: Path) -> None:
    storage, _, failed = _launched_search(tmp_path, "failing")
    assert failed.returncode != 0
    assert "rank 1: RuntimeError: injected failure" in failed.stderr
    assert "-m autotune resume --study failing" in failed.stderr
    study = optuna.load_study(study_name="failing", storage=storage)
    first = study.trials[0]
    assert first.state == optuna.trial.TrialState.FAIL  # recorded, not left RUNNING
    assert first.user_attrs["message"].startswith("rank 1: RuntimeError: injected failure")

    resumed = _torchrun("-m", "autotune", "resume", "--study", "failing", "--storage", storage, timeout_s=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.count("Top trials of failing") == 1  # rank 0 alone reports
    study = optuna.load_study(study_name="failing", storage=storage)
    assert measured_count(StudyStore(study)) == 2
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]


def test_each_strategy_that_runs_here_is_measured_per_rank_and_the_rest_say_why(tmp_path: Path) -> None:
    from autotune.plan.build import plan_search
    from autotune.space.knobs import STRATEGIES

    knobs = {"data_parallel": list(STRATEGIES)}
    config = autotune.RunConfig(
        model="tiny-gpt2", space=write_space(tmp_path, knobs), seq_len=16, nproc_per_node=2
    )
    plan = plan_search(config, open_store=False)
    runs_here = [str(v) for v in plan.space.knobs.get("data_parallel", ())]
    not_here = " | ".join(plan.not_searched)
    # On a CPU, FSDP would silently train as DDP: it is left out with that reason, never mislabelled.
    assert "ddp" in runs_here
    for strategy in STRATEGIES:
        if strategy not in runs_here:
            assert f"data_parallel={strategy}" in not_here or strategy in not_here, strategy
    if not plan.hardware.cuda:
        assert "fsdp_full_shard" not in runs_here and "plain DDP" in not_here
    result = _ddp_search(tmp_path, "strategies.db", [{"data_parallel": s} for s in runs_here], knobs=knobs)
    for trial in result.study.optuna_study.trials:
        assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs.get("message")
        # What the Trainer built, read back from it, is the strategy asked for.
        assert trial.user_attrs["data_parallel_applied"] == trial.params["data_parallel"]
        peaks = trial.user_attrs["rank_peak_memory_bytes"]
        assert len(peaks) == 2 and all(p > 0 for p in peaks)
        assert trial.user_attrs["peak_memory_bytes"] == max(peaks)
