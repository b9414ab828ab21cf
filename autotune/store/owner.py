"""Who runs a trial: the process that owns it, recorded in the trial's user attrs.

A running trial records its owner (``worker``: host, boot, PID namespace, pid and the process's
start time). A pid means something only inside its PID namespace of one boot of one kernel, so an
owner is judged here (`is_dead_here`) only when it shares this process's boot and PID namespace:
then a dead owner's trial can be failed at once, without waiting for its heartbeat to go stale,
and the start time guards against a reused pid. Any other owner (another host, another boot, a
container with its own PID namespace even where it shares the host name) is judged by its
heartbeat only.

Owner records written before boot and namespace were recorded carry host, pid and start time
only. They are judged by their heartbeat only, never by pid: a container with host networking
shares the host name, so host + pid cannot tell a live process in another namespace from a dead
one here. The cost is a wait of three heartbeat intervals before such a trial is failed; the
alternative was failing live trials of other namespaces (a pool that livelocks). Pure: no torch.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autotune.records import OWNER_KEY

OWNER_ATTR = OWNER_KEY  # the trial user attr that holds its owner

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class Owner:
    """A process on a host.

    Attributes:
        host: the host name (shown to people; not used to judge the owner).
        pid: the process id in its PID namespace.
        start_ticks: the process's start time in clock ticks since boot (``/proc/PID/stat`` field
            22), None where unknown.
        boot_id: the kernel's boot id (``/proc/sys/kernel/random/boot_id``), None where unknown.
        pid_ns: the PID namespace (``/proc/self/ns/pid`` link target, like ``pid:[4026531836]``),
            None where unknown or where this process's ``/proc`` shows another namespace.
    """

    host: str
    pid: int
    start_ticks: int | None
    boot_id: str | None = None
    pid_ns: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def identity(self) -> str:
        """A text naming this process among all processes of all hosts and boots."""
        return f"{self.host}/{self.boot_id}/{self.pid_ns}/{self.pid}/{self.start_ticks}"

    @classmethod
    def from_attrs(cls, stored: Any) -> Owner | None:
        """The owner a trial stored (its `OWNER_ATTR` value, `TrialRecord.owner`), or None (an
        older trial, or not a mapping). Records without ``boot_id``/``pid_ns`` (older autotune)
        read with those None."""
        if not isinstance(stored, dict) or "host" not in stored or "pid" not in stored:
            return None
        ticks = stored.get("start_ticks")
        return cls(
            str(stored["host"]),
            int(stored["pid"]),
            int(ticks) if ticks is not None else None,
            _text_or_none(stored.get("boot_id")),
            _text_or_none(stored.get("pid_ns")),
        )


def _text_or_none(value: Any) -> str | None:
    return str(value) if value else None


def this_host() -> str:
    return socket.gethostname()


def this_boot() -> str | None:
    """The running kernel's boot id, or None (no ``/proc``)."""
    try:
        return _BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def this_pid_namespace() -> str | None:
    """This process's PID namespace (``pid:[4026531836]``), or None: unknown, or this process's
    ``/proc`` belongs to another PID namespace (``unshare --pid`` without ``--mount-proc``), where
    the pids it lists are not the ones this process sees, so no owner can be judged by pid here."""
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return None
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, pgrp, ...), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after its end.
    return text[text.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot, or None (no such process)."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def this_process() -> Owner:
    """The calling process as an owner."""
    pid = os.getpid()
    return Owner(this_host(), pid, start_ticks(pid), this_boot(), this_pid_namespace())


def is_local(owner: Owner) -> bool:
    """Whether `owner`'s pid means here what it meant to the owner: same boot of the same kernel
    and same PID namespace, both known. The host name is not asked: containers with host networking
    share it across namespaces, and a container with ``--pid=host`` has its own name but our pids."""
    if owner.boot_id is None or owner.pid_ns is None:
        return False
    return owner.boot_id == this_boot() and owner.pid_ns == this_pid_namespace()


def is_alive(owner: Owner) -> bool:
    """Whether the owner's process is still running, read in this process's PID namespace: it
    exists, is not a zombie, and started when the owner did (a pid can be reused). Meaningful only
    for a local owner (`is_local`), such as a worker's own supervisor."""
    fields = stat_fields(owner.pid)
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


def is_dead_here(owner: Owner) -> bool:
    """Whether this process can tell for sure that `owner` has ended: it shares this process's
    boot and PID namespace (`is_local`) and its process is gone. False for every other owner,
    including older records without boot and namespace: those are judged by their heartbeat."""
    return is_local(owner) and not is_alive(owner)


def member_seed(seed: int, identity: str) -> int:
    """The sampler seed of one pool member: `seed` mixed with the member's `identity` (such as
    ``this_process().identity``), so members started with the same ``--seed`` (every container of
    one compose file) propose different trials, and one member's choice is reproducible from both.
    Deterministic across processes and Python versions (SHA-256, not ``hash``); in [0, 2**31)."""
    digest = hashlib.sha256(f"{seed}\0{identity}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**31
