"""Who runs a trial: the process that owns it, recorded in the trial's user attrs.

A running trial records its owner (``worker``: host, pid and the process's start time). A trial
whose owner is on this host and no longer alive was interrupted: it can be failed at once, without
waiting for its heartbeat to go stale. The start time guards against a reused pid. Pure: no torch.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OWNER_ATTR = "worker"


@dataclass(frozen=True)
class Owner:
    """A process on a host.

    Attributes:
        host: the host name.
        pid: the process id on that host.
        start_ticks: the process's start time in clock ticks since boot (``/proc/PID/stat`` field
            22), None where unknown.
    """

    host: str
    pid: int
    start_ticks: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_attrs(cls, attrs: Any) -> Owner | None:
        """The owner stored in a trial's user attrs, or None (an older trial, or not a mapping)."""
        if not isinstance(attrs, dict) or "host" not in attrs or "pid" not in attrs:
            return None
        ticks = attrs.get("start_ticks")
        return cls(str(attrs["host"]), int(attrs["pid"]), int(ticks) if ticks is not None else None)


def this_host() -> str:
    return socket.gethostname()


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after its end.
    return text[text.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot, or None (no such process)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def this_process() -> Owner:
    """The calling process as an owner."""
    pid = os.getpid()
    return Owner(this_host(), pid, start_ticks(pid))


def is_local(owner: Owner) -> bool:
    return owner.host == this_host()


def is_alive(owner: Owner) -> bool:
    """Whether a process of this host is still running: it exists, is not a zombie, and started
    when the owner did (a pid can be reused)."""
    fields = _stat_fields(owner.pid)
    if fields is None:
        try:  # no /proc (not Linux): ask the kernel directly
            os.kill(owner.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields[0] in ("Z", "X"):  # a zombie has finished; only its exit status is left
        return False
    return owner.start_ticks is None or int(fields[19]) == owner.start_ticks
