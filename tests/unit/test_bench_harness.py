"""What the benchmarks share (benchmarks/harness.py, benchmarks/report.py): a search's process run
to its end, a worktree of an older commit, a section's block."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import harness, report


def test_run_search_returns_the_process_and_its_wall_time() -> None:
    done, wall_s = harness.run_search([sys.executable, "-c", "print('answer')"], timeout=60)
    assert done.stdout.strip() == "answer"
    assert 0 < wall_s < 60


def test_run_search_names_the_status_and_the_output_of_a_failed_search() -> None:
    command = [sys.executable, "-c", "import sys; print('out'); sys.exit('no store')"]
    with pytest.raises(RuntimeError, match=r"(?s)search failed \(1\): out.*no store"):
        harness.run_search(command, timeout=60)


def test_worktree_checks_out_the_commit_and_removes_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.txt").write_text("old\n")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "old"], check=True)
    old = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    (repo / "f.txt").write_text("new\n")
    subprocess.run([*git, "commit", "-qam", "new"], check=True)
    temp = tmp_path / "temp"
    temp.mkdir()
    with harness.worktree("HEAD~1", temp, repo=repo) as found:
        assert found is not None
        commit, folder = found
        assert commit == old.strip()
        assert (folder / "f.txt").read_text() == "old\n"
    assert not folder.exists()
    listed = subprocess.run([*git, "worktree", "list"], capture_output=True, text=True).stdout
    assert str(folder) not in listed
    with harness.worktree(None, temp, repo=repo) as nothing:
        assert nothing is None


def test_section_is_the_filled_section_block_ending_its_last_line() -> None:
    text = report.section("ddp_knobs", rounds=3, table="T", **_machine())
    assert text == report.fill("ddp_knobs", "section", rounds=3, table="T", **_machine()) + "\n"
    assert text.startswith("## DDP") and text.endswith(".\n")


def _machine() -> dict[str, object]:
    keys = ("date", "cpu", "cores", "torch", "transformers", "commit", "python", "optuna")
    return {key: key for key in keys}
