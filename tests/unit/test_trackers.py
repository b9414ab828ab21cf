"""Trackers (``report_to``): recorded trials and an answer fed to each tracker's real library, read
back from what it wrote (TensorBoard event files, an MLflow file store, a W&B offline run); the
option on the command line and in Python; bad and missing trackers refused before anything."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import autotune.trackers
from autotune.answer.model import Answer, Choice, Interval
from autotune.errors import UsageError
from autotune.options import RunConfig, run_config
from autotune.plan.paths import stored_paths
from autotune.preflight import check_before_creating
from autotune.progress import Reporter, SearchHeader
from autotune.records import TrialRecord, trial_record
from autotune.trackers import TrackedReporter, Tracker, tracking
from tests.unit.cli_helpers import run

pytestmark = pytest.mark.timeout(120)

STUDY = "tiny-gpt2-quick-seq32"
HEADER = SearchHeader(model="tiny-gpt2", space="quick (2 knobs, 4 combinations)", study=STUDY, budget=3)
TRIALS = [
    trial_record(
        0,
        {"per_device_train_batch_size": 4, "precision": "bf16"},
        "COMPLETE",
        {"tokens_per_s": 1200.0, "samples_per_s": 37.5, "peak_memory_bytes": 400 * 2**20},
    ),
    trial_record(
        1,
        {"per_device_train_batch_size": 8, "precision": "fp32"},
        "COMPLETE",
        {"tokens_per_s": 1500.0, "samples_per_s": 46.875, "peak_memory_bytes": 500 * 2**20},
    ),
    trial_record(
        2,
        {"per_device_train_batch_size": 16, "precision": "fp32"},
        "PRUNED",
        {"reason": "infeasible", "message": "peak over the cap", "peak_memory_bytes": 900 * 2**20},
    ),
]
CHOICE = Choice(
    trial=1,
    params={"per_device_train_batch_size": 8, "precision": "fp32"},
    training_args={"per_device_train_batch_size": 8},
    model_kwargs={},
    tokens_per_s=Interval(1480.0, 1450.0, 1510.0, 2),
    peak_memory_bytes=500 * 2**20,
    remeasured=True,
    speedup=Interval(1.25, 1.2, 1.3, 2),
)
RESULT = SimpleNamespace(
    answer=Answer(
        rule="beats_defaults",
        verdict="trial 1 is 1.25x faster than the defaults",
        choice=CHOICE,
        baseline_tokens_per_s=1184.0,
    )
)


def feed(tracker: Tracker, trials: list[TrialRecord] = TRIALS) -> TrackedReporter:
    """A search's events, as the driver sends them, through a reporter with `tracker` beside it."""
    reporter = TrackedReporter(Reporter(), [tracker])
    reporter.on_search_start(HEADER)
    for trial in trials:
        reporter.on_trial_start(trial.number, trial.params)
        reporter.on_trial_end(trial)
    reporter.on_search_end(RESULT)
    reporter.close(failed=False)
    return reporter


# --- TensorBoard --------------------------------------------------------------------------------


def event_accumulator(folder: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def texts(events: Any, tag: str) -> dict[int, str]:
    return {e.step: e.tensor_proto.string_val[0].decode() for e in events.Tensors(f"{tag}/text_summary")}


def test_tensorboard_logs_each_trial_and_the_answer(tmp_path: Path) -> None:
    from autotune.trackers.tensorboard import TensorBoardTracker

    feed(TensorBoardTracker(str(tmp_path / "tb")))
    folder = tmp_path / "tb" / STUDY
    events = event_accumulator(folder)
    tokens = {e.step: e.value for e in events.Scalars("trial/tokens_per_s")}
    assert tokens == {0: 1200.0, 1: 1500.0}  # the pruned trial measured no throughput
    assert {e.step: e.value for e in events.Scalars("trial/samples_per_s")} == {0: 37.5, 1: 46.875}
    peaks = {e.step: e.value for e in events.Scalars("trial/peak_memory_bytes")}
    assert peaks == {0: 400 * 2**20, 1: 500 * 2**20, 2: 900 * 2**20}
    trial_texts = texts(events, "trial")
    assert trial_texts[1].startswith("bs=8 prec=fp32: COMPLETE")
    assert trial_texts[2] == "bs=16 prec=fp32: PRUNED (infeasible: peak over the cap)"
    # the answer, at the step after the last trial
    assert texts(events, "answer/verdict") == {3: RESULT.answer.verdict}
    assert texts(events, "answer/chosen") == {3: "trial 1"}
    assert texts(events, "answer/config") == {3: "bs=8 prec=fp32"}
    answer = {
        tag: events.Scalars(f"answer/{tag}")[0].value for tag in ("speedup", "speedup_low", "speedup_high")
    }
    assert answer == pytest.approx({"speedup": 1.25, "speedup_low": 1.2, "speedup_high": 1.3})
    # each measured trial is a run of the HParams dashboard
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["trial-0", "trial-1"]
    hparams = event_accumulator(folder / "trial-1")
    assert hparams.Scalars("hparam/tokens_per_s")[0].value == 1500.0


# --- MLflow -------------------------------------------------------------------------------------


@pytest.fixture
def mlflow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A file store under `tmp_path` (MLflow 3 asks for the opt-in), read back by `MlflowClient`."""
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return MlflowClient(tracking_uri=uri)


def runs_of(client: Any, experiment: str) -> dict[str, Any]:
    found = client.get_experiment_by_name(experiment)
    return {r.info.run_name: r for r in client.search_runs([found.experiment_id])}


def test_mlflow_logs_the_search_as_a_run_and_each_trial_as_a_nested_run(mlflow_store: Any) -> None:
    from autotune.trackers.mlflow import MLflowTracker

    feed(MLflowTracker())
    runs = runs_of(mlflow_store, STUDY)
    assert sorted(runs) == sorted([STUDY, "trial 0", "trial 1", "trial 2"])
    search = runs[STUDY]
    assert search.info.status == "FINISHED"
    assert search.data.tags["autotune.model"] == "tiny-gpt2"
    assert search.data.tags["verdict"] == RESULT.answer.verdict
    assert search.data.tags["chosen"] == "trial 1"
    metrics = search.data.metrics
    assert metrics["speedup"] == 1.25 and metrics["speedup_low"] == 1.2 and metrics["speedup_high"] == 1.3
    assert metrics["baseline_tokens_per_s"] == 1184.0
    assert search.data.params == {"chosen.per_device_train_batch_size": "8", "chosen.precision": "fp32"}
    stored = Path(mlflow_store.download_artifacts(search.info.run_id, "answer.json"))
    assert json.loads(stored.read_text())["choice"]["trial"] == 1
    for trial in TRIALS:
        logged = runs[f"trial {trial.number}"]
        assert logged.data.tags["mlflow.parentRunId"] == search.info.run_id
        assert logged.data.params == {k: str(v) for k, v in trial.params.items()}
        assert logged.data.tags["state"] == trial.state
        assert logged.data.tags["reason"] == (trial.reason or "")
        if trial.tokens_per_s is not None:
            assert logged.data.metrics["tokens_per_s"] == trial.tokens_per_s
            assert logged.data.metrics["samples_per_s"] == trial.samples_per_s
        else:
            assert "tokens_per_s" not in logged.data.metrics
        assert logged.data.metrics["peak_memory_bytes"] == trial.peak_memory_bytes
    assert runs["trial 2"].info.status == "KILLED"  # pruned: it ended without a measurement


def test_a_search_that_raises_ends_its_mlflow_run_failed(mlflow_store: Any) -> None:
    config = RunConfig(report_to="mlflow")
    with pytest.raises(RuntimeError), tracking(config, Reporter()) as reporter:
        reporter.on_search_start(HEADER)
        reporter.on_trial_end(TRIALS[0])
        raise RuntimeError("the store went away")
    assert runs_of(mlflow_store, STUDY)[STUDY].info.status == "FAILED"


# --- Weights & Biases ---------------------------------------------------------------------------


def wandb_records(run_file: Path) -> list[Any]:
    """The records of a W&B run file: a LevelDB-style log (a 7-byte header, ``:W&B``, then 32 KiB
    blocks of chunks each with a 7-byte header: checksum, length, type), each record a
    ``wandb_internal_pb2.Record`` (W&B's own protocol buffers)."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    block, records, pending, offset = 32768, [], b"", 7
    while offset + 7 <= len(data):
        left = block - offset % block
        if left < 7:  # a block's tail too short for a header is padding
            offset += left
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + 7])
        chunk = data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
        if length == 0 and kind == 0:
            break
    return records


def item_key(item: Any) -> str:
    """A history or summary item's key: W&B writes a key with a slash as its parts."""
    return item.key or "/".join(item.nested_key)


def test_wandb_offline_logs_each_trial_and_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.trackers.wandb import WandbTracker

    monkeypatch.setenv("WANDB_MODE", "offline")  # nothing leaves this machine
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    feed(WandbTracker())
    import wandb

    wandb.teardown()  # W&B's service writes the run file behind the run: wait for it, as at exit
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    records = wandb_records(run_file)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.project, run.display_name, run.run_group, run.job_type) == (
        "autotune",
        STUDY,
        STUDY,
        "search",
    )
    rows = [
        {item_key(item): json.loads(item.value_json) for item in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    trials = {row["trial"]: row for row in rows if "trial" in row}
    assert sorted(trials) == [0, 1, 2]
    assert trials[1]["trial/tokens_per_s"] == 1500.0 and trials[1]["trial/precision"] == "fp32"
    assert trials[2]["trial/state"] == "PRUNED" and trials[2]["trial/reason"] == "infeasible"
    assert "trial/tokens_per_s" not in trials[2]
    assert any(row.get("trials/_type") == "table-file" for row in rows)  # the trials table, at the end
    summary: dict[str, Any] = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary |= {item_key(item): json.loads(item.value_json) for item in r.summary.update}
    assert summary["answer/verdict"] == RESULT.answer.verdict
    assert summary["answer/speedup"] == 1.25 and summary["answer/speedup_low"] == 1.2
    assert summary["answer/config/per_device_train_batch_size"] == 8
    (exit_record,) = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert exit_record.exit_code == 0


# --- failures, the option -------------------------------------------------------------------------


class Broken(Tracker):
    name = "broken"

    def __init__(self) -> None:
        self.logged: list[int] = []
        self.closed: list[bool] = []

    def trial(self, trial: TrialRecord) -> None:
        if trial.number == 1:
            raise ConnectionError("the server hung up\nmore detail")
        self.logged.append(trial.number)

    def close(self, failed: bool) -> None:
        self.closed.append(failed)


class Notes(Reporter):
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.ended: list[int] = []

    def on_note(self, text: str) -> None:
        self.notes.append(text)

    def on_trial_end(self, trial: TrialRecord) -> None:
        self.ended.append(trial.number)


def test_a_failing_tracker_is_said_once_and_left_out_while_the_search_goes_on() -> None:
    broken, kept, notes = Broken(), Broken(), Notes()
    kept.trial = lambda trial: kept.logged.append(trial.number)  # type: ignore[method-assign]
    reporter = TrackedReporter(notes, [broken, kept])
    reporter.on_search_start(HEADER)
    for trial in TRIALS:
        reporter.on_trial_end(trial)
    reporter.close(failed=False)
    assert notes.ended == [0, 1, 2]  # the caller's reporter saw everything
    assert notes.notes == [
        "the broken tracker failed to log a trial (the server hung up): the search goes on without it"
    ]
    assert broken.logged == [0] and broken.closed == [True]  # its run ended as failed, once
    assert kept.logged == [0, 1, 2] and kept.closed == [False]


def test_report_to_takes_names_as_the_trainer_does() -> None:
    assert RunConfig().report_to == ()
    assert RunConfig(report_to="none").report_to == ()
    assert RunConfig(report_to="WandB, mlflow").report_to == ("wandb", "mlflow")
    assert run_config(None, report_to=["tensorboard", "wandb,tensorboard"]).report_to == (
        "tensorboard",
        "wandb",
    )
    stored = RunConfig(report_to="mlflow,wandb").to_dict()
    assert RunConfig.from_dict(json.loads(json.dumps(stored))).report_to == ("mlflow", "wandb")
    with pytest.raises(UsageError, match="unknown tracker 'comet' in report_to") as info:
        RunConfig(report_to=["wandb", "comet"])
    assert info.value.field == "report_to"


def test_the_tracker_dir_is_stored_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert stored_paths(RunConfig(tracker_dir="tb"))["tracker_dir"] == str(tmp_path / "tb")
    assert stored_paths(RunConfig())["tracker_dir"] is None


def test_only_rank_zero_tracks(monkeypatch: pytest.MonkeyPatch) -> None:
    reporter = Reporter()
    monkeypatch.setenv("RANK", "1")
    with tracking(RunConfig(report_to="mlflow"), reporter) as got:
        assert got is reporter
    monkeypatch.setenv("RANK", "0")
    with tracking(RunConfig(report_to="tensorboard", tracker_dir="/nonexistent/never"), reporter) as got:
        assert isinstance(got, TrackedReporter)  # nothing opened before the search starts


def test_a_tracker_not_installed_is_refused_naming_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(autotune.trackers.MODULES, "wandb", ("no_such_module_for_autotune",))
    with pytest.raises(UsageError) as info:
        check_before_creating(RunConfig(report_to="mlflow,wandb"))
    assert str(info.value) == (
        "report_to=wandb needs the wandb library, which is not installed "
        "(pip install 'hf-autotune[wandb]', or drop wandb from report_to)"
    )


def test_a_tensorboard_folder_below_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"tracker_dir=.* is not a folder"):
        check_before_creating(RunConfig(report_to="tensorboard", tracker_dir=str(tmp_path / "file")))


# --- the command line ---------------------------------------------------------------------------


def test_the_flag_is_repeatable_and_comma_separated(calls: list[Any]) -> None:
    assert (
        run("search", "--report-to", "tensorboard,mlflow", "--report-to", "wandb", "--tracker-dir", "tb") == 0
    )
    assert calls[0].config.report_to == ("tensorboard", "mlflow", "wandb")
    assert calls[0].config.tracker_dir == "tb"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ("--report-to", "comet"),
            "unknown tracker 'comet' in --report-to (use tensorboard, mlflow, wandb or none)",
        ),
        (
            ("--report-to", "wandb"),
            "--report-to wandb needs the wandb library, which is not installed "
            "(pip install 'hf-autotune[wandb]', or drop wandb from --report-to)",
        ),
    ],
)
def test_a_bad_or_missing_tracker_is_one_line_exit_2_and_nothing_is_created(
    argv: tuple[str, ...],
    line: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(autotune.trackers.MODULES, "wandb", ("no_such_module_for_autotune",))
    monkeypatch.chdir(tmp_path)
    code = run("search", "--storage", f"sqlite:///{tmp_path / 'a.db'}", *argv)
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(line) and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []  # no store, no runs/, no wandb/
