"""The load and scale benchmarks (benchmarks/pool_load.py, benchmarks/large_store.py): each renders
its committed JSON into its committed RESULTS.md section, and the large store is written as optuna
reads it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from benchmarks import large_store, pool_load

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize("module", [pool_load, large_store], ids=["pool_load", "large_store"])
def test_the_section_lands_in_the_reliability_section_of_results_md(module: Any) -> None:
    section = module.render(json.loads(module.RESULTS.read_text()))
    out = (BENCHMARKS / "RESULTS.md").read_text()
    after = out[out.index("## Reliability\n") :]
    assert section in after and after.index(section) < after.index("\n## ", 1)


def test_a_failed_pool_check_is_shown_as_failed() -> None:
    results = json.loads(pool_load.RESULTS.read_text())
    broken = copy.deepcopy(results)
    broken["checks"]["budget_exact"] = False
    broken["study"]["measured"] = results["trials"] + 1
    text = pool_load.render(broken)
    assert f"| **no**: {results['trials'] + 1} measured of {results['trials']}" in text
    assert pool_load.OVER_BUDGET in text
    exact = copy.deepcopy(results)
    exact["checks"]["budget_exact"] = True
    assert pool_load.OVER_BUDGET not in pool_load.render(exact)


def _template(url: str) -> None:
    """A small template study: three measured trials on a 2 x 3 space, study attrs as a search
    writes them (a run configuration among them)."""
    study = optuna.create_study(storage=url, study_name=large_store.TEMPLATE, direction="maximize")
    study.set_user_attr("run_config", {"trials": 3, "finalists": 3, "whole_run_check": True})
    study.set_user_attr("space", {"knobs": {"a": [1, 2], "b": ["x", "y", "z"]}})
    distributions = {
        "a": optuna.distributions.CategoricalDistribution((1, 2)),
        "b": optuna.distributions.CategoricalDistribution(("x", "y", "z")),
    }
    for index, params in enumerate([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 1, "b": "z"}]):
        attrs = {"trained": True, "tokens_per_s": 100.0 + index, "samples_per_s": 10.0, "worker": {"pid": 1}}
        study.add_trial(
            optuna.trial.create_trial(
                params=params, distributions=distributions, value=100.0 + index, user_attrs=attrs
            )
        )


def test_the_large_store_is_written_as_optuna_reads_it(tmp_path: Path) -> None:
    template = f"sqlite:///{tmp_path / 'template.db'}"
    _template(template)
    url = f"sqlite:///{tmp_path / 'large.db'}"
    written = large_store.fill(url, template, trials=8)  # the space has 6 combinations
    assert (written["trials"], written["copied_from_template"], written["reused"]) == (8, 3, 2)
    assert written["space_size"] == 6
    study = optuna.load_study(study_name=large_store.STUDY, storage=url)
    trials = study.get_trials()
    assert [t.number for t in trials] == list(range(8))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert len({json.dumps(t.params, sort_keys=True) for t in trials[:6]}) == 6  # every combination once
    copied = optuna.load_study(study_name=large_store.TEMPLATE, storage=template).trials
    assert [(t.params, t.value, t.user_attrs) for t in trials[:3]] == [
        (t.params, t.value, t.user_attrs) for t in copied
    ]
    for trial in trials[3:6]:  # the template's attributes, its throughput scaled down
        assert set(trial.user_attrs) == set(copied[0].user_attrs)
        assert trial.user_attrs["worker"] == {"pid": 1} and trial.user_attrs["trained"] is True
        assert 0.5 * 100 <= trial.value < 102
        assert trial.value == pytest.approx(trial.user_attrs["tokens_per_s"])
        assert trial.distributions == copied[0].distributions
    for trial in trials[6:]:  # past the space: repeats, recorded as reused
        source = trials[trial.user_attrs["duplicate_of"]]
        assert source.number >= 3 and source.params == trial.params
        assert trial.user_attrs["trained"] is False and source.user_attrs["trained"] is True
    assert study.best_trial.number == 2  # the template's best stays the best
    run_config = study.user_attrs["run_config"]
    assert (run_config["trials"], run_config["finalists"], run_config["whole_run_check"]) == (8, 0, False)
    assert study.user_attrs["space"] == {"knobs": {"a": [1, 2], "b": ["x", "y", "z"]}}
