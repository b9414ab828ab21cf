"""A store written before typed records (tests/fixtures/store_v0.db, main at ea2a049) still opens,
shows, exports, reports and resumes, and keeps what it held."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna
import pytest

from autotune.answer.decide import study_answer
from autotune.answer.model import KEEP_DEFAULTS, Answer
from autotune.cli import main
from autotune.records import read_study, read_trial
from autotune.schema import SCHEMA_VERSION
from autotune.store.session import StudyStore
from autotune.store.trials import measured_count

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "store_v0.db"
STUDY = "today"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def url(tmp_path: Path) -> str:
    copy = tmp_path / "old.db"
    shutil.copy(FIXTURE, copy)  # the fixture itself is never written
    return f"sqlite:///{copy}"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code in (0, None), captured.err
    return " ".join(captured.out.split())


def test_the_old_store_is_read_as_it_was_written(url: str) -> None:
    study = optuna.load_study(study_name=STUDY, storage=url)
    record = read_study(study)
    assert record.schema_version == 0 and record.answer is None
    assert record.baseline.measured and record.baseline.params["per_device_train_batch_size"] == 8
    assert sorted(f.number for f in record.finalists) == [-1, 1, 2]
    trials = [read_trial(t) for t in study.trials]
    assert all(t.tokens_per_s and t.memory.peak_bytes and t.training_args for t in trials)
    # Its answer was never stored: decided from its records, it keeps the defaults (its finalists
    # did not separate from the baseline), where the old code handed back trial 2's batch of 16.
    answer = study_answer(StudyStore(study))
    assert answer.rule == KEEP_DEFAULTS and answer.keeps_defaults
    assert answer.alternative is not None and answer.alternative.trial == 2


def test_the_old_store_shows_exports_and_reports(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert STUDY in _run(["studies", "--storage", url], capsys)
    shown = _run(["show", "--study", STUDY, "--storage", url], capsys)
    assert "answer: nothing beat the defaults measurably" in shown and "use: the defaults" in shown
    assert "alternative, not handed back: trial 2" in shown
    exported = json.loads(_run(["export", "--study", STUDY, "--storage", url, "--format", "json"], capsys))
    assert exported["training_args"]["per_device_train_batch_size"] == 8
    assert exported["expected"]["trial"] is None and exported["expected"]["remeasured"] is True
    for fmt in ("yaml", "flags", "accelerate", "python"):
        _run(["export", "--study", STUDY, "--storage", url, "--format", fmt], capsys)
    _run(["report", "--study", STUDY, "--storage", url, "--output", str(tmp_path / "report.html")], capsys)
    assert "use" in (tmp_path / "report.html").read_text()
    # Reading wrote nothing: the store is still a version 0 store.
    assert read_study(optuna.load_study(study_name=STUDY, storage=url)).schema_version == 0


def test_the_old_store_resumes_and_stores_its_answer(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = {t.number: dict(t.user_attrs) for t in optuna.load_study(study_name=STUDY, storage=url).trials}
    out = _run(["resume", "--study", STUDY, "--storage", url, "--trials", "4"], capsys)
    assert "answer:" in out
    study = optuna.load_study(study_name=STUDY, storage=url)
    record = read_study(study)
    assert record.schema_version == SCHEMA_VERSION and record.answer is not None
    assert Answer.from_dict(record.answer) == study_answer(StudyStore(study))
    # The old trials are untouched; the study now holds the new budget of measured trials.
    after = {t.number: dict(t.user_attrs) for t in study.trials}
    assert {n: after[n] for n in before} == before
    # the budget, and where the fastest changes the training math, the twin that keeps it
    twins = [t for t in study.trials if read_trial(t).twin_of is not None]
    assert len(after) > len(before) and measured_count(StudyStore(study)) == 4 + len(twins)
