"""`--backend ray`: one real search on a local Ray instance (started once for the module, by the
search itself), with one Ray trial whose actor dies mid-training.

Its trials land in the SQL study with autotune's user attrs, the dead one as a recorded result;
`export` works on the study; Ray's results hold no checkpoint and are deleted; no Ray process and
no Ray folder is left behind.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from transformers import TrainerCallback

import autotune
from autotune.cli import main
from autotune.run import ray_search
from autotune.study.store import measured_count
from tests.helpers import FAST, write_space

pytest.importorskip("ray")
pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]

SPACE = {"per_device_train_batch_size": [1, 2]}
RAY_DAEMONS = ("raylet", "gcs_server")


class DieOnce(TrainerCallback):
    """The first Ray trial to reach a training step kills its own process (its Ray actor): a crash
    Ray sees as an errored trial. A marker file makes it once across processes; the baseline and
    finalists (autotune worker processes, where Ray is not running) are left alone."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized() and not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            os._exit(3)


def _descendants(root: int) -> dict[int, str]:
    """pid -> command name of every process below `root`."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parents[int(entry)] = (int(stat[stat.rindex(")") + 2 :].split()[1]), name)
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, name) in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = name
                frontier.append(pid)
    return found


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One Ray search for the whole module (Ray starts in seconds and takes ~1 GiB)."""
    tmp = tmp_path_factory.mktemp("ray")
    seen: dict[str, Any] = {"results": [], "daemons": {}}
    home_results = Path.home() / "ray_results"
    results_before = sorted(os.listdir(home_results)) if home_results.exists() else None
    original_remove = ray_search.remove_results

    def remove_and_record(path: str) -> None:
        # Ray still runs here: note its daemons (to check they are gone after) and the results.
        seen["daemons"].update(
            {pid: name for pid, name in _descendants(os.getpid()).items() if name in RAY_DAEMONS}
        )
        seen["results"] += [str(p.relative_to(path)) for p in Path(path).rglob("*")]
        seen["results_dirs"] = [*seen.get("results_dirs", []), path]
        original_remove(path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ray_search, "remove_results", remove_and_record)
        result = autotune.search(
            model="tiny-gpt2",
            space=write_space(tmp, SPACE),
            storage=f"sqlite:///{tmp / 'ray.db'}",
            study="ray",
            seq_len=16,
            trials=2,
            measure=FAST,
            finalists=2,
            finalist_rounds=1,
            backend="ray",
            callbacks=[DieOnce(tmp / "died")],
        )
    seen.update(result=result, storage=f"sqlite:///{tmp / 'ray.db'}", died=tmp / "died")
    seen["results_before"] = results_before
    return seen


def test_trials_land_in_the_study_with_their_user_attrs(ray_run: dict[str, Any]) -> None:
    study = ray_run["result"].study
    assert measured_count(study) == 2
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert complete, [(t.number, t.state, t.user_attrs.get("message")) for t in study.trials]
    for trial in complete:
        attrs = trial.user_attrs
        assert attrs["feasible"] is True and attrs["trained"] is True
        assert trial.value == attrs["tokens_per_s"] > 0
        assert (
            attrs["training_args"]["per_device_train_batch_size"]
            == trial.params["per_device_train_batch_size"]
        )
        assert attrs["peak_memory_bytes"] > 0 and attrs["ray_trial_id"]
        # its owner was the Ray actor, not this process
        assert attrs["worker"]["pid"] != os.getpid()
        assert trial.system_attrs["constraints:memory"] == 0.0  # the same constraints as any trial
    assert "baseline" in study.user_attrs and "winner" in study.user_attrs  # it ended like any search


def test_a_dead_ray_trial_is_a_recorded_result(ray_run: dict[str, Any]) -> None:
    study = ray_run["result"].study
    died_pid = int(ray_run["died"].read_text())
    dead = [t for t in study.trials if t.user_attrs.get("worker", {}).get("pid") == died_pid]
    assert len(dead) == 1
    trial = dead[0]
    assert trial.state == optuna.trial.TrialState.FAIL
    assert trial.user_attrs["reason"] in ("crashed", "killed")
    assert (
        trial.user_attrs["message"].startswith("its Ray trial failed")
        or "Ray actor" in trial.user_attrs["message"]
    )
    assert trial.user_attrs["trained"] is True


def test_export_works_on_it(ray_run: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["export", "ray", "--storage", ray_run["storage"]])
    assert info.value.code in (0, None)
    exported = json.loads(capsys.readouterr().out)
    best = ray_run["result"].best
    assert (
        exported["training_args"]["per_device_train_batch_size"] == best.params["per_device_train_batch_size"]
    )
    assert exported["expected"]["trial"] == best.number


def test_no_checkpoint_and_nothing_left(ray_run: dict[str, Any]) -> None:
    assert ray_run["results"], "Ray wrote no results folder at all: the check below would prove nothing"
    assert not [p for p in ray_run["results"] if "checkpoint" in p.lower()]
    assert not [d for d in ray_run["results_dirs"] if os.path.exists(d)]
    home_results = Path.home() / "ray_results"
    after = sorted(os.listdir(home_results)) if home_results.exists() else None
    assert after == ray_run["results_before"]
    assert not [p for p in os.listdir("/tmp") if p.startswith("autotune-ray-")]
    assert set(ray_run["daemons"].values()) == set(RAY_DAEMONS)  # seen while Ray ran
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and [p for p in ray_run["daemons"] if os.path.exists(f"/proc/{p}")]:
        time.sleep(0.2)
    assert not [p for p in ray_run["daemons"] if os.path.exists(f"/proc/{p}")]
    import ray

    assert not ray.is_initialized()
