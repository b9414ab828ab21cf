"""The study's shared compile cache, and the search's time accounted, on real tiny searches."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest

import autotune
from autotune.answer.decide import study_answer
from autotune.cli import main
from autotune.export.config import export_config
from autotune.export.words import expected_lines
from autotune.progress import describe_time_breakdown
from autotune.records import read_study, read_trial
from autotune.store.objective import compile_s, run_compile_s
from autotune.store.session import StudyStore
from tests.helpers import FAST_RUN, write_space

pytestmark = pytest.mark.timeout(600)


def only_trial(storage: str, study: str) -> optuna.trial.FrozenTrial:
    trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    assert len(trials) == 1
    return trials[0]


def test_a_second_search_hits_the_cache_of_a_configuration_already_measured(tmp_path: Path) -> None:
    common: dict[str, Any] = dict(
        model="tiny-gpt2",
        # One compiled configuration: both searches measure the same graphs.
        space=write_space(tmp_path, {"torch_compile": ["inductor"], "per_device_train_batch_size": [2]}),
        trials=1,
        storage=f"sqlite:///{tmp_path / 'cache.db'}",
        seq_len=16,
        **FAST_RUN,
    )
    autotune.search(study="cold", **common)
    cold = only_trial(common["storage"], "cold")
    assert cold.state == optuna.trial.TrialState.COMPLETE, cold.user_attrs.get("message")
    assert cold.user_attrs["compile_cache"] in ("miss", "partial")  # a fresh folder
    assert cold.user_attrs["compile_s"] > 0
    assert (tmp_path / "cache.db.compile-cache" / "fxgraph").is_dir()  # next to the store

    autotune.search(study="warm", **common)  # another study of the same store: the same cache
    warm = only_trial(common["storage"], "warm")
    assert warm.state == optuna.trial.TrialState.COMPLETE, warm.user_attrs.get("message")
    assert warm.user_attrs["compile_cache"] == "hit"
    assert warm.user_attrs["compile_s"] > 0  # dynamo still traces: only compiled code is cached
    # A user's run compiles cold: the warm trial carries the cold trial's figure for predictions.
    assert cold.user_attrs["compile_cold_s"] == pytest.approx(compile_s(read_trial(cold)))
    assert warm.user_attrs["compile_cold_s"] == pytest.approx(cold.user_attrs["compile_cold_s"])
    assert run_compile_s(read_trial(warm)) == pytest.approx(cold.user_attrs["compile_cold_s"])


@pytest.mark.usefixtures("roomy_finalists")  # both trials in the rounds, whatever the machine
def test_the_search_stores_its_time_breakdown_and_show_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = f"sqlite:///{tmp_path / 'time.db'}"
    autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, {"per_device_train_batch_size": [1, 2]}),
        trials=2,
        storage=storage,
        study="time",
        seq_len=16,
        **{**FAST_RUN, "measure_baseline": True, "finalists": 2, "finalist_rounds": 1},
    )
    study = optuna.load_study(study_name="time", storage=storage)
    for trial in study.trials:
        assert trial.user_attrs["setup_s"] > 0
        # Nothing compiled: no cache verdict is stored.
        assert trial.user_attrs["compile_s"] == 0.0 and read_trial(trial).compile.cache is None
    # The first worker's probe of the memory estimate is kept for the next ones (one kind here).
    assert list(read_study(study).activation_probes or {}) == ["cpu|sdpa|fp32|0"]
    breakdown = study.user_attrs["time_breakdown"]
    phases = breakdown["phases"]
    assert set(phases) == {"setup_s", "compile_s", "warmup_s", "window_s", "screening_s", "between_s"}
    assert all(seconds >= 0 for seconds in phases.values())
    assert breakdown["slots"] == 1
    assert math.fsum(phases.values()) == pytest.approx(breakdown["wall_s"], abs=1e-6)
    assert phases["window_s"] > 0 and phases["setup_s"] > 0
    assert 0 < breakdown["measured_share"] < 1
    # The two trials, the baseline's two measurements (a warming one, then the one stored), and
    # every measurement of the finalists' rounds (the two trials and the baseline twice, its A/A
    # pair, in each round they were measured in).
    rounds = [len(f["rounds"]) for f in study.user_attrs["finalists"]]
    numbers = sorted(f["number"] for f in study.user_attrs["finalists"])
    assert numbers[:2] == [-2, -1] and len(numbers) == 4 and min(numbers[2:]) >= 0
    assert breakdown["jobs"] == 4 + sum(rounds)
    assert breakdown["by_stage"]["finalists"]["measurements"] == sum(rounds)
    stages = breakdown["stages"]
    assert all(stages[name] > 0 for name in ("baseline_s", "search_s", "finalists_s"))
    assert math.fsum(stages.values()) <= breakdown["wall_s"]
    # The export of the study's answer (the defaults or a trial) carries it, and says it in the lines
    # the yaml/accelerate/python formats begin with.
    config = export_config(StudyStore(study), study_answer(StudyStore(study)))
    assert config["expected"]["search_time"] == breakdown
    assert describe_time_breakdown(breakdown) in expected_lines(config)

    with pytest.raises(SystemExit) as exit_info:
        main(["show", "--study", "time", "--storage", storage])
    out, _ = capsys.readouterr()
    assert exit_info.value.code in (0, None)
    assert "Time of the last search" in out and "measured" in out
    for phase in ("set-up", "compile", "warm-up", "measured windows", "between trials", "finalists"):
        assert phase in out
