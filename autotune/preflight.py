"""Checks of a run's configuration that need the machine, made before anything is created: no
study in the store, no header printed, no folder made, when the Ray address cannot be reached, the
compile-cache or TensorBoard folder cannot be one, or a tracker's library is missing. Each fails
in one line: a folder that cannot be one, or a missing library, is bad input (`UsageError`, exit
2); a Ray head that does not answer (`Unreachable`) or refuses this process's token
(`RayTokenError`) is what the world refused (exit 1). Light: no torch; Ray only when a cluster is
to be joined.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from autotune.errors import Unreachable, UsageError
from autotune.ray_auth import check_token

ADDRESS_HINT = "check ray_address (HOST:PORT of the head, or ray://HOST:10001)"
# The Ray heads this process found it can join: `autotune search` checks before its heavy imports
# (a refusal then takes a second, not the training stack's imports), the driver again for every
# caller; the head is asked once.
_JOINABLE: set[str] = set()


def check_before_creating(config: Any) -> None:
    """Check what `config` (a `RunConfig`) names on this machine: the Ray cluster to join
    (`check_ray_head`), the compile-cache folder (`check_folder`), the trackers' libraries
    (`autotune.trackers.check_installed`) and TensorBoard's folder.

    Raises:
        UsageError: one of them cannot serve the run.
        RayTokenError: the Ray head refuses this process's token (or its lack of one).
    """
    if config.backend == "ray" and config.ray_address:
        check_ray_head(config.ray_address)
    if config.compile_cache:
        check_folder(config.compile_cache, "compile_cache")
    if config.report_to:
        from autotune.trackers import check_installed

        check_installed(config.report_to)
        if "tensorboard" in config.report_to:
            from autotune.trackers.tensorboard import DEFAULT_DIR

            check_folder(config.tracker_dir or DEFAULT_DIR, "tracker_dir")


def check_ray_head(address: str) -> None:
    """Fail in one line when the Ray head at `address` cannot be joined: nothing listens there
    (`probe_address`), or it refuses this process's token (`autotune.ray_auth.check_token`, which
    turns on Ray's token mode when the head requires a token and one is found).

    Raises:
        Unreachable: the address is not reachable.
        RayTokenError: the head requires a token this process does not send.
    """
    if address in _JOINABLE:
        return
    probe_address(address)
    if "://" not in address and ":" in address:  # ``auto``, ``ray://``: left to Ray
        check_token(address)
    _JOINABLE.add(address)


def probe_address(address: str, timeout_s: float = 5.0) -> None:
    """Fail in one line, within `timeout_s`, when `address` (``HOST:PORT`` or
    ``ray://HOST:PORT``) names a port that nothing listens on: ``ray.init`` would retry it for
    minutes, printing Ray's own warnings. Other forms (``auto``) are left to Ray.

    Raises:
        UsageError: the port is not a number.
        Unreachable: nothing answers there.
    """
    target = address.removeprefix("ray://")
    if "://" in target or ":" not in target:
        return
    host, _, port = target.rpartition(":")
    host = host.strip("[]")  # [IPv6]:PORT
    if not port.isdigit():
        raise UsageError(
            f"ray_address={address!r}: {port!r} is not a port number", ADDRESS_HINT, field="ray_address"
        )
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise Unreachable(
            f"cannot reach Ray at {address}: {why}", ADDRESS_HINT, field="ray_address"
        ) from None


def check_folder(path: str, field: str) -> None:
    """Fail in one line when `path` cannot be a folder this process writes into: it, or a folder
    above it, is something else (a regular file), or the nearest existing folder above it is not
    writable. Creates nothing.

    Raises:
        UsageError: naming the path, what is wrong and the fix.
    """
    folder = os.path.abspath(os.path.expanduser(path))
    probe = folder
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    fix = f"give {field} a folder, or a path where one can be made"
    if os.path.lexists(probe) and not os.path.isdir(probe):
        what = "is" if probe == folder else f"lies below {probe}, which is"
        raise UsageError(f"{field}={path!r} {what} not a folder", fix, field=field)
    if not os.access(probe, os.W_OK | os.X_OK):
        where = "" if probe == folder else f" (the nearest existing folder above it, {probe})"
        raise UsageError(f"{field}={path!r}: no permission to write{where}", fix, field=field)
