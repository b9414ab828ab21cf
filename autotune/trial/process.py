"""The start of every trial process, written once: a forkserver worker, each rank of a torchrun
group. It takes the job's environment and share of the machine, sends its output to the job's
log (whose tail explains a crash), dies with its parent, ends itself (and everything it
started) as soon as the supervisor that asked for it is gone, draws an address-space layout of its
own, and starts the processes it starts itself (a data loader's workers) as a user's own run does."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import faulthandler
import mmap
import os
import signal
import threading
import time
from typing import Any

from autotune.store.owner import Owner, is_alive
from autotune.trial.job import Job

# The most pages (mmap) and 64-byte chunks (malloc) a process's own layout shifts its allocations by.
LAYOUT_PAGES = 512
LAYOUT_CHUNKS = 16384
_LAYOUT: list[Any] = []  # the shifts this process drew, held for its life


def become_trial_process(job: Job, *, own_group: bool, redirect_output: bool) -> None:
    """Set up this fresh process for `job`.

    Args:
        job: the job it runs.
        own_group: make a process group of its own (a forkserver worker: the watchdog kills the
            group, data-loader and compile workers included). A torchrun rank is already in the
            group the supervisor made for torchrun.
        redirect_output: send stdout and stderr to the job's log (torchrun sends its ranks'
            output there itself).
    """
    if own_group:
        os.setpgrp()
    die_with_parent()
    if job.supervisor is not None:
        threading.Thread(target=_watch_supervisor, args=(job.supervisor,), daemon=True).start()
    os.environ.update(job.env)
    if job.cuda_device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = job.cuda_device  # before CUDA is initialised here
    if redirect_output and job.log_path:
        log = os.open(job.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
    faulthandler.enable()  # a segfault leaves its Python traceback in the log
    draw_own_layout()
    as_a_users_run()
    if job.cpu_cores:
        import torch

        os.sched_setaffinity(0, job.cpu_cores)
        torch.set_num_threads(len(job.cpu_cores))


def draw_own_layout() -> tuple[int, int]:
    """Shift where this process's allocations land by a random amount: a region of 1 to
    `LAYOUT_PAGES` pages mapped and never touched (placed at the top of the highest gap of the
    address space it fits, it moves the mappings placed after it in that gap, pymalloc's arenas
    and large tensor buffers, that much lower; where a parent's libraries left holes, only those
    placed in the same one), and a block of 64 to 64 x `LAYOUT_CHUNKS` bytes taken from malloc
    (what is taken after it from the heap's top lands that much higher; a small block served from
    a free bin does not move).
    Neither is touched, so neither counts in the process's resident memory. Returns the pages and
    bytes drawn.

    A forked child inherits its parent's layout, so every child of one forkserver places its
    buffers alike, and a layout sets one configuration's speed against another's: children of
    parents alive at once, interleaved in time, measure one pair at ratios that differ by parent,
    each parent's rounds agreeing (`benchmarks.layout_noise`; its figures are in RESULTS.md). A
    user's run is a fresh interpreter, whose layout address-space randomization draws anew. With
    a layout of its own, each measurement draws one as a user's run does: most of the layout's
    effect becomes noise between measurements, which the rounds see and average, not a bias
    shared by every measurement of a search."""
    draw = int.from_bytes(os.urandom(8), "little")
    pages, size = 1 + draw % LAYOUT_PAGES, 64 * (1 + (draw >> 16) % LAYOUT_CHUNKS)
    _LAYOUT.append(mmap.mmap(-1, pages * mmap.PAGESIZE))
    with contextlib.suppress(Exception):  # no C library to ask: the mapping's shift alone
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        _LAYOUT.append(libc.malloc(size))
    return pages, size


def as_a_users_run() -> None:
    """Start this process's own children with the interpreter's default method, as a user's
    training script does. A process started by a forkserver inherits ``forkserver`` as its
    default, so a data loader's workers would each start a fresh interpreter that imports torch
    (seconds before the first batch) where a user's run forks them."""
    import multiprocessing

    default = multiprocessing.get_all_start_methods()[0]  # documented: the first is the default
    if multiprocessing.get_start_method(allow_none=True) != default:
        multiprocessing.set_start_method(default, force=True)


def die_with_parent() -> None:
    """End this process with its parent. A forkserver worker's parent is the forkserver, which
    exits when the supervisor does (even on SIGKILL), once no process holds the write end of its
    "alive" pipe. multiprocessing hands each child a copy (for grandchildren started from the
    forkserver): close it, or the forkserver outlives the supervisor as long as this process runs."""
    from multiprocessing import forkserver

    server: Any = getattr(forkserver, "_forkserver", None)
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    if alive_fd is not None:
        with contextlib.suppress(OSError):
            os.close(alive_fd)
        server._forkserver_alive_fd = None
    kill_me_with_my_parent()
    if os.getppid() == 1:  # the parent died before the line above took effect
        os._exit(1)


def kill_me_with_my_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent ends (``PR_SET_PDEATHSIG``; it survives
    ``exec``, so a launcher can call it in a child before the program starts)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)


def _watch_supervisor(supervisor: Owner) -> None:
    """End this process's group as soon as its supervisor is gone (killed with SIGKILL, say): a
    trial process must never outlive what started it."""
    while is_alive(supervisor):
        time.sleep(0.5)
    os.killpg(os.getpgrp(), signal.SIGKILL)
