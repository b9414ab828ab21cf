"""`--backend ray` without starting Ray: flags reach the config, bad combinations are one-line
usage errors, resources per trial, and how a dead Ray trial's error becomes a reason."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from autotune.errors import UsageError
from autotune.executors import ray as ray_search
from autotune.options import RunConfig
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


# Ray 2.60's error file of an actor killed with SIGKILL (an os._exit or a segfault reads the same).
SIGKILLED = """Failure # 1 (occurred at 2026-11-26_07-12-29)
The actor died unexpectedly before finishing this task.
\tclass_name: ImplicitFunc
\tactor_id: 408844928402cbfa003efe2001000000
\tpid: 10705
\tnamespace: 0c3a5b51-3b6c-4eb6-b189-cd5427ee9578
\tip: 192.0.2.2
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit \
detail: Worker unexpectedly exits with a connection error code 2. End of file. Some common causes \
include: (1) the process was killed by the OOM killer due to high memory usage, (2) ray stop --force \
was called, or (3) the worker crashed unexpectedly due to SIGSEGV or another unexpected error.
"""
# ... and of a Python error raised in the actor: no "Traceback" line, a coloured header.
RAISED = """Failure # 1 (occurred at 2026-11-26_07-13-18)
\x1b[36mray::ImplicitFunc.train()\x1b[39m (pid=11453, ip=192.0.2.2, actor_id=13a0e84, repr=f)
  File "/venv/ray/tune/trainable/function_trainable.py", line 249, in _trainable_func
    output = fn()
             ^^^^
  File "/tmp/trainable.py", line 15, in f
    raise ValueError("boom")
ValueError: boom
"""


def test_a_sigkilled_actor_is_killed_with_rays_text_kept_apart() -> None:
    failed = ray_search.failure_of(SIGKILLED)
    assert failed.reason == "killed"
    assert failed.message.startswith("its Ray actor's process (pid 10705) ended without a Python error")
    assert "Failure #" not in failed.message and "\n" not in failed.message
    assert failed.ray_error == SIGKILLED


def test_a_python_error_in_the_actor_is_crashed_with_its_last_line() -> None:
    failed = ray_search.failure_of(RAISED)
    assert (failed.reason, failed.message) == ("crashed", "its Ray trial failed: ValueError: boom")
    assert failed.ray_error == RAISED
    traceback = "ray::f (pid=1)\nTraceback (most recent call last):\n  x\nRuntimeError: bad"
    assert ray_search.failure_of(traceback).message.endswith("RuntimeError: bad")


def test_other_ray_failures_are_crashed_with_their_first_line() -> None:
    memory = "Failure # 1 (occurred at x)\nTask was killed due to the node running low on memory.\n"
    assert ray_search.failure_of(memory).reason == "killed"
    other = ray_search.failure_of("Failure # 1 (occurred at x)\nThe trial could not be placed\n")
    assert (other.reason, other.message) == ("crashed", "its Ray trial failed: The trial could not be placed")
    empty = ray_search.failure_of("")
    assert empty.reason == "crashed" and empty.ray_error is None


def test_rays_error_file_is_read_whole(tmp_path: Any) -> None:
    error_file = tmp_path / "error.txt"
    error_file.write_text(SIGKILLED)
    trial = SimpleNamespace(get_pickled_error=lambda: None, error_file=str(error_file))
    assert ray_search._error_text(trial) == SIGKILLED.strip()
    died = SimpleNamespace(get_pickled_error=lambda: None, error_file=None)
    assert ray_search._error_text(died) == ""


def test_rays_text_is_stored_in_its_own_attribute() -> None:
    from autotune.records import trial_record
    from autotune.store.outcomes import TrialOutcome

    attrs = TrialOutcome.process_ended("killed", "one line", ray_error=SIGKILLED).user_attrs(None)
    assert attrs["message"] == "one line" and attrs["ray_error"] == SIGKILLED
    assert trial_record(0, {}, "FAIL", attrs).failure.ray_error == SIGKILLED
    assert "ray_error" not in TrialOutcome.process_ended("killed", "one line").user_attrs(None)


def test_dead_worker_notices_stay_off_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from ray._private import worker as ray_worker

    notice = "A worker died or was killed while executing a task by an unexpected system error."
    with ray_search.no_dead_worker_notices():
        for line in (notice, "No node can hold 4 GPUs"):
            ray_worker.print_to_stdstream({"lines": [line], "pid": "raylet", "is_err": False}, False)
    out = capsys.readouterr().out
    assert "A worker died" not in out and "No node can hold 4 GPUs" in out
    assert ray_worker.print_to_stdstream.__name__ == "print_to_stdstream"  # put back


def test_a_relative_sqlite_file_is_made_absolute_for_the_actors(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert ray_search._absolute("sqlite:///ray.db") == f"sqlite:///{tmp_path / 'ray.db'}"
    assert ray_search._absolute("sqlite:////abs/ray.db") == "sqlite:////abs/ray.db"
    assert ray_search._absolute("postgresql://u:p@h/db") == "postgresql://u:p@h/db"
