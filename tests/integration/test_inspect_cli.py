"""`autotune studies`, `show` and `resume` through the real command line, on a real stored study."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

import autotune
from autotune.cli import main
from autotune.store.session import StudyStore
from autotune.store.trials import measured_count
from tests.helpers import FAST_RUN, FakeOOM, write_space


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("inspect")
    storage = f"sqlite:///{folder / 'inspect.db'}"
    autotune.search(
        model="tiny-gpt2",
        space=write_space(folder, {"per_device_train_batch_size": [2, 8, 4]}),
        trials=2,
        storage=storage,
        study="inspect",
        seq_len=16,
        **FAST_RUN,
        callbacks=[FakeOOM(threshold=8)],
        enqueue=[{"per_device_train_batch_size": 8}, {"per_device_train_batch_size": 2}],
    )
    return {"storage": storage, "folder": folder}


def test_studies_lists_the_study(stored: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["studies", "--storage", stored["storage"]], capsys)
    assert code == 0
    assert "inspect" in out and "tiny-gpt2" in out
    assert "2 / 2" in out and "done" in out


def test_show_lists_trials_best_first_with_filters(
    stored: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(["show", "--study", "inspect", "--storage", stored["storage"]], capsys)
    assert code == 0
    assert "Trials of inspect (2)" in out
    assert out.index("│ 1 ") < out.index("│ 0 ")  # the completed trial ranks before the failed one
    assert "#0 oom: OutOfMemoryError" in out
    code, out, _ = run_cli(["show", "--study", "inspect", "--storage", stored["storage"], "--failed"], capsys)
    assert "Trials of inspect (1)" in out and "pruned (oom)" in out
    code, out, _ = run_cli(
        ["show", "--study", "inspect", "--storage", stored["storage"], "--feasible"], capsys
    )
    assert "Trials of inspect (1)" in out and "pruned" not in out


def test_show_errors_are_one_line_usage_errors(
    stored: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(
        ["show", "--study", "inspect", "--storage", stored["storage"], "--feasible", "--failed"], capsys
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "exclude each other" in err
    code, _, err = run_cli(["show", "--study", "nope", "--storage", stored["storage"]], capsys)
    assert code == 2 and "no study 'nope'" in err and "studies there: inspect" in err
    missing = f"sqlite:///{stored['folder'] / 'missing.db'}"
    code, _, err = run_cli(["show", "--study", "inspect", "--storage", missing], capsys)
    assert code == 2 and "does not exist" in err
    assert not (stored["folder"] / "missing.db").exists()  # reading never creates a store


def test_resume_reads_the_stored_run_configuration(
    stored: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # No --model/--space/--seq-len: they come from the store (a different sequence length would be
    # refused by the fingerprint check).
    code, out, err = run_cli(
        ["resume", "--study", "inspect", "--storage", stored["storage"], "--trials", "3"], capsys
    )
    assert code == 0, err
    assert "budget 3 trials: 2 done, 1 to run" in out
    study = optuna.load_study(study_name="inspect", storage=stored["storage"])
    assert measured_count(StudyStore(study)) == 3
    assert study.user_attrs["run_config"]["seq_len"] == 16
