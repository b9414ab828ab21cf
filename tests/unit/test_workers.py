"""Owners, worker slots, exit reasons and recovery: the pure parts of isolated workers."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from autotune.errors import UsageError
from autotune.executors.base import watchdog_seconds
from autotune.executors.forkserver import WorkerProcess
from autotune.executors.processes import Slot, worker_slots
from autotune.executors.torchrun import rank_exitcode as _rank_exitcode
from autotune.measure.memory_model import static_bytes
from autotune.space.availability import Hardware
from autotune.store.owner import Owner, is_alive, start_ticks, this_process
from autotune.store.session import StudyStore
from autotune.store.storage import open_storage
from autotune.store.trials import fail_interrupted_trials
from autotune.trial.feasibility import PastTrial, precheck


def _dead_child() -> Owner:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = start_ticks(child.pid)
    child.wait(timeout=30)
    return dataclasses.replace(this_process(), pid=child.pid, start_ticks=ticks)


def test_an_owner_is_alive_while_its_process_runs() -> None:
    me = this_process()
    assert is_alive(me)
    assert not is_alive(_dead_child())
    assert not is_alive(dataclasses.replace(me, start_ticks=(me.start_ticks or 0) + 1))  # a reused pid


def test_a_zombie_is_not_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = dataclasses.replace(this_process(), pid=child.pid, start_ticks=start_ticks(child.pid))
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
        assert not is_alive(owner)
    finally:
        child.wait(timeout=30)


def test_owner_attrs_round_trip_and_junk_is_no_owner() -> None:
    me = this_process()
    assert Owner.from_attrs({**me.to_dict(), "job": "abc"}) == me
    assert Owner.from_attrs(None) is None and Owner.from_attrs({"host": "x"}) is None


def _plan(hardware: Hardware) -> Any:
    return SimpleNamespace(hardware=hardware)


def test_cpu_workers_split_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4})
    cpu = _plan(Hardware())
    assert worker_slots(cpu, None) == [Slot()]  # one worker with the whole machine
    assert worker_slots(cpu, 2) == [Slot(cpu_cores=(0, 1)), Slot(cpu_cores=(2, 3))]
    with pytest.raises(UsageError, match=r"^workers=6 but 5 CPU core"):
        worker_slots(cpu, 6)


def test_gpu_workers_get_one_visible_device_each(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = _plan(Hardware(device="cuda", name="NVIDIA H100", count=2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert worker_slots(gpus, None) == [Slot(cuda_device="3"), Slot(cuda_device="5")]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert [s.cuda_device for s in worker_slots(gpus, 1)] == ["0"]
    with pytest.raises(UsageError, match=r"^workers=3 but 2 GPU"):
        worker_slots(gpus, 3)


def test_gpu_pools_of_torchrun_groups_get_disjoint_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --workers N --nproc-per-node M each group sees M GPUs of its own: two 2-rank workers
    on a 4-GPU host never measure on the same devices."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    four = _plan(Hardware(device="cuda", name="NVIDIA H100", count=4))
    assert [s.cuda_device for s in worker_slots(four, 2, devices_per_job=2)] == ["0,1", "2,3"]
    assert [s.cuda_device for s in worker_slots(four, None, devices_per_job=2)] == ["0,1", "2,3"]
    assert [s.cuda_device for s in worker_slots(four, 1, devices_per_job=4)] == ["0,1,2,3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7,1,2")  # as the user restricted them
    assert [s.cuda_device for s in worker_slots(four, None, devices_per_job=3)] == ["4,5,6", "7,1,2"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(
        UsageError, match=r"^workers=3 x nproc_per_node=2 needs 6 GPUs but 4 are visible"
    ) as info:
        worker_slots(four, 3, devices_per_job=2)
    assert "workers=2 or fewer" in str(info.value) and info.value.exit_code == 2


def test_a_torchrun_group_is_shown_only_its_slots_devices() -> None:
    from autotune.executors.torchrun import _visible

    assert _visible("2,3") == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert _visible(None) == {}  # CPU, or as inherited


def _ended(exitcode: int | None, hung: bool = False, log: Path | None = None) -> Any:
    worker = WorkerProcess.__new__(WorkerProcess)
    worker.process = SimpleNamespace(exitcode=exitcode)
    worker.hung = hung
    worker.watchdog_s = watchdog_seconds(10)
    worker.job = SimpleNamespace(log_path=str(log) if log else None)
    return worker.exit_failure()


def test_exit_reasons(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text("loading\nFatal Python error: Segmentation fault\n")
    assert _ended(0) is None
    killed = _ended(-signal.SIGKILL)
    assert killed.reason == "killed" and "SIGKILL" in killed.message and "out-of-memory" in killed.message
    assert _ended(-signal.SIGTERM).reason == "killed"
    crashed = _ended(-signal.SIGSEGV, log=log)
    assert crashed.reason == "crashed" and "SIGSEGV" in crashed.message
    assert "Segmentation fault" in crashed.message  # the log's tail says what happened
    assert _ended(-signal.SIGABRT).reason == "crashed"
    assert "exited with code 3" in _ended(3).message
    hung = _ended(-signal.SIGKILL, hung=True)
    assert hung.reason == "hung" and "watchdog" in hung.message


def test_the_watchdog_allows_the_trial_timeout_and_a_grace() -> None:
    assert watchdog_seconds(900) == 900 + 120
    assert watchdog_seconds(4) == 4 + 5


def test_torchrun_rank_exit_code_is_read_from_its_log(tmp_path: Path) -> None:
    log = tmp_path / "group.log"
    log.write_text("Root Cause (first observed failure):\n  exitcode  : -11 (pid: 123)\n")
    assert _rank_exitcode(str(log)) == -11
    assert _rank_exitcode(None) is None


def test_a_running_twin_makes_a_trial_yield() -> None:
    params = {"per_device_train_batch_size": 8}
    twin = PastTrial(3, dict(params), None)
    assert precheck(params, [], lambda: None, None, running=[twin]) == ("duplicate_running", twin)
    assert precheck(params, [], lambda: None, None, running=[PastTrial(4, {"x": 1}, None)]) is None


def test_ddp_adds_gradient_buckets_to_the_estimate() -> None:
    assert static_bytes(1000, "fp32", "adamw_torch", 2) - static_bytes(1000, "fp32", "adamw_torch") == (
        1000 * 4  # an fp32 gradient per parameter
    )


def test_dead_local_owners_are_failed_at_once(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'owners.db'}")
    study = optuna.create_study(storage=storage, study_name="owners", direction="maximize")
    dead, alive = study.ask(), study.ask()
    remote = study.ask()
    dead.set_user_attr("worker", _dead_child().to_dict())
    alive.set_user_attr("worker", this_process().to_dict())
    remote.set_user_attr("worker", {"host": "another-host", "pid": 1, "start_ticks": 1})
    storage.record_heartbeat(remote._trial_id)  # a fresh heartbeat: its process may be running
    assert fail_interrupted_trials(StudyStore(study)) == [dead.number]  # no waiting for a stale heartbeat
    failed = study.trials[dead.number]
    assert failed.state == optuna.trial.TrialState.FAIL and failed.user_attrs["reason"] == "interrupted"
    assert failed.user_attrs["trained"] is False
    states = {t.number: t.state for t in study.trials}
    assert states[alive.number] == states[remote.number] == optuna.trial.TrialState.RUNNING
