"""A trial process starts its own children as a user's run does: a data loader's workers in a
forkserver worker start with the interpreter's default method, not with the forkserver's."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest

from autotune.trial.process import as_a_users_run


def _report(queue: Any, fix: bool) -> None:
    if fix:
        as_a_users_run()
    queue.put(multiprocessing.get_start_method(allow_none=True))


def _start_method_in_a_forkserver_child(fix: bool) -> str | None:
    context = multiprocessing.get_context("forkserver")
    queue = context.Queue()
    child = context.Process(target=_report, args=(queue, fix))
    child.start()
    try:
        return queue.get(timeout=60)
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
            child.join(timeout=10)


def test_a_forkserver_child_starts_its_children_as_a_users_run_does() -> None:
    default = multiprocessing.get_all_start_methods()[0]
    if default == "forkserver":
        pytest.skip("this interpreter's own default is the forkserver")
    # what a forkserver child inherits: every data-loader worker a fresh interpreter
    assert _start_method_in_a_forkserver_child(fix=False) == "forkserver"
    assert _start_method_in_a_forkserver_child(fix=True) == default
