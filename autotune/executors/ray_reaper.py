"""Ends a search's local Ray instance when the search is gone without shutting it down (SIGKILL,
the OOM killer): ``python -m autotune.executors.ray_reaper JSON``.

Ray's daemons (GCS, raylet, workers) notice a dead driver only after 30-80 s. This small process,
started right after ``ray.init``, watches the search by its identity (pid and start time) and
SIGKILLs the daemons that ``ray.init`` started, by pid and start time, as soon as the search is
gone, then removes Ray's temporary folder. A search that ends normally ends its reaper first.
Imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time

POLL_S = 0.5


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def reap(search: tuple[int, str], daemons: list[tuple[int, str]], temp_dir: str | None) -> None:
    """Wait until `search` (pid, start time) is gone, then SIGKILL each of `daemons` that is still
    the process it was, and remove `temp_dir`."""
    pid, started = search
    while _start_time(pid) == started:
        time.sleep(POLL_S)
    alive = [(d, s) for d, s in daemons if _start_time(d) == s]
    # The workers and actors the daemons started since (children of the raylet) go with them.
    doomed = alive + [child for d, _ in alive for child in _descendants(d)]
    for victim, _ in doomed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(_start_time(v) == s for v, s in doomed) and time.monotonic() < deadline:
        time.sleep(0.1)
    if temp_dir:
        for _ in range(5):  # a process that was still writing its log may recreate a folder once
            shutil.rmtree(temp_dir, ignore_errors=True)
            if not os.path.exists(temp_dir):
                break
            time.sleep(0.2)


def _descendants(root: int) -> list[tuple[int, str]]:
    parents: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                text = handle.read()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        parents.setdefault(int(fields[1]), []).append((int(entry), fields[19]))
    found: list[tuple[int, str]] = []
    frontier = [root]
    while frontier:
        for child in parents.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child[0])
    return found


def main(argv: list[str] | None = None) -> None:
    spec = json.loads((argv if argv is not None else sys.argv[1:])[0])
    # Its own session: a Ctrl-C or a group kill aimed at the search does not end the reaper first.
    with contextlib.suppress(OSError):
        os.setsid()
    reap(tuple(spec["search"]), [tuple(d) for d in spec["daemons"]], spec.get("temp_dir"))


if __name__ == "__main__":
    main()
