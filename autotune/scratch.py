"""The folders a run makes outside its store (worker logs, scratch folders, sockets, Ray's temp
folder): each stamped with the process that owns it, so that the next run on this machine removes
the folders whose owner is dead.

A run that ends normally, or by Ctrl-C or SIGTERM, removes its own folders. One killed with SIGKILL
(or by the kernel's out-of-memory killer) cannot: its folders stay. The next folder made in the
same parent first removes every ``autotune-*`` folder there whose stamp names a dead owner, by the
rule that fails a dead owner's trials (`autotune.store.owner.is_dead_here`: same boot and PID
namespace, its process gone). A folder without a stamp (made by an older autotune, or being made
right now) and one whose owner cannot be judged here are left alone. The planner's own folder for
resolving `TrainingArguments()` (`autotune.space.defaults`, made and removed within milliseconds)
is a plain temporary folder: the space sits below the owner rules. Pure: no torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator

from autotune.store.owner import Owner, is_dead_here, this_process

PREFIX = "autotune-"
STAMP = ".autotune-owner.json"


def make_folder(prefix: str, parent: str | None = None) -> str:
    """A new folder ``<parent>/<prefix>XXXXXXXX`` (`tempfile.mkdtemp`; parent: the system's
    temporary folder), stamped with this process as its owner, after removing the folders of dead
    owners in `parent` (`sweep`). The caller removes it when done.

    Raises:
        OSError: the folder cannot be made or stamped (a full disk: nothing is left behind)."""
    if not prefix.startswith(PREFIX):
        raise ValueError(f"an autotune folder's prefix starts with {PREFIX!r}: {prefix!r}")
    sweep(parent)
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        stamp(path)
    except OSError:  # a full disk: a folder without its stamp would never be swept
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


@contextlib.contextmanager
def temporary_folder(prefix: str, parent: str | None = None) -> Iterator[str]:
    """`make_folder`, removed when the block ends (as `tempfile.TemporaryDirectory`)."""
    path = make_folder(prefix, parent)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def stamp(path: str) -> None:
    """Record this process as the owner of folder `path`."""
    with open(os.path.join(path, STAMP), "w", encoding="utf-8") as file:
        json.dump(this_process().to_dict(), file)


def owner_of(path: str) -> Owner | None:
    """The owner stamped in folder `path`, or None (no stamp, or one that does not read)."""
    try:
        with open(os.path.join(path, STAMP), encoding="utf-8") as file:
            return Owner.from_attrs(json.load(file))
    except (OSError, ValueError):
        return None


def sweep(parent: str | None = None) -> list[str]:
    """Remove the ``autotune-*`` folders in `parent` (default: the system's temporary folder)
    whose stamped owner is dead here; return their paths. Never raises: a folder that cannot be
    read or removed is left as it is."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(parent or tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        with contextlib.suppress(OSError):
            if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            owner = owner_of(entry.path)
            if owner is not None and is_dead_here(owner):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed
