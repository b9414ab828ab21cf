"""autotune: measure, don't guess, the fastest way to train a Hugging Face model on your hardware.

The public API is re-exported here; modules behind it may move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.answer.model import Answer, Choice
from autotune.errors import (
    AutotuneError,
    SearchFailed,
    SpaceError,
    StoreError,
    Unreachable,
    UsageError,
    WorkloadError,
)
from autotune.options import MeasureSettings, RunConfig, parse_memory_cap
from autotune.progress import Reporter, SearchHeader
from autotune.records import StudyRecord, TrialRecord, read_study, read_trial
from autotune.space import SearchSpace, load_space

if TYPE_CHECKING:  # imported lazily below; named here for type checkers and the API reference
    from autotune.driver.search import SearchResult, search
    from autotune.driver.tune import NotIsolatedWarning, TuneResult, tune
    from autotune.store.session import StudyStore
    from autotune.view import RichReporter

__version__ = "0.1.0"

__all__ = [
    "Answer",
    "AutotuneError",
    "Choice",
    "MeasureSettings",
    "NotIsolatedWarning",
    "Reporter",
    "RichReporter",
    "RunConfig",
    "SearchFailed",
    "SearchHeader",
    "SearchResult",
    "SearchSpace",
    "SpaceError",
    "StoreError",
    "StudyRecord",
    "StudyStore",
    "TrialRecord",
    "TuneResult",
    "Unreachable",
    "UsageError",
    "WorkloadError",
    "__version__",
    "load_space",
    "parse_memory_cap",
    "read_study",
    "read_trial",
    "search",
    "tune",
]


def __getattr__(name: str):  # torch and transformers load only when a search is asked for
    if name in ("search", "SearchResult"):
        from autotune.driver import search as driver

        return getattr(driver, name)
    if name in ("tune", "TuneResult", "NotIsolatedWarning"):
        from autotune.driver import tune

        return getattr(tune, name)
    if name == "StudyStore":  # a stored study, as `SearchResult.study` holds it
        from autotune.store.session import StudyStore

        return StudyStore
    if name == "RichReporter":  # the live view of a search (the CLI's too), for scripts that call search/tune
        from autotune.view import RichReporter

        return RichReporter
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
