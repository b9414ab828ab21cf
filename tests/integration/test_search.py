"""A real search on CPU with a SQLite store: measured trials, budget, continuation, optuna's CLI."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from transformers import TrainingArguments

import autotune
from autotune.answer.instrument import rounds_fit
from autotune.records import read_study, read_trial
from autotune.store.session import StudyStore
from autotune.store.trials import measured_count
from tests.helpers import FAST, FAST_RUN, FakeOOM, FixedStepTime, KnobProbe, write_space

QUICK_KNOBS = {
    "per_device_train_batch_size": [2, 4],
    "precision": ["fp32", "bf16"],
    "attn_implementation": ["eager", "sdpa"],
}
MEASURED = ("tokens_per_s", "samples_per_s", "peak_memory_bytes", "step_time_median_s", "window_s")


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str, str]:
    folder = tmp_path_factory.mktemp("search")
    space = write_space(folder, QUICK_KNOBS, name="small")
    storage = f"sqlite:///{folder / 'search.db'}"
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=4,
        storage=storage,
        seq_len=32,
        seed=1,
        **FAST_RUN,
    )
    return result, storage, space


def test_four_trials_complete_with_measurements(first_run: Any) -> None:
    result, _, _ = first_run
    assert result.ran == 4
    trained = [t for t in result.trials if t.attrs["trained"]]
    assert len(trained) == 4
    for trial in result.trials:
        assert trial.state == "COMPLETE", trial.message
        for key in MEASURED:
            assert trial.attrs[key] > 0, key
        # Tokens are counted from the batch shape: samples x sequence length.
        assert trial.attrs["tokens_per_s"] == pytest.approx(trial.attrs["samples_per_s"] * 32)
        assert trial.attrs["measured_steps"] >= FAST.min_measure_steps
        assert trial.attrs["model_flops_per_token"] > 0
        if not torch.cuda.is_available():
            assert trial.measurement.mfu is None  # no peak FLOPS for a CPU: never guessed
        assert trial.attrs["warmup_steps"] >= FAST.settle_steps


def test_objective_is_the_stored_tokens_per_second(first_run: Any) -> None:
    result, storage, _ = first_run
    study = optuna.load_study(study_name=result.study.study_name, storage=storage)
    for frozen in study.trials:
        assert frozen.value == frozen.user_attrs["tokens_per_s"]


def test_best_trial_is_the_fastest(first_run: Any) -> None:
    result, _, _ = first_run
    fastest = max(t.tokens_per_s for t in result.trials if t.state == "COMPLETE")
    assert result.best is not None and result.best.tokens_per_s == fastest
    # No baseline measured, nothing re-measured: the answer is the fastest, from its search window.
    answer = result.answer
    assert answer.choice is not None and answer.choice.trial == result.best.number, answer.verdict
    assert not answer.choice.remeasured and "not re-measured" in answer.verdict
    assert result.best_config()["training_args"]["per_device_train_batch_size"] in (2, 4)
    assert result.best_config()["training_args"] == answer.choice.training_args


def test_study_describes_itself(first_run: Any) -> None:
    result, _, _ = first_run
    attrs = result.study.user_attrs
    assert attrs["workload"]["model"] == "tiny-gpt2"
    assert attrs["workload"]["seq_len"] == 32
    assert attrs["space"]["knobs"] == QUICK_KNOBS
    assert attrs["device"]["device"] in ("cpu", "cuda")


def test_rerun_respects_the_total_budget(first_run: Any) -> None:
    result, storage, space = first_run
    same = dict(
        model="tiny-gpt2",
        space=space,
        storage=storage,
        seq_len=32,
        seed=1,
        **FAST_RUN,
    )
    again = autotune.search(trials=4, **same)
    assert again.ran == 0
    assert again.study.study_name == result.study.study_name
    more = autotune.search(trials=6, **same)
    assert more.ran == 2
    assert sum(t.attrs["trained"] for t in more.trials) == 6
    numbers = sorted(t.number for t in more.trials)
    assert numbers == list(range(len(more.trials)))


def test_optuna_cli_reads_the_store(first_run: Any) -> None:
    result, storage, _ = first_run
    optuna_cli = Path(sys.executable).with_name("optuna")
    out = subprocess.run(
        [
            str(optuna_cli),
            "trials",
            "--storage",
            storage,
            "--study-name",
            result.study.study_name,
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert '"tokens_per_s"' in out
    assert '"peak_memory_bytes"' in out
    studies = subprocess.run(
        [str(optuna_cli), "studies", "--storage", storage, "-f", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert result.study.study_name in studies


def test_a_failing_trial_is_recorded_and_the_search_goes_on(tmp_path: Path) -> None:
    space = write_space(tmp_path, {"per_device_train_batch_size": [2, 8]}, name="oom")
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=2,
        storage=f"sqlite:///{tmp_path / 'f.db'}",
        seq_len=16,
        **FAST_RUN,
        callbacks=[FakeOOM(threshold=8)],
        enqueue=[{"per_device_train_batch_size": 8}, {"per_device_train_batch_size": 2}],
    )
    by_batch = {t.params["per_device_train_batch_size"]: t for t in result.trials}
    assert by_batch[8].state == "PRUNED"
    assert by_batch[8].reason == "oom"
    assert "out of memory" in (by_batch[8].message or "")
    assert by_batch[2].state == "COMPLETE"
    assert result.best is not None and result.best.params == {"per_device_train_batch_size": 2}
    assert result.ran == 2  # a failed trial tried to train: it counts against the budget


def test_cli_runs_a_search_end_to_end(tmp_path: Path) -> None:
    space = write_space(tmp_path, {"per_device_train_batch_size": [2, 4]}, name="cli")
    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    args = ["--model", "tiny-llama", "--space", space, "--trials", "2", "--storage", storage]
    args += ["--seq-len", "16", "--settle-steps", "1", "--measure-steps", "3", "--study", "cli-study"]
    args += ["--screen-ratio", "0"]  # both measured in full, whatever the baseline's speed here
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "search", *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "study cli-study" in proc.stdout
    assert proc.stdout.count("tok/s") >= 2
    assert '"per_device_train_batch_size"' in proc.stdout  # the best config is printed
    study = optuna.load_study(study_name="cli-study", storage=storage)
    assert (
        measured_count(StudyStore(study)) == 2
    )  # the budget; proposals of a measured point are reused, not run
    assert all(
        t.user_attrs.get("duplicate_of") is not None for t in study.trials if not t.user_attrs["trained"]
    )


def test_the_baseline_is_measured_first_and_the_speedup_stated(tmp_path: Path) -> None:
    probe = KnobProbe()
    result = autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, {"per_device_train_batch_size": [2, 4]}),
        trials=1,
        storage=f"sqlite:///{tmp_path / 'base.db'}",
        seq_len=16,
        measure=FAST,
        finalists=0,
        callbacks=[probe],
        isolation="none",  # the probe records in this process
    )
    baseline = result.study.user_attrs["baseline"]
    # The Transformers defaults: batch 8, fp32, its own AdamW, no compile, the model's sdpa attention.
    defaults = TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    assert baseline["params"]["per_device_train_batch_size"] == defaults.per_device_train_batch_size == 8
    assert baseline["params"]["precision"] == "fp32"
    assert baseline["params"]["optim"] == defaults.optim.value
    assert baseline["params"]["torch_compile"] == "off"
    assert baseline["tokens_per_s"] > 0 and baseline["peak_memory_bytes"] > 0
    assert probe.trials[0]["batch_size"] == 8  # measured before any trial
    assert len(result.study.optuna_study.trials) == 1  # the baseline is not a trial of the search
    assert result.best is not None
    # The speedup stated is the search windows' (nothing re-measured): the best trial's over the
    # baseline's. It is the answer's when the best trial is handed back; when it did not beat the
    # defaults, the defaults are handed back (1.0x) and the best trial is named with its speedup.
    ratio = result.best.tokens_per_s / baseline["tokens_per_s"]
    answer = result.answer
    best_measured = answer.alternative if answer.keeps_defaults else answer.choice
    assert best_measured is not None and best_measured.trial == result.best.number, answer.verdict
    assert best_measured.speedup is not None and best_measured.speedup.value == pytest.approx(ratio)
    assert result.speedup_over_baseline == pytest.approx(1.0 if answer.keeps_defaults else ratio)


@pytest.mark.usefixtures("roomy_finalists")
def test_the_baseline_is_remeasured_with_the_finalists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every step takes a time the test sets (a step's own work is far shorter): the baseline's
    # (batch 8) 0.15 s, the trials' (batches 2 and 4) 0.3 s, so both trials run at a quarter of
    # its tokens/s or less whatever the machine's speed: both are decided slower than it after the
    # two rounds asked for, and no round more is run (an answer that keeps the defaults, proven or
    # not, needs none). The finalists' budget is the test's (`roomy_finalists`). One torch thread per
    # trial process: beside another job, torch's threads would wait on descheduled ones at every
    # step, and a step's own work would outgrow the time the test sets it.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    slow = [
        FixedStepTime(
            0.15,
            by_params=[({"per_device_train_batch_size": 2}, 0.3), ({"per_device_train_batch_size": 4}, 0.3)],
        )
    ]
    result = autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, {"per_device_train_batch_size": [2, 4]}),
        trials=2,
        storage=f"sqlite:///{tmp_path / 'base2.db'}",
        seq_len=16,
        measure=FAST,
        finalists=2,
        finalist_rounds=2,
        callbacks=slow,
    )
    finalists = {f["number"]: f for f in result.study.user_attrs["finalists"]}
    measured = {t.number for t in result.trials if t.state == "COMPLETE" and "duplicate_of" not in t.attrs}
    assert len(measured) == 2
    # the baseline competes under the same conditions, measured twice in each round (A/A), each
    # measurement with its place in its round's rotated order; the best trial always, the other
    # where the finalists' budget (30% of this short search) pays for its rounds
    assert {-1, -2, result.best.number} <= set(finalists) <= {-1, -2, *measured}
    for finalist in finalists.values():
        assert finalist["rounds"] == [1, 2] and len(finalist["tokens_per_s"]) == 2
        assert all(0 <= p < len(finalists) for p in finalist["positions"])
    baseline = result.study.user_attrs["baseline"]
    assert baseline["remeasured_median"] == statistics.median(finalists[-1]["tokens_per_s"])
    # The answer keeps the defaults and names the best measured beside them, with the speedup
    # the rounds' model states (the study's stored rounds, fitted again here) and its interval.
    answer = result.answer
    assert answer.keeps_defaults and answer.rule == "keep_defaults", answer.verdict
    record = read_study(result.study)
    fit = rounds_fit({f.number: f for f in record.finalists}, record.rounds_looks, record.rounds_look)
    assert fit is not None and record.rounds_looks == result.study.user_attrs["rounds_looks"]
    assert answer.alternative is not None and answer.alternative.trial in measured
    stated, own = answer.alternative.speedup, fit.ratio(answer.alternative.trial, -1)
    assert stated is not None and own is not None and own.high < 1
    assert (stated.value, stated.low, stated.high) == pytest.approx((own.ratio, own.low, own.high))
    assert answer.alternative.remeasured and answer.alternative.tokens_per_s is not None
    assert answer.aa is not None and answer.aa.rounds == 2 and answer.aa.pooled is not None
    assert result.speedup_over_baseline == 1.0


def test_optuna_dashboard_reads_the_store(first_run: Any) -> None:
    # optuna-dashboard's own API, called through its WSGI app (no server, no network).
    import io
    import json
    import sys

    dashboard = pytest.importorskip("optuna_dashboard")
    result, storage, _ = first_run
    app = dashboard.wsgi(storage)

    def get(path: str) -> Any:
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "localhost",
            "SERVER_PORT": "80",
            "wsgi.input": io.BytesIO(),
            "wsgi.errors": sys.stderr,
            "wsgi.url_scheme": "http",
        }
        status: list[str] = []
        body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
        assert status[0].startswith("200"), status
        return json.loads(body)

    summaries = get("/api/studies")["study_summaries"]
    summary = next(s for s in summaries if s["study_name"] == result.study.study_name)
    detail = get(f"/api/studies/{summary['study_id']}")
    assert {"fingerprint", "workload", "space"} <= {a["key"] for a in detail["user_attrs"]}
    assert len(detail["trials"]) == len(result.study.optuna_study.trials)
    trial_attrs = {a["key"] for a in detail["trials"][0]["user_attrs"]}
    assert {"tokens_per_s", "peak_memory_bytes", "training_args"} <= trial_attrs


@pytest.mark.usefixtures("roomy_finalists")
def test_a_leader_that_changes_the_math_has_its_math_keeping_twin_tried(tmp_path: Path) -> None:
    # The one trial asked for runs adafactor (another update rule) at 0.1 s a step, the baseline
    # (AdamW, checkpointing on) 0.3 s. The search then tries the twin that keeps the math (AdamW,
    # checkpointing off, as fast): one trial more, which the answer weighs the change against.
    fast = {"optim": "adafactor"}, 0.1
    twin = {"optim": "adamw_torch_fused", "activation_checkpointing": False}, 0.1
    base = tmp_path / "base.json"
    base.write_text('{"gradient_checkpointing": true}')
    result = autotune.search(
        model="tiny-gpt2",
        space=write_space(
            tmp_path, {"activation_checkpointing": [True, False], "optim": ["adamw_torch_fused", "adafactor"]}
        ),
        trials=1,
        storage=f"sqlite:///{tmp_path / 'twin.db'}",
        seq_len=16,
        measure=FAST,
        finalist_rounds=2,
        base_args=str(base),
        enqueue=[{"activation_checkpointing": False, "optim": "adafactor"}],
        callbacks=[FixedStepTime(0.3, by_params=[fast, twin])],
    )
    measured = {t.number: t.params for t in result.trials if t.state == "COMPLETE"}
    assert measured == {
        0: {"activation_checkpointing": False, "optim": "adafactor"},
        1: {"activation_checkpointing": False, "optim": "adamw_torch_fused"},
    }
    assert measured_count(result.study) == 2 and read_trial(result.study.optuna_study.trials[1]).twin_of == 0
    # both are in the rounds: the math change is compared with its twin, not only with the defaults
    assert {0, 1} <= {f["number"] for f in result.study.user_attrs["finalists"]}
