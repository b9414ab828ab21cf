"""Joining a Ray cluster that uses token authentication, as Ray's own clients do.

A head whose ``ray start --head`` found a token (Ray >= 2.5x: ``~/.ray/auth_token``, which any
local ``ray.init()`` writes) accepts only clients that send it, and only clients in token mode
(``RAY_AUTH_MODE=token``) send one. ``ray.init(address="auto")`` and ``ray start --address`` turn
that mode on by themselves when a token is found; ``ray.init(address=HOST:PORT)``, which the
search calls, does not, and a client without the token then retries for half a minute, printing
Ray's ``InvalidAuthToken`` warnings. So before joining:

- `check_token` asks the head for its cluster id in a short-lived subprocess (silent, bounded);
- when the head refuses a process that sends no token and ``RAY_AUTH_MODE`` is unset,
  `enable_token_mode` turns token mode on if Ray's token loader finds a token
  (``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH`` names, else ``~/.ray/auth_token``),
  through Ray's own function for it, and the head is asked again. Only then: a search in token
  mode on a head without token authentication lost every actor at start (Ray 2.60);
- a head that still refuses fails in one line (`RayTokenError`, exit 1) that names where the
  token was looked for and how to fix it.

Ray is imported only inside these functions: `autotune.preflight` calls them before the study
is created.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from autotune.errors import RayTokenError

MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
DEFAULT_TOKEN = Path(".ray") / "auth_token"  # below the home folder
WHERE_LOOKED = f"{TOKEN_ENV}, {TOKEN_PATH_ENV}, ~/{DEFAULT_TOKEN}"
FIX = (
    f"copy the head's ~/{DEFAULT_TOKEN} to this machine, or set {TOKEN_ENV} to what "
    "`ray get-auth-token` prints on the head"
)
PROBE_TIMEOUT_S = 20.0

# Run in a fresh interpreter (its stderr, where Ray's C++ client logs, is kept off the terminal):
# the head's answer to this process's token, or to its lack of one.
_PROBE = """
import sys
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
try:
    GcsClient(address=sys.argv[1])
except AuthenticationError:
    print("refused")
except Exception:
    print("unknown")
else:
    print("ok")
"""


def token_source(environ: Mapping[str, str], home: Path) -> str | None:
    """Where Ray's token loader takes the token from, in its order: ``RAY_AUTH_TOKEN`` (when not
    empty), else the file ``RAY_AUTH_TOKEN_PATH`` names (even a missing one: Ray then refuses),
    else ``~/.ray/auth_token`` when it holds one. None: none of them."""
    if environ.get(TOKEN_ENV, "").strip():
        return TOKEN_ENV
    if environ.get(TOKEN_PATH_ENV):
        return f"{TOKEN_PATH_ENV}={environ[TOKEN_PATH_ENV]}"
    default = home / DEFAULT_TOKEN
    with contextlib.suppress(OSError):
        if default.read_text().strip():
            return str(default)
    return None


def enable_token_mode() -> str | None:
    """Turn on Ray's token mode for this process and its children when ``RAY_AUTH_MODE`` is unset
    and a token is found (Ray's ``maybe_enable_token_auth_if_token_available``, its warning kept
    quiet). An explicit ``RAY_AUTH_MODE`` is respected. Returns where the token comes from (None:
    no token, or token mode is off).

    Raises:
        RayTokenError: ``RAY_AUTH_TOKEN_PATH`` names a file that cannot be read or is empty.
    """
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
        from ray.exceptions import AuthenticationError
    except ImportError:  # a Ray without token authentication: nothing to send
        return None
    source = token_source(os.environ, Path.home())
    try:
        with _quiet("ray._private.authentication.authentication_token_setup"):
            enabled = maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    except AuthenticationError:
        raise RayTokenError(
            f"{source}: Ray cannot read a token there (a missing or empty file)",
            f"point {TOKEN_PATH_ENV} at the head's token file, or unset it",
        ) from None
    return source if enabled else None


def check_token(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail in one line when the Ray head at `address` (``HOST:PORT``) refuses this process: no
    token while it requires one, or a token that is not its own. A head that refuses a process
    without a token gets one (`enable_token_mode`, when ``RAY_AUTH_MODE`` is unset and a token is
    found). A head that does not answer within `timeout_s`, or answers something else, is left to
    ``ray.init``.

    Raises:
        RayTokenError: naming where the token was looked for (or the mode that kept it from being
            sent), and the fix.
    """
    mode = os.environ.get(MODE_ENV)
    if _probe(address, timeout_s) != "refused":
        return
    source = enable_token_mode() if mode is None else token_source(os.environ, Path.home())
    if source is not None and mode is None and _probe(address, timeout_s) != "refused":
        return
    where = f"the Ray cluster at {address}"
    if mode is not None and mode.lower() != "token":
        raise RayTokenError(
            f"{where} requires a token, and {MODE_ENV}={mode} keeps this process from sending one",
            f"unset {MODE_ENV} (or set it to token)",
        )
    if source is None:
        raise RayTokenError(f"{where} requires a token, and none was found ({WHERE_LOOKED})", FIX)
    raise RayTokenError(f"{where} refused the token from {source}", FIX)


def _probe(address: str, timeout_s: float) -> str:
    """The head's answer to this process's settings: ``ok``, ``refused`` or ``unknown``."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, address],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    words = done.stdout.split()
    return words[-1] if words else "unknown"


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
