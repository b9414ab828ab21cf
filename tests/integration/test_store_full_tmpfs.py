"""The issue's own case, on a real full filesystem: a search whose SQLite store lives in a 3 MiB
tmpfs, filled up during the first trial, stops at once with one line naming the store (SQLite's
own ``SQLITE_FULL``, no injection); once space is freed, the next open leaves no RUNNING trial.

The tmpfs is mounted in a mount namespace of the search's own (``unshare --mount``): it exists for
the processes of that namespace only and goes away with them, whatever happens to this test. That
needs root (CAP_SYS_ADMIN): elsewhere the test is skipped, and `test_store_full.py` covers the same
behaviour with the error injected."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.executors.processes import descendants, wait_gone
from tests.helpers import wait_for, write_space

pytestmark = pytest.mark.timeout(360)

NEXT_OPEN = """
import optuna
from autotune.store.session import StudyStore
from autotune.store.trials import fail_interrupted_trials
study = StudyStore.open({storage!r}, "full")
print("interrupted:", fail_interrupted_trials(study))
print("states:", [t.state.name for t in optuna.load_study(study_name="full", storage={storage!r}).trials])
"""


def _can_mount_tmpfs(folder: Path) -> bool:
    tool = shutil.which("unshare")
    if tool is None or shutil.which("nsenter") is None:
        return False
    probe = [tool, "--mount", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {shlex.quote(str(folder))}"]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0


def _fill(path: Path) -> None:
    with open(path, "wb") as filler:
        try:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        except OSError:
            pass


def _default_interrupt_signals() -> None:
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


def test_a_search_whose_store_fills_its_filesystem_stops_at_once_in_one_line(tmp_path: Path) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    if not _can_mount_tmpfs(mount):
        pytest.skip("cannot mount a tmpfs in a mount namespace here (needs root)")
    temp = tmp_path / "tmp"
    temp.mkdir()
    storage = f"sqlite:///{mount / 'full.db'}"
    space = write_space(tmp_path, {"per_device_train_batch_size": [1, 2, 4, 8]})
    search = [sys.executable, "-m", "autotune", "search", "--model", "tiny-gpt2", "--space", space]
    search += ["--trials", "4", "--storage", storage, "--study", "full", "--seq-len", "16"]
    search += ["--finalists", "0", "--no-baseline", "--settle-steps", "1", "--measure-steps", "100000"]
    search += ["--max-seconds", "60", "--target-ci", "0.000001"]
    script = (
        f"mount -t tmpfs -o size=3m tmpfs {shlex.quote(str(mount))} || exit 97\n"
        f"{shlex.join(search)}\ncode=$?\necho search-exit: $code\n"
        f"rm -f {shlex.quote(str(mount / 'filler'))}\n"  # space freed: the next open
        f"{shlex.join([sys.executable, '-c', NEXT_OPEN.format(storage=storage)])}\nexit $code\n"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(temp), "AUTOTUNE_HEARTBEAT_S": "1"}
    log = open(tmp_path / "search.log", "w+")  # noqa: SIM115
    proc = subprocess.Popen(
        ["unshare", "--mount", "sh", "-c", script],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_default_interrupt_signals,
    )
    inside = Path(f"/proc/{proc.pid}/root") / mount.relative_to("/")  # the tmpfs, seen from here
    try:
        wait_for(
            lambda: (
                proc.poll() is not None or ((inside / "full.db").exists() and _running(proc.pid, storage))
            ),
            timeout_s=240,
            what="a running trial",
        )
        assert proc.poll() is None, (tmp_path / "search.log").read_text()
        started = descendants(proc.pid)
        filled_at = time.monotonic()
        _fill(inside / "filler")
        log_path = tmp_path / "search.log"
        wait_for(lambda: "search-exit:" in log_path.read_text(), timeout_s=120, what="the search's end")
        took_s = time.monotonic() - filled_at  # the search's own end, not the next open's after it
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:  # by pid: the search below the shell first, then the shell
            for pid, _ in reversed(descendants(proc.pid)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.kill()  # the namespace and its tmpfs end with its processes
            proc.wait(timeout=30)
        log.close()
    output = (tmp_path / "search.log").read_text()
    print(f"3 MiB tmpfs filled: exit {code} {took_s:.1f} s after the filesystem filled")  # pytest -s
    assert code == 1, output
    assert "search-exit: 1" in output and took_s < 30, output  # at once: not the 300 s retry bound
    lines = [
        line for line in output.splitlines() if storage in line and not line.startswith("autotune study")
    ]
    assert len(lines) == 1, output
    assert "cannot be written, its disk or database is full (database or disk is full;" in lines[0]
    assert f"; {mount}: " in lines[0] and " B free); not retried" in lines[0], output  # bytes: none left
    assert "interrupted: [0]" in output and "states: ['FAIL']" in output, output
    assert wait_gone(started, timeout_s=15), output
    assert not [p.name for p in temp.iterdir() if p.name.startswith("autotune-")], output


_RUNNING_TRIALS = (
    "SELECT count(*) FROM trials t JOIN trial_params p ON p.trial_id = t.trial_id WHERE t.state = 'RUNNING'"
)


def _running(pid: int, storage: str) -> bool:
    """Whether the study has a RUNNING trial with its values, read inside the search's mount
    namespace (`nsenter`: SQLite resolves the /proc/PID/root link to this namespace's root), read
    only."""
    path = storage.removeprefix("sqlite:///")
    if not os.path.exists(f"/proc/{pid}/root{path}"):
        return False  # not created yet
    connect = f"sqlite3.connect('file:{path}?mode=ro', uri=True)"
    read = f"import sqlite3; print({connect}.execute({_RUNNING_TRIALS!r}).fetchone()[0])"
    found = subprocess.run(
        ["nsenter", "-t", str(pid), "-m", sys.executable, "-c", read],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return found.returncode == 0 and found.stdout.strip() not in ("", "0")
