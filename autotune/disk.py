"""Telling a full disk (or a full database) from every other error, and saying where it is full.

A full disk is not an outage that passes by itself, nor a fault of the configuration a trial ran:
someone has to free space. So a store write that fails for want of room is reported at once
(`autotune.store.retry`), and a trial that ran out of room under the compile cache or its scratch
folder is recorded with its own reason (`autotune.store.outcomes.DISK_FULL`), naming the folder.

What the errors look like: SQLite's ``SQLITE_FULL`` ("database or disk is full"); PostgreSQL's
``disk_full`` (SQLSTATE 53100, psycopg's ``DiskFull``: "could not extend file ...: No space left on
device"); MySQL/MariaDB's ``ER_RECORD_FILE_FULL`` (1114, "The table 't' is full") and
``ER_DISK_FULL`` (1021), or a write that failed with "Errcode: 28"; and the operating system's
``ENOSPC``/``EDQUOT``. Pure: no database driver, no torch (errors are recognised by what they carry).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

from autotune.errors import first_line

_FULL_TEXT = re.compile(
    r"database or disk is full|no space left on device|could not extend file|disk full"
    r"|disk quota exceeded|the table .{1,200} is full|errcode: 28\b",
    re.IGNORECASE,
)
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_PG_DISK_FULL = "53100"  # PostgreSQL's SQLSTATE disk_full
_MYSQL_FULL = {1114, 1021}  # ER_RECORD_FILE_FULL, ER_DISK_FULL


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, the driver error a wrapper holds (SQLAlchemy's ``orig``, dynamo's
    ``inner_exception``), and what caused it, a few levels deep (optuna wraps SQLAlchemy's error,
    which wraps the driver's; dynamo raises a compile failure ``from None``)."""
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending and len(seen) < 12:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for attribute in ("orig", "inner_exception", "__cause__", "__context__"):
            inner = getattr(current, attribute, None)
            if isinstance(inner, BaseException):
                pending.append(inner)


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what it wraps) says a disk, a quota or a database is full."""
    for seen in _chain(exc):
        if isinstance(seen, OSError) and seen.errno in _FULL_ERRNOS:
            return True
        if _PG_DISK_FULL in (getattr(seen, "sqlstate", None), getattr(seen, "pgcode", None)):
            return True
        code = seen.args[0] if seen.args else None
        if isinstance(code, int) and not isinstance(seen, OSError) and code in _MYSQL_FULL:
            return True
        if _FULL_TEXT.search(str(seen)):
            return True
    return False


def full_path(exc: BaseException) -> Path | None:
    """The file a full-disk error names (an `OSError`'s ``filename``, else a quoted absolute path
    in its text), or None."""
    for seen in _chain(exc):
        if isinstance(seen, OSError) and seen.filename:
            return Path(os.fsdecode(seen.filename))
        quoted = re.search(r"""['"](/[^'"]+)['"]""", str(seen))
        if quoted:
            return Path(quoted.group(1))
    return None


def free_bytes(path: Path) -> int | None:
    """Free bytes on the filesystem holding `path` (its nearest existing folder), or None."""
    for folder in (path, *path.parents):
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            continue
    return None


def describe_free(path: Path) -> str:
    """``"0 B free"`` style words on the filesystem holding `path` ("" when unknown)."""
    free = free_bytes(path)
    if free is None:
        return ""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if free >= size:
            return f"{free / size:.1f} {unit} free"
    return f"{free} B free"


def disk_full_line(exc: BaseException, places: Mapping[str, Path | str | None]) -> str:
    """One line for a full disk under one of `places` (what a folder is, as its reader knows it:
    ``{"compile cache": ..., "scratch folder": ...}``): which folder, the error's own words, and the
    space left there. A path under none of them is named as it is; an error naming no path, by its
    words alone."""
    text = _said(exc)
    path = full_path(exc)
    for what, folder in places.items():
        if folder is None or path is None:
            continue
        folder = Path(folder)
        if path == folder or folder in path.parents:
            free = describe_free(folder)
            return f"disk full under the {what} {folder} ({text}{'; ' + free if free else ''})"
    if path is not None:
        free = describe_free(path)
        return f"disk full at {path} ({text}{'; ' + free if free else ''})"
    return f"disk full ({text})"


def _said(exc: BaseException) -> str:
    """The words of the full-disk error in `exc`'s chain, or else its first line."""
    for seen in _chain(exc):
        if isinstance(seen, OSError) and seen.errno in _FULL_ERRNOS:
            return f"{seen.strerror or os.strerror(seen.errno or 0)}"
    return first_line(exc)[:200]
