"""The forkserver that workers start from, started as early as possible.

Workers start from a forkserver that has already imported torch, transformers (the package is
lazy: `transformers.trainer` must be named) and autotune's trial modules, so a worker starts in
milliseconds instead of paying the imports. Never plain `fork` after torch has run threaded work:
the child deadlocks in OpenMP. A preload module that fails to import is skipped silently by
multiprocessing, so `autotune.executors._preload` imports them all and fails loudly instead.
This module imports nothing heavy: the CLI starts the forkserver before its own imports.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
from multiprocessing import popen_forkserver, spawn
from typing import Any

PRELOAD = ["autotune.executors._preload"]


class _WorkerPopen(popen_forkserver.Popen):
    """A forkserver launch that does not make the worker import the caller's ``__main__``.

    multiprocessing re-imports the parent's main script in every child it does not fork, so a
    user's script that calls `autotune.search()` at module level would run again in each worker
    (and fail there). The worker's target lives in autotune, which needs no main module.
    """

    def _launch(self, process_obj: Any) -> None:
        original = spawn.get_preparation_data

        def without_main(name: str) -> dict[str, Any]:
            data = original(name)
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
            return data

        spawn.get_preparation_data = without_main  # read by the base class's _launch
        try:
            super()._launch(process_obj)  # type: ignore[misc]
        finally:
            spawn.get_preparation_data = original


class ForkServerProcess(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _WorkerPopen(process_obj)


def forkserver_context() -> Any:
    """The multiprocessing context workers start from (its server is started on first use)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def start_forkserver() -> None:
    """Start the forkserver now, in the background: it imports while the caller goes on (planning,
    opening the store), instead of when the first worker is asked for."""
    from multiprocessing import forkserver

    forkserver_context()
    forkserver.ensure_running()


def start_forkserver_for(model: str, isolation: str) -> None:
    """Start the forkserver early for a run whose trials will need it: its imports (torch,
    transformers: about 3 s) then overlap the caller's own. Not for an ``org/name`` hub id, whose
    lookup may fail on the network: a run that stops there should stop fast. Decided without
    importing the workload code (it imports torch)."""
    local_model = os.path.isdir(model) or "/" not in model
    if isolation == "process" and local_model:
        start_forkserver()
