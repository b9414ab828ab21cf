"""The whole-run check in real searches: before the answer is final, the winner and the defaults run
once as a whole run does (the longest batch, an evaluation step, a checkpoint save) under the cap.

Step times are set by a test hook (`FixedStepTime`), so which trials are the finalists is known;
another hook (`EvalMemory`) makes the first evaluation step, the winner's, peak over the cap.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

import autotune
from autotune.cli import main
from autotune.records import read_study
from autotune.store.outcomes import WHOLE_RUN_OVER_CAP
from tests.helpers import FAST, IN_PROCESS, EvalMemory, FixedStepTime, write_space
from tests.local_models import write_model

pytestmark = pytest.mark.timeout(600)

CAP = 2 * 2**30
WINNER = {"optim": "adamw_torch", "activation_checkpointing": True}
NEXT = {"optim": "adamw_torch", "activation_checkpointing": False}


@pytest.mark.usefixtures("roomy_finalists")
def test_a_winner_whose_evaluation_goes_over_the_cap_falls_to_the_next_finalist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # WINNER and NEXT run 4x and 2x faster than the other configurations: they are the finalists.
    # The first evaluation of the search, the whole-run check of the finalists' winner (no
    # baseline: the answer is a trial), holds memory past the cap: only the check evaluates.
    hook = FixedStepTime(0.6, by_params=[(WINNER, 0.15), (NEXT, 0.3)])
    space = {"optim": ["adamw_torch_fused", "adamw_torch"], "activation_checkpointing": [False, True]}
    url = f"sqlite:///{tmp_path / 'whole.db'}"
    out = io.StringIO()
    result = autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, space),
        trials=4,
        storage=url,
        seq_len=16,
        measure=FAST,
        finalists=2,
        finalist_rounds=2,
        measure_baseline=False,
        memory_cap=f"{CAP}B",
        callbacks=[hook, EvalMemory(CAP, str(tmp_path / "evaluated"))],  # in worker processes
        reporter=autotune.RichReporter(Console(file=out, width=400, color_system=None)),
    )
    record = read_study(result.study)
    finalists = {f.number for f in record.finalists}
    checks = record.whole_run
    assert [c.trial in finalists for c in checks] == [True, True], out.getvalue()[-3000:]
    failed, passed = checks
    trials = {t.number: t for t in result.trials}
    # The first winner is recorded as whole_run_over_cap, with the step that failed.
    first = trials[failed.trial]  # type: ignore[index]
    assert first.reason == WHOLE_RUN_OVER_CAP and first.feasible is False
    assert first.whole_run is not None and first.whole_run.failed_step == "eval"
    assert first.whole_run.step_peaks["eval"] > CAP >= first.whole_run.step_peaks["train"]
    assert "eval step" in (first.message or "")
    # The answer is the next finalist, checked in turn, with its whole-run peak and headroom.
    answer = result.answer
    assert answer.choice is not None and answer.choice.trial == passed.trial != failed.trial
    check = answer.whole_run
    assert check is not None and check.fits is True and check.trial == passed.trial
    assert set(check.step_peaks) == {"train", "eval", "save"}
    assert check.peak_bytes is not None and check.headroom_bytes == CAP - check.peak_bytes > 0
    assert f"trial {failed.trial} failed its whole-run check" in (answer.whole_run_note or "")
    printed = " ".join(out.getvalue().split())
    assert "whole run: peak" in printed and "under the memory cap of 2.00 GiB" in printed
    # The export carries the whole-run peak and the headroom.
    with pytest.raises(SystemExit) as exited:
        main(["export", "--study", result.study.study_name, "--storage", url, "--format", "json"])
    assert exited.value.code in (0, None)
    expected = json.loads(capsys.readouterr().out)["expected"]
    assert expected["trial"] == passed.trial
    assert expected["whole_run_peak_bytes"] == check.peak_bytes
    assert expected["whole_run_headroom_bytes"] == check.headroom_bytes
    with pytest.raises(SystemExit):
        main(["export", "--study", result.study.study_name, "--storage", url, "--format", "yaml"])
    assert "# whole run: peak" in capsys.readouterr().out


LONG = 200  # words in the one long text (a word is one token): truncated to SEQ_LEN
SEQ_LEN = 32


@pytest.fixture(scope="module")
def long_text(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    # Short texts of 3 words, and one of LONG words last: no trial's window reaches it.
    folder = tmp_path_factory.mktemp("long")
    model = write_model(folder / "model")
    data = folder / "texts.txt"
    data.write_text("the model trains\n" * 300 + " ".join(["data"] * LONG) + "\n")
    return model, data


def _search(folder: Path, model: Path, data: Path, name: str, **options: object) -> autotune.SearchResult:
    return autotune.search(
        model=str(model),
        dataset=str(data),
        packing="examples",
        space=write_space(folder, {"per_device_train_batch_size": [4]}),
        trials=1,
        storage=f"sqlite:///{folder / f'{name}.db'}",
        seq_len=SEQ_LEN,
        **{**IN_PROCESS, **options},
    )


def test_the_check_trains_the_longest_batch_of_the_data(tmp_path: Path, long_text: tuple[Path, Path]) -> None:
    result = _search(tmp_path, *long_text, "longest", eval_batch_size=2, whole_run_check=True)
    check = result.answer.whole_run
    assert check is not None and check.fits is True, result.answer
    # the optimizer step ran on the long text (truncated to seq_len) beside the next longest
    assert check.train_tokens == SEQ_LEN and check.train_samples == 4
    assert check.eval_samples == 2 and set(check.step_peaks) == {"train", "eval", "save"}
    assert check.cap_bytes is None and check.headroom_bytes is None  # no cap: the peak alone
    assert result.trials[0].measurement.padding_fraction == 0.0  # the window never met it


def test_no_whole_run_check_skips_it(tmp_path: Path, long_text: tuple[Path, Path]) -> None:
    result = _search(tmp_path, *long_text, "skipped", whole_run_check=False)
    assert result.answer.choice is not None and result.answer.whole_run is None
    assert result.answer.whole_run_note == "no whole-run check (--no-whole-run-check)"
    assert read_study(result.study).whole_run == ()
