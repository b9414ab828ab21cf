"""A real tiny search logged to TensorBoard and MLflow: what the trackers hold is what the study
measured and answered, and the trials' own training logs nowhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import TrainerCallback

import autotune
from tests.helpers import IN_PROCESS, write_space

pytestmark = pytest.mark.timeout(300)


class ReportTo(TrainerCallback):
    """Records each trial Trainer's ``report_to`` as its training begins."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.seen.append(args.report_to)


def test_a_search_reaches_tensorboard_and_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    monkeypatch.chdir(tmp_path)  # where a tracker the trials asked for would write by default
    probe = ReportTo()
    space = write_space(tmp_path, {"per_device_train_batch_size": [2, 4]}, name="small")
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=2,
        storage=f"sqlite:///{tmp_path / 'search.db'}",
        study="tracked",
        seq_len=32,
        report_to="tensorboard,mlflow",
        tracker_dir=str(tmp_path / "tb"),
        callbacks=[probe],
        **IN_PROCESS,
    )
    measured = {t.number: t for t in result.trials if t.tokens_per_s is not None}
    assert (
        len([t for t in measured.values() if not t.reused]) == 2
    )  # a duplicate reports the figures it reused

    # TensorBoard: each trial's figures at its number, the answer after them
    events = EventAccumulator(str(tmp_path / "tb" / "tracked"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    logged = {e.step: e.value for e in events.Scalars("trial/tokens_per_s")}
    assert logged == pytest.approx({n: t.tokens_per_s for n, t in measured.items()})
    peaks = {e.step: e.value for e in events.Scalars("trial/peak_memory_bytes")}
    assert peaks == {n: float(t.peak_memory_bytes) for n, t in measured.items()}
    (verdict,) = events.Tensors("answer/verdict/text_summary")
    assert verdict.tensor_proto.string_val[0].decode() == result.verdict

    # MLflow: the search's run with the answer, a nested run per trial with its knobs and figures
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tracked")
    runs: dict[str, Any] = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert runs["tracked"].data.tags["verdict"] == result.verdict
    assert runs["tracked"].info.status == "FINISHED"
    for number, trial in measured.items():
        run = runs[f"trial {number}"]
        assert run.data.params == {
            "per_device_train_batch_size": str(trial.params["per_device_train_batch_size"])
        }
        assert run.data.metrics["tokens_per_s"] == pytest.approx(trial.tokens_per_s)
        assert run.data.tags["state"] == trial.state

    # the trials' own training stayed untracked: their Trainers report to nothing
    assert probe.seen and all(report_to in ([], ["none"], "none") for report_to in probe.seen), probe.seen
    assert not (tmp_path / "runs").exists() and not (tmp_path / "wandb").exists()


def test_tune_logs_the_trainers_search_to_tensorboard(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import (
        AutoModelForCausalLM,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainingArguments,
    )

    from tests.local_models import user_corpus

    tokenizer, config, train = user_corpus(tmp_path / "mine", 20)
    trainer = Trainer(
        model_init=lambda: AutoModelForCausalLM.from_config(config),
        args=TrainingArguments(output_dir=str(tmp_path / "out"), report_to="none"),
        train_dataset=train,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
    )
    tuned = autotune.tune(
        trainer,
        space=write_space(tmp_path, {"per_device_train_batch_size": [2]}, name="one"),
        n_trials=1,
        storage=f"sqlite:///{tmp_path / 'tune.db'}",
        study_name="mine",
        report_to="tensorboard",
        tracker_dir=str(tmp_path / "tb"),
        **IN_PROCESS,
    )
    events = EventAccumulator(str(tmp_path / "tb" / "mine"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    (trial,) = [t for t in tuned.search.trials if t.tokens_per_s is not None]
    logged = {e.step: e.value for e in events.Scalars("trial/tokens_per_s")}
    assert logged == pytest.approx({trial.number: trial.tokens_per_s})
    (verdict,) = events.Tensors("answer/verdict/text_summary")
    assert verdict.tensor_proto.string_val[0].decode() == tuned.answer.verdict
