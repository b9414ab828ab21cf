"""Test-wide settings and fixtures.

GPU tests are skipped where there is no CUDA device. `postgres_url` and `mysql_url` are fresh
databases on the real servers (PostgreSQL 127.0.0.1:5432, user postgres; MariaDB/MySQL
127.0.0.1:3306, root without password; override with AUTOTUNE_TEST_POSTGRES / AUTOTUNE_TEST_MYSQL,
the server URL without a database), one per test session, dropped afterwards.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy
import torch

from autotune.executors.processes import descendants
from autotune.scratch import PREFIX, owner_of, sweep
from autotune.store.owner import is_alive, is_local
from autotune.urls import display_url, engine_url

POSTGRES_SERVER = os.environ.get("AUTOTUNE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
MYSQL_SERVER = os.environ.get("AUTOTUNE_TEST_MYSQL", "mysql://root@127.0.0.1:3306")


def _autotune_folders() -> set[str]:
    folder = tempfile.gettempdir()
    return {
        os.path.join(folder, name)
        for name in os.listdir(folder)
        if name.startswith(PREFIX) and os.path.isdir(os.path.join(folder, name))
    }


def _another_runs(folder: str) -> bool:
    """Whether `folder` belongs to a live process outside this test run (another search or test
    run on this machine): not this run's to judge."""
    owner = owner_of(folder)
    if owner is None or not is_local(owner) or not is_alive(owner):
        return False
    ours = {os.getpid(), *(pid for pid, _ in descendants(os.getpid()))}
    return owner.pid not in ours


@pytest.fixture(scope="session", autouse=True)
def no_stray_folders() -> Iterator[None]:
    """A run of the tests leaves no ``autotune-*`` folder in the temporary folder. Tests kill
    searches on purpose (SIGKILL leaves a search no chance to clean up): their folders are
    removed as the next search on this machine would (`autotune.scratch.sweep`: the owner is
    dead); what is left after that is a folder of a process still running (a leaked worker or Ray
    instance) or one made without an owner's stamp, and fails the run."""
    before = _autotune_folders()
    yield
    sweep()
    left = sorted(f for f in _autotune_folders() - before if not _another_runs(f))
    if left:
        pytest.fail(f"the tests left {len(left)} autotune folder(s): {', '.join(left)}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _fresh_database(server: str, admin_database: str, drop: str) -> Iterator[str]:
    """Create a uniquely named database on `server`, yield its URL as users write it, drop it."""
    name = f"autotune_test_{uuid.uuid4().hex[:12]}"
    admin_url = engine_url(f"{server}/{admin_database}")
    connect_args = {"connect_timeout": 10}
    admin = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT", connect_args=connect_args)
    try:
        with admin.connect() as connection:
            connection.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    except sqlalchemy.exc.OperationalError as exc:
        admin.dispose()
        reason = f"no database server at {display_url(server)}: {str(exc).splitlines()[0]}"
        if os.environ.get("CI"):  # CI starts the servers (.ci/run): a missing one is a failure
            pytest.fail(reason)
        pytest.skip(f"{reason} (start it, or set AUTOTUNE_TEST_POSTGRES / AUTOTUNE_TEST_MYSQL)")
    try:
        yield f"{server}/{name}"
    finally:
        # `drop` ends the connections the tests' stores still pool (PostgreSQL's FORCE), or bounds
        # the wait for one that holds a lock (MariaDB's lock_wait_timeout, a year by default).
        with admin.connect() as connection:
            for statement in drop.format(name=name).split(";"):
                connection.execute(sqlalchemy.text(statement))
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """``postgresql://postgres@127.0.0.1:5432/<fresh database>``, dropped after the session."""
    yield from _fresh_database(POSTGRES_SERVER, "postgres", "DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def mysql_url() -> Iterator[str]:
    """``mysql://root@127.0.0.1:3306/<fresh database>``, dropped after the session."""
    yield from _fresh_database(
        MYSQL_SERVER, "mysql", "SET SESSION lock_wait_timeout = 60; DROP DATABASE IF EXISTS {name}"
    )


@pytest.fixture
def roomy_finalists(monkeypatch: pytest.MonkeyPatch) -> None:
    """The finalists' budget is the test's, not 30% of this machine's wall time: a test of what the
    rounds decide needs its rounds whatever the machine's speed (a tiny search's share of a few
    seconds pays for one or two; the budget's own rules are tested on a fake clock,
    tests/unit/test_finalists.py). The driver runs in the test's process: the patch reaches it."""
    monkeypatch.setattr("autotune.driver.trials.finalists_budget_s", lambda spent_s: 600.0)
