"""A trial process starts its own children as a user's run does: a data loader's workers in a
forkserver worker start with the interpreter's default method, not with the forkserver's; and it
draws an address-space layout of its own, where a forkserver's children would share one."""

from __future__ import annotations

import ast
import ctypes
import mmap
import multiprocessing
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.trial.job import Job
from autotune.trial.process import LAYOUT_CHUNKS, LAYOUT_PAGES, as_a_users_run, draw_own_layout

ROOT = Path(__file__).resolve().parents[2]


def _from_a_forkserver_child(target: Any, *args: Any) -> Any:
    """What `target(queue, *args)` puts on its queue, run in a child of this session's forkserver."""
    context = multiprocessing.get_context("forkserver")
    queue = context.Queue()
    child = context.Process(target=target, args=(queue, *args))
    child.start()
    try:
        return queue.get(timeout=60)
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
            child.join(timeout=10)


def _report(queue: Any, fix: bool) -> None:
    if fix:
        as_a_users_run()
    queue.put(multiprocessing.get_start_method(allow_none=True))


def test_a_forkserver_child_starts_its_children_as_a_users_run_does() -> None:
    default = multiprocessing.get_all_start_methods()[0]
    if default == "forkserver":
        pytest.skip("this interpreter's own default is the forkserver")
    # what a forkserver child inherits: every data-loader worker a fresh interpreter
    assert _from_a_forkserver_child(_report, False) == "forkserver"
    assert _from_a_forkserver_child(_report, True) == default


def _where(queue: Any, draw: bool) -> None:
    """Where this forkserver child's next mapping lands, and what its layout drew (None: none)."""
    drawn = draw_own_layout() if draw else None
    region = mmap.mmap(-1, 1 << 20)
    queue.put((ctypes.addressof(ctypes.c_char.from_buffer(region)), drawn))


def _children_report(draw: bool, children: int = 4) -> list[tuple[int, tuple[int, int] | None]]:
    return [_from_a_forkserver_child(_where, draw) for _ in range(children)]


# Run in a fresh interpreter, whose forkserver preloads nothing: its children's address space
# has no hole a small mapping could fill, so a mapping made after the draw lands below it. (A
# forkserver that preloaded torch, as this session's may have, leaves holes between its
# libraries: a draw placed in one moves only the later mappings placed in that hole.)
_REPORT = "from tests.unit.test_trial_process import _children_report as r; print(repr((r(False), r(True))))"


def test_each_trial_process_draws_a_layout_of_its_own_where_a_forkserver_child_inherits_one() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _REPORT], cwd=ROOT, capture_output=True, text=True, timeout=180, check=True
    )
    inherited, drawn = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert len({address for address, _ in inherited}) == 1  # every child maps where its parent would
    # 4 draws among 512 shifts: all alike with a chance of 1 in 512^3
    assert len({address for address, _ in drawn}) > 1
    for _, (pages, size) in drawn:
        assert 1 <= pages <= LAYOUT_PAGES and 64 <= size <= 64 * LAYOUT_CHUNKS and size % 64 == 0
    assert len({d for _, d in drawn}) > 1


def _layouts_after_start(queue: Any) -> None:
    from autotune.trial import process

    before = len(process._LAYOUT)
    process.become_trial_process(Job("s", "sqlite://"), own_group=False, redirect_output=False)
    queue.put(len(process._LAYOUT) - before)


def test_a_trial_process_draws_its_layout_as_it_starts() -> None:
    assert _from_a_forkserver_child(_layouts_after_start) == 2  # the mapping and the heap's block
