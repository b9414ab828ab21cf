"""Trial owners: who may judge an owner dead by its pid (same boot and PID namespace), and who
waits for its heartbeat (another host, boot or namespace; records from older autotune)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from autotune.store import owner as owner_module
from autotune.store.owner import (
    Owner,
    is_alive,
    is_dead_here,
    is_local,
    member_seed,
    start_ticks,
    this_boot,
    this_pid_namespace,
    this_process,
)
from autotune.store.session import StudyStore
from autotune.store.storage import open_storage
from autotune.store.trials import fail_interrupted_trials, orphaned_trials
from tests.unit.cli_helpers import run

ROOT = Path(__file__).resolve().parents[2]


def _dead_child() -> Owner:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = start_ticks(child.pid)
    child.wait(timeout=30)
    return dataclasses.replace(this_process(), pid=child.pid, start_ticks=ticks)


def test_this_process_records_its_boot_and_pid_namespace() -> None:
    me = this_process()
    assert me.boot_id == this_boot() and me.boot_id
    assert me.pid_ns == this_pid_namespace() and me.pid_ns.startswith("pid:[")  # type: ignore[union-attr]
    assert is_local(me) and is_alive(me) and not is_dead_here(me)


def test_a_dead_owner_of_this_boot_and_namespace_is_dead_here() -> None:
    me = this_process()
    assert is_dead_here(_dead_child())
    assert is_dead_here(dataclasses.replace(me, start_ticks=(me.start_ticks or 0) + 1))  # a reused pid


def test_the_host_name_does_not_decide() -> None:
    # A container with --pid=host has its own host name and our pids: judged here all the same.
    assert is_dead_here(dataclasses.replace(_dead_child(), host="another-name"))


@pytest.mark.parametrize(
    "change",
    [
        {"boot_id": "00000000-0000-0000-0000-000000000000"},  # another boot, or another host
        {"pid_ns": "pid:[1]"},  # another PID namespace: a container on this host
        {"host": "another-host", "boot_id": "another-boot", "pid_ns": "pid:[2]"},
        {"boot_id": None, "pid_ns": None},  # an owner record from older autotune
        {"pid_ns": None},  # the owner could not tell its namespace
    ],
    ids=["other-boot", "other-namespace", "other-host", "old-record", "unknown-namespace"],
)
def test_owners_from_elsewhere_are_never_dead_here(change: dict[str, str | None]) -> None:
    owner = dataclasses.replace(_dead_child(), **change)  # type: ignore[arg-type]
    assert not is_local(owner) and not is_dead_here(owner)


def test_no_namespace_where_proc_belongs_to_another(monkeypatch: pytest.MonkeyPatch) -> None:
    # `unshare --pid --fork` without --mount-proc: /proc lists the parent namespace's pids.
    monkeypatch.setattr(owner_module.os, "getpid", lambda: 1)
    assert this_pid_namespace() is None
    assert not is_dead_here(Owner("h", 123, 1, this_boot(), "pid:[4026531836]"))


def test_owner_records_round_trip_and_old_ones_read_without_boot_and_namespace() -> None:
    me = this_process()
    assert Owner.from_attrs({**me.to_dict(), "job": "abc"}) == me
    old = Owner.from_attrs({"host": "h", "pid": 7, "start_ticks": 9})
    assert old == Owner("h", 7, 9, None, None)
    assert Owner.from_attrs(None) is None and Owner.from_attrs({"host": "x"}) is None


def test_member_seeds_differ_by_identity_and_are_reproducible() -> None:
    me = this_process()
    assert member_seed(0, me.identity) == member_seed(0, me.identity)
    assert member_seed(0, "a") != member_seed(0, "b")
    assert member_seed(0, "a") != member_seed(1, "a")
    assert member_seed(0, "worker-1") == 28829633  # the same on every host and Python version
    seeds = {member_seed(0, f"container-{i}") for i in range(100)}
    assert len(seeds) == 100 and all(0 <= s < 2**31 for s in seeds)
    assert dataclasses.replace(me, pid=me.pid + 1).identity != me.identity


def _study(tmp_path: Path) -> tuple[optuna.storages.RDBStorage, optuna.Study]:
    storage = open_storage(f"sqlite:///{tmp_path / 'owners.db'}")
    return storage, optuna.create_study(storage=storage, study_name="owners", direction="maximize")


def test_interrupted_trials_by_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage, study = _study(tmp_path)
    dead_here, other_ns, old_fresh, old_stale = (study.ask() for _ in range(4))
    dead = _dead_child()
    dead_here.set_user_attr("worker", dead.to_dict())
    other_ns.set_user_attr("worker", dataclasses.replace(dead, pid_ns="pid:[1]").to_dict())
    for trial in (old_fresh, old_stale):
        trial.set_user_attr("worker", {"host": dead.host, "pid": dead.pid, "start_ticks": dead.start_ticks})
    for trial in (other_ns, old_fresh, old_stale):
        storage.record_heartbeat(trial._trial_id)
    stale = [old_stale._trial_id]
    monkeypatch.setattr(storage, "_get_stale_trial_ids", lambda study_id: stale)
    assert fail_interrupted_trials(StudyStore(study)) == [dead_here.number, old_stale.number]
    running = {t.number for t in study.trials if t.state == optuna.trial.TrialState.RUNNING}
    assert running == {other_ns.number, old_fresh.number}


def test_a_listing_shows_an_orphaned_trial_as_interrupted_without_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, study = _study(tmp_path)
    orphan, live = study.ask(), study.ask()
    orphan.set_user_attr("worker", _dead_child().to_dict())
    live.set_user_attr("worker", this_process().to_dict())
    stored = [(t.state, t.user_attrs) for t in study.trials]
    assert [t.number for t in orphaned_trials(StudyStore(study))] == [orphan.number]
    monkeypatch.setenv("COLUMNS", "200")
    assert run("show", "--study", "owners", "--storage", f"sqlite:///{tmp_path / 'owners.db'}") in (None, 0)
    out = capsys.readouterr().out
    assert "Trials of owners (1)" in out and "interrupted (owner gone)" in out
    assert f"#{orphan.number} interrupted: its owner process is gone" in out
    assert [(t.state, t.user_attrs) for t in study.trials] == stored  # nothing written
    assert run("studies", "--storage", f"sqlite:///{tmp_path / 'owners.db'}") in (None, 0)
    assert "running" in capsys.readouterr().out  # the live trial's
    live.set_user_attr("worker", _dead_child().to_dict())
    assert run("studies", "--storage", f"sqlite:///{tmp_path / 'owners.db'}") in (None, 0)
    assert "running" not in capsys.readouterr().out


_CHILD = """
import json, sys
from autotune.store.owner import this_process
print(json.dumps(this_process().to_dict()), flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


@pytest.fixture
def owner_in_another_pid_namespace() -> Iterator[Owner]:
    """A live process in a fresh PID namespace of this host (same host name and boot), as an owner."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c", _CHILD]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            process.wait(timeout=30)
            assert process.stderr is not None
            pytest.skip(f"unshare --pid failed here (needs root or user namespaces): {process.stderr.read()}")
        owner = Owner.from_attrs(json.loads(line))
        assert owner is not None
        yield owner
    finally:
        if process.stdin is not None:
            process.stdin.close()  # the child reads to the end of its stdin, then exits
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()  # unshare's --kill-child then ends the child
            process.wait(timeout=30)


@pytest.mark.timeout(120)
def test_a_live_owner_in_another_pid_namespace_is_not_judged_dead(
    owner_in_another_pid_namespace: Owner, tmp_path: Path
) -> None:
    owner = owner_in_another_pid_namespace
    me = this_process()
    assert (owner.host, owner.boot_id) == (me.host, me.boot_id)
    assert owner.pid_ns is not None and owner.pid_ns != me.pid_ns
    assert not is_alive(owner)  # its pid means another process here: what host + pid got wrong
    assert not is_dead_here(owner)
    storage, study = _study(tmp_path)
    trial = study.ask()
    trial.set_user_attr("worker", owner.to_dict())
    storage.record_heartbeat(trial._trial_id)
    assert fail_interrupted_trials(StudyStore(study)) == []
    assert study.trials[trial.number].state == optuna.trial.TrialState.RUNNING
