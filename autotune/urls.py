"""Storage URLs as users write them: which driver they reach, and how they are shown.

Pure (SQLAlchemy's URL parser only): the CLI, the config and the store call these without opening
anything. Below `config` and `study/` alike, it imports nothing of autotune but its errors.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from autotune.errors import UsageError

URL_HINT = "use sqlite:///autotune.db, postgresql://user@host:5432/db or mysql://user@host:3306/db"

# `user:password@` in a URL that SQLAlchemy could not parse: hidden all the same.
_RAW_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def parse_url(url: str) -> URL:
    """A storage URL parsed by SQLAlchemy.

    Raises:
        UsageError: not a database URL (the message shows it with its password hidden).
    """
    try:
        if "://" not in url:
            raise ArgumentError(url)
        return make_url(url)
    except (ArgumentError, ValueError):
        raise UsageError(f"invalid storage URL {display_url(url)!r}", URL_HINT) from None


def display_url(url: str) -> str:
    """The URL as it may be printed, logged or stored: its password replaced by ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return _RAW_PASSWORD.sub(r"\1***@", url)


def password_of(url: str) -> str | None:
    """The URL's password (to scrub it from driver messages), or None."""
    try:
        return make_url(url).password
    except (ArgumentError, ValueError):
        return None


def without_password(text: str, password: str | None) -> str:
    """`text` with `password` scrubbed, should a driver echo it in a message."""
    return text.replace(password, "***") if password else text


def engine_url(url: str) -> str:
    """The URL handed to SQLAlchemy: the driver users mean when they name none.

    - ``postgres://`` (Heroku's and libpq's spelling, which SQLAlchemy dropped) is ``postgresql://``,
      whose default driver in SQLAlchemy 2 is psycopg 3 (the ``postgres`` extra).
    - ``mysql://`` and ``mariadb://`` default to mysqlclient, which has no Linux wheel; without it
      they use PyMySQL (pure Python, the ``mysql`` extra).
    - A URL that names its driver (``postgresql+psycopg2://``, ``mysql+mysqldb://``) is kept as given.

    Raises:
        UsageError: not a database URL.
    """
    parsed = parse_url(url)
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "postgres":
        backend = "postgresql"
    if backend in ("mysql", "mariadb") and not driver and importlib.util.find_spec("MySQLdb") is None:
        driver = "pymysql"
    drivername = f"{backend}+{driver}" if driver else backend
    if drivername != parsed.drivername:
        parsed = parsed.set(drivername=drivername)
    return parsed.render_as_string(hide_password=False)


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL (None for other databases and in-memory SQLite)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)
