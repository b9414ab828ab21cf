"""`--backend ray` without starting Ray: flags reach the config, bad combinations are one-line
usage errors, resources per trial, and how a dead Ray trial's error becomes a reason."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from autotune.config import RunConfig
from autotune.errors import UsageError
from autotune.executors import ray as ray_search
from tests.unit.cli_helpers import run


def test_backend_flags_reach_the_config(calls: list[SimpleNamespace]) -> None:
    run("search", "--backend", "ray", "--ray-address", "10.0.0.5:6379")
    assert calls[-1].config.backend == "ray"
    assert calls[-1].config.ray_address == "10.0.0.5:6379"
    run("search")
    assert calls[-1].config.backend == "optuna" and calls[-1].config.ray_address is None


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["--backend", "ray", "--isolation", "none"], "--backend ray runs trials in Ray actors"),
        (["--backend", "ray", "--workers", "2"], "--workers 2 does not apply with --backend ray"),
        (["--ray-address", "h:6379"], "--ray-address only applies with --backend ray"),
        (["--backend", "dask"], "--backend must be 'optuna' or 'ray', got 'dask'"),
    ],
)
def test_bad_combinations_exit_2_on_one_line(
    calls: list[SimpleNamespace], capsys: pytest.CaptureFixture[str], argv: list[str], pattern: str
) -> None:
    assert run("search", *argv) == 2
    err = capsys.readouterr().err.strip()
    assert pattern in err and "\n" not in err and "Traceback" not in err
    assert not calls


def test_config_checks_the_backend() -> None:
    with pytest.raises(UsageError, match="isolation='none'") as info:
        RunConfig(backend="ray", isolation="none")
    assert info.value.fields == ("backend", "isolation")
    config = RunConfig(backend="ray", ray_address="ray://head:10001", storage="sqlite:///x.db")
    assert RunConfig.from_dict(config.to_dict()) == config  # stored with the study, for resume


def _nodes(*resources: dict[str, float], dead: dict[str, float] | None = None) -> list[dict[str, Any]]:
    nodes = [{"Alive": True, "Resources": r} for r in resources]
    return nodes + ([{"Alive": False, "Resources": dead}] if dead else [])


def test_a_trial_takes_a_whole_cpu_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_search.ray, "nodes", lambda: _nodes({"CPU": 16.0}, {"CPU": 8.0}, dead={"CPU": 2}))
    assert ray_search.trial_resources() == {"cpu": 8}  # the smallest live machine can run one


def test_a_trial_takes_one_gpu_with_its_share_of_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = _nodes({"CPU": 32.0, "GPU": 8.0}, {"CPU": 16.0, "GPU": 2.0}, {"CPU": 64.0})
    monkeypatch.setattr(ray_search.ray, "nodes", lambda: nodes)
    assert ray_search.trial_resources() == {"cpu": 4, "gpu": 1}


def test_a_dead_ray_trial_gets_a_reason() -> None:
    assert ray_search._reason("The actor died unexpectedly: killed by SIGKILL")[0] == "killed"
    reason, message = ray_search._reason("RuntimeError: boom")
    assert reason == "crashed" and message.endswith("RuntimeError: boom")


def test_the_error_line_of_a_python_failure_is_its_last(tmp_path: Any) -> None:
    text = "ray::ImplicitFunc.train() (pid=1)\nTraceback (most recent call last):\n  File x\nValueError: bad"
    trial = SimpleNamespace(get_pickled_error=lambda: RuntimeError(text), error_file=None)
    assert ray_search._error_text(trial) == "ValueError: bad"
    died = SimpleNamespace(get_pickled_error=lambda: None, error_file=None)
    assert ray_search._error_text(died) == "the Ray trial failed without an error message"


def test_a_relative_sqlite_file_is_made_absolute_for_the_actors(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert ray_search._absolute("sqlite:///ray.db") == f"sqlite:///{tmp_path / 'ray.db'}"
    assert ray_search._absolute("sqlite:////abs/ray.db") == "sqlite:////abs/ray.db"
    assert ray_search._absolute("postgresql://u:p@h/db") == "postgresql://u:p@h/db"
