"""The compile cache a study's trials share, and what compiling cost a trial.

Left alone, inductor keeps its FX graph cache and AOTAutograd cache in a per-user temporary folder
(``/tmp/torchinductor_$USER``): a fresh worker on the same host already reuses them, but the folder
is the temporary directory's (cleared on reboot, private to a container, one per host), and nothing
says which search filled it. Every trial process of a study points inductor (and Triton) at one
folder instead, chosen from the study alone, so every worker, the finalists, a resumed search and,
through shared storage, pool members on other hosts compile a configuration cold once. Dynamo's
tracing is not cached by torch: a warm trial still traces its graphs (about a second for a tiny
model), then loads the compiled code.

`compile_cache_folder` is pure (no torch); `shared_compile_cache` sets the environment before
anything compiles; `CompileMeter` reads dynamo's own timers and inductor's cache counters.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from autotune.urls import sqlite_file

if TYPE_CHECKING:
    from autotune.plan.resolved import Plan

CompileCache = Literal["hit", "miss", "partial"]

# Where inductor keeps its caches (FX graphs, AOTAutograd, autotuning) and Triton its kernels.
_CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def compile_cache_folder(storage_url: str, study_name: str, chosen: str | None = None) -> Path:
    """The folder a study's trials compile into: `chosen` (``--compile-cache``) when given; for a
    SQLite store, next to its file (``x.db.compile-cache``: one cache per store, shared by its
    studies); for a server store (or in-memory SQLite), a folder of the user's cache directory
    named after the study."""
    if chosen:
        return Path(chosen).expanduser().absolute()
    database = sqlite_file(storage_url)
    if database is not None:
        return database.expanduser().absolute().with_name(database.name + ".compile-cache")
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    safe_name = re.sub(r"[^A-Za-z0-9_.-]", "_", study_name) or "study"
    return Path(cache_home, "autotune", "compile-cache", safe_name).absolute()


def study_compile_cache(plan: Plan) -> Path:
    """The compile cache folder every process of the plan's study shares (`compile_cache_folder`)."""
    return compile_cache_folder(plan.config.storage_url, plan.study_name, plan.config.compile_cache)


@contextlib.contextmanager
def shared_compile_cache(folder: Path) -> Iterator[Path]:
    """Compile into `folder` inside this block (inductor's caches, Triton's kernels under
    ``triton/``); the environment is restored after it. In a fresh trial process this must start
    before the first compilation; in a process that compiled before (``--isolation none``), the
    cache locations inductor memoized are dropped on the way in and out."""
    folder.mkdir(parents=True, exist_ok=True)
    before = {name: os.environ.get(name) for name in _CACHE_ENV}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    os.environ["TRITON_CACHE_DIR"] = str(folder / "triton")
    _clear_memoized_locations()
    try:
        yield folder
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _clear_memoized_locations()


def _clear_memoized_locations() -> None:
    import sys

    utils = sys.modules.get("torch._inductor.utils")  # nothing memoized when it was never imported
    if utils is not None:
        with contextlib.suppress(Exception):
            utils.clear_caches()


# Inductor's and AOTAutograd's counters of cache lookups (torch/_inductor/codecache.py,
# torch/_functorch/_aot_autograd/autograd_cache.py).
_HITS = (("inductor", "fxgraph_cache_hit"), ("aot_autograd", "autograd_cache_hit"))
_MISSES = (("inductor", "fxgraph_cache_miss"), ("aot_autograd", "autograd_cache_miss"))


def cache_verdict(hits: int, misses: int) -> CompileCache | None:
    """``hit`` when every lookup hit, ``miss`` when none did, ``partial`` between; None when
    nothing was looked up (nothing compiled, or compiled with a backend that caches nothing)."""
    if hits == 0 and misses == 0:
        return None
    if misses == 0:
        return "hit"
    return "miss" if hits == 0 else "partial"


class CompileMeter:
    """What compiling cost between `start` and `read`, from torch's own bookkeeping.

    ``compile_s`` is dynamo's ``entire_frame_compile`` plus ``entire_backward_compile`` (tracing,
    AOTAutograd and inductor, cache loads included; `torch._dynamo.utils.calculate_time_spent`):
    the compiler's own wall time, not an estimate from slow warm-up steps. Inductor's run-time
    autotuning (``max-autotune``) on a kernel's first call is outside it and stays in the warm-up.
    `start` must come after any ``torch._dynamo.reset()``, which zeroes those timers.
    """

    def __init__(self) -> None:
        self._compile_s = 0.0
        self._counts: tuple[int, int] = (0, 0)

    def start(self) -> None:
        self._compile_s, self._counts = _compile_seconds(), _lookups()

    def read(self) -> dict[str, Any]:
        """``compile_s`` (seconds) and ``compile_cache`` (see `cache_verdict`) since `start`."""
        hits, misses = _lookups()
        return {
            "compile_s": max(0.0, _compile_seconds() - self._compile_s),
            "compile_cache": cache_verdict(hits - self._counts[0], misses - self._counts[1]),
        }


def _compile_seconds() -> float:
    from torch._dynamo.utils import calculate_time_spent

    return float(calculate_time_spent().get("total_wall_time", 0.0))


def _lookups() -> tuple[int, int]:
    from torch._dynamo.utils import counters

    def total(keys: tuple[tuple[str, str], ...]) -> int:
        return sum(int(counters[group][name]) for group, name in keys)

    return total(_HITS), total(_MISSES)


# What each configuration cost to compile cold, kept in the cache folder beside the compiled code.
_COLD_FILE = "cold-compile.json"


def compile_key(identity: Mapping[str, Any]) -> str:
    """A configuration's key among the cold figures: the workload and knob values it compiled."""
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cold_compile_s(folder: Path, key: str, seconds: float, cache: CompileCache | None) -> float | None:
    """The seconds configuration `key` takes to compile without a cache. A trial that compiled cold
    (`cache` ``miss``) records its `seconds` in `folder` and returns them; one the cache served
    (``hit``/``partial``) returns what the cold trial recorded, or None when none did (a cache
    filled by something else). A user's run compiles cold: its predicted time takes this figure,
    not the warm trial's. Concurrent writers may lose each other's entries, never corrupt the file
    (written whole, then renamed)."""
    if cache is None:
        return None
    path = folder / _COLD_FILE
    known = _read_json(path)
    if cache != "miss":
        value = known.get(key)
        return float(value) if isinstance(value, int | float) else None
    known[key] = float(seconds)
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f".{_COLD_FILE}.{os.getpid()}")
        scratch.write_text(json.dumps(known, indent=1), encoding="utf-8")
        scratch.replace(path)
    return float(seconds)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
