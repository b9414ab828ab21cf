"""`autotune studies`, `show` and `knobs` with ``--format json|yaml``: the facts their tables show,
for scripts, and nothing else on stdout."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.records import measured_record, trial_attrs, write_study
from autotune.store.storage import open_storage
from tests.unit.cli_helpers import run


def _store(tmp_path: Path) -> str:
    """A store with study ``fmt``: a budget of 2: one trial measured, one out of memory."""
    url = f"sqlite:///{tmp_path / 'formats.db'}"
    study = optuna.create_study(storage=open_storage(url), study_name="fmt", direction="maximize")
    write_study(study, run_config={"trials": 2}, workload={"model": "tiny-gpt2", "seq_len": 64})
    write_study(study, device={"name": "CPU", "count": 1, "memory_bytes": 2**34})
    batch = optuna.distributions.CategoricalDistribution([8, 16])
    measured = measured_record(
        {"tokens_per_s": 1234.5, "samples_per_s": 19.3, "peak_memory_bytes": 3 * 2**20}
    )
    done = replace(measured, state="COMPLETE", trained=True, feasible=True)
    study.add_trial(
        optuna.trial.create_trial(
            params={"per_device_train_batch_size": 8},
            distributions={"per_device_train_batch_size": batch},
            value=1234.5,
            user_attrs=trial_attrs(done),
        )
    )
    study.add_trial(
        optuna.trial.create_trial(
            params={"per_device_train_batch_size": 16},
            distributions={"per_device_train_batch_size": batch},
            state=optuna.trial.TrialState.PRUNED,
            user_attrs={"reason": "oom", "message": "out of memory", "trained": True},
        )
    )
    return url


@pytest.mark.parametrize("output_format", ["json", "yaml"])
def test_show_lists_the_trials_and_the_answer_for_scripts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output_format: str
) -> None:
    url = _store(tmp_path)
    assert run("show", "--study", "fmt", "--storage", url, "-f", output_format) in (None, 0)
    out = capsys.readouterr().out
    data = json.loads(out) if output_format == "json" else yaml.safe_load(out)
    assert data["study"] == "fmt" and data["more_trials"] == 0
    first, second = data["trials"]
    assert first["number"] == 0 and first["tokens_per_s"] == 1234.5
    assert first["peak_memory_bytes"] == 3 * 2**20 and first["state"] == "COMPLETE"
    assert first["params"] == {"per_device_train_batch_size": 8}
    assert (second["state"], second["reason"], second["message"]) == ("PRUNED", "oom", "out of memory")
    assert data["answer"]["choice"]["trial"] == 0  # no baseline: the best measured, not re-measured
    assert data["answer"]["rule"] == "not_remeasured"


@pytest.mark.parametrize("output_format", ["json", "yaml"])
def test_studies_lists_each_study_for_scripts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output_format: str
) -> None:
    url = _store(tmp_path)
    assert run("studies", "--storage", url, "--format", output_format) in (None, 0)
    out = capsys.readouterr().out
    data = json.loads(out) if output_format == "json" else yaml.safe_load(out)
    (study,) = data["studies"]
    assert study["study"] == "fmt" and study["model"] == "tiny-gpt2" and study["seq_len"] == 64
    # the trial that ran out of memory was measured too: it counts against the budget
    assert (study["measured"], study["budget"], study["state"]) == (2, 2, "done")
    assert study["best_tokens_per_s"] == 1234.5 and study["device"] == "CPU"


def test_an_empty_store_is_an_empty_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("studies", "--storage", f"sqlite:///{tmp_path / 'empty.db'}", "-f", "json") in (None, 0)
    assert json.loads(capsys.readouterr().out)["studies"] == []


def test_knobs_lists_the_catalogue_with_what_runs_here(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("knobs", "-f", "json") in (None, 0)
    data = json.loads(capsys.readouterr().out)
    by_name = {k["name"]: k for k in data["knobs"]}
    precision = {v["value"]: v for v in by_name["precision"]["values"]}
    assert (
        by_name["precision"]["changes_math"] is True
        and by_name["precision"]["lands_in"] == "TrainingArguments"
    )
    assert precision["fp8"]["runs_on"] and precision["fp32"]["unavailable_here"] is None
    if data["device"] == "CPU":
        assert "CUDA" in precision["fp8"]["unavailable_here"]


def test_an_unknown_format_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("studies", "--storage", f"sqlite:///{tmp_path / 'x.db'}", "-f", "xml") == 2
    assert "xml" in capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()  # nothing created
