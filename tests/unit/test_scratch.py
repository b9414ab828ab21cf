"""The folders a run makes are stamped with their owner; the next folder made in the same place
removes those of dead owners, and only those."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.scratch import STAMP, make_folder, owner_of, sweep, temporary_folder
from autotune.study.owner import Owner, start_ticks, this_process


def _dead_owner() -> Owner:
    """A process of this boot and PID namespace that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ticks = start_ticks(child.pid)
    finally:
        child.kill()
        child.wait(timeout=30)
    return dataclasses.replace(this_process(), pid=child.pid, start_ticks=ticks)


def _folder(parent: Path, name: str, owner: Owner | None) -> Path:
    path = parent / name
    path.mkdir()
    (path / "worker-1.log").write_text("a log\n")
    if owner is not None:
        (path / STAMP).write_text(json.dumps(owner.to_dict()))
    return path


def test_a_folder_is_stamped_with_its_maker_and_removed_after_its_block(tmp_path: Path) -> None:
    path = make_folder("autotune-logs-", str(tmp_path))
    assert os.path.basename(path).startswith("autotune-logs-") and owner_of(path) == this_process()
    with temporary_folder("autotune-worker-", str(tmp_path)) as scratch:
        assert owner_of(scratch) == this_process()
    assert not os.path.exists(scratch) and os.path.isdir(path)
    with pytest.raises(ValueError, match="autotune-"):
        make_folder("logs-", str(tmp_path))


def test_only_the_folders_of_dead_owners_are_removed(tmp_path: Path) -> None:
    dead = _dead_owner()
    gone = _folder(tmp_path, "autotune-logs-dead", dead)
    live = _folder(tmp_path, "autotune-logs-live", this_process())
    unstamped = _folder(tmp_path, "autotune-logs-old", None)  # an older autotune's: not judged
    elsewhere = _folder(tmp_path, "autotune-logs-other", dataclasses.replace(dead, boot_id="another-boot"))
    not_ours = _folder(tmp_path, "logs-dead", dead)
    assert sweep(str(tmp_path)) == [str(gone)]
    assert not gone.exists()
    assert all(p.exists() for p in (live, unstamped, elsewhere, not_ours))


def test_making_a_folder_first_removes_a_dead_searchs_folders(tmp_path: Path) -> None:
    left = _folder(tmp_path, "autotune-logs-killed", _dead_owner())
    path = make_folder("autotune-logs-", str(tmp_path))
    assert not left.exists() and os.path.isdir(path)


def test_a_search_killed_with_sigkill_leaves_folders_the_next_one_removes(tmp_path: Path) -> None:
    """A real search process is killed while its worker trains: its log folder stays behind,
    stamped; the next folder made there (the next search's first) removes it."""
    script = (
        "import autotune; from autotune.options import MeasureSettings; "
        "autotune.search(model='tiny-gpt2', seq_len=16, trials=1, "
        f"storage='sqlite:///{tmp_path / 'k.db'}', output_dir={str(tmp_path)!r}, finalists=0, "
        # a window that goes on until the test kills the search
        "measure_baseline=False, "
        "measure=MeasureSettings(min_measure_steps=10**6, measure_steps=10**6, max_seconds=600))"
    )
    search = subprocess.Popen([sys.executable, "-c", script])
    try:
        logs: list[Path] = []
        for _ in range(1200):  # the trial's worker is in its window: at most 120 s
            logs = [p for p in tmp_path.glob("autotune-logs-*") if any(p.glob("worker-*.log"))]
            if (logs and any(tmp_path.glob("autotune-worker-*"))) or search.poll() is not None:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert logs, "the search made no log folder"
        subprocess.run(["sleep", "1"], check=True)
        logs = sorted(tmp_path.glob("autotune-logs-*"))
    finally:
        search.kill()
        search.wait(timeout=60)
    assert logs[0].exists() and owner_of(str(logs[0])) is not None, sorted(p.name for p in tmp_path.iterdir())
    make_folder("autotune-logs-", str(tmp_path))
    assert not logs[0].exists()


def test_a_folder_that_cannot_be_stamped_on_a_full_disk_is_not_left_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from autotune import scratch

    def full(path: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(path, STAMP))

    monkeypatch.setattr(scratch, "stamp", full)
    with pytest.raises(OSError, match="No space left on device"):
        make_folder("autotune-worker-", str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # an unstamped folder would never be swept
