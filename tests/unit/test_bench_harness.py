"""What the benchmarks share (benchmarks/harness.py, benchmarks/report.py): a search's process run
to its end, an autotune command timed, a scratch PostgreSQL database, a worktree of an older commit,
a section's block."""

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


def test_timed_command_times_a_command_names_a_failure_and_kills_a_stuck_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/true")  # `/bin/true -m autotune show --study x`
    wall_s, done = harness.timed_command("show", "--study", "x", timeout=60)
    assert done.returncode == 0 and 0 < wall_s < 60
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match=r"autotune show exited 1"):
        harness.timed_command("show", "--study", "x", timeout=60)
    stuck = tmp_path / "stuck"
    stuck.write_text("#!/bin/sh\nexec sleep 30\n")
    stuck.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(stuck))
    wall_s, done = harness.timed_command("show", "--study", "x", timeout=0.5)
    assert (wall_s, done.returncode) == (0.5, -9)


def test_fresh_database_is_created_and_then_dropped(postgres_url: str) -> None:
    import sqlalchemy

    def databases() -> set[str]:
        engine = harness.server_engine()
        try:
            with engine.connect() as connection:
                return set(connection.execute(sqlalchemy.text("SELECT datname FROM pg_database")).scalars())
        finally:
            engine.dispose()

    with harness.fresh_database("autotune_test_bench") as name:
        assert name.startswith("autotune_test_bench_") and name in databases()
    assert name not in databases()


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
