"""The one schema version of what autotune stores with a study, and the one check of it.

A study holds its facts (`autotune.records`: the study's and its trials' user attrs, stamped
``schema_version``) and its run configuration (`autotune.options.RunConfig.to_dict`, stamped
``schema`` and the ``autotune_version`` that wrote it). Both carry this one number, raised whenever
something is stored that an older autotune would misread: a key added, a value whose meaning
changed, facts moved to keys of their own. Older stores read as they are: their facts with the
defaults of what they lack. A store newer than this autotune is refused in one line.

Versions: 0 (stored no version): the first stores. 1: the stored answer and the finalists'
per-round figures; the run configuration's version. 3: ``peft``. 4: the whole-run check's options,
and activation probes and whole-run checks stored one attr each (the record and the run
configuration share this number from 4 on). 5: the measurement options' names (``settle_steps``,
``measure_steps``, ... for ``warmup_steps``, ``max_steps``, ...), which an older autotune would read
as defaults.
"""

from __future__ import annotations

from typing import Any

from autotune.errors import UsageError

SCHEMA_VERSION = 5


def autotune_version() -> str:
    from autotune import __version__

    return __version__


def check_schema(what: str, version: Any, writer: str | None = None) -> None:
    """Refuse `what` (``"study 'x'"``, ``"the study's run configuration"``), stored with schema
    `version` by autotune `writer` (None: not recorded), when it is newer than this autotune's.

    Raises:
        UsageError: the version is not a number, or is newer (the message names both autotune
            versions, the hint how to upgrade).
    """
    if not isinstance(version, int) or isinstance(version, bool):
        raise UsageError(f"{what} has an invalid schema {version!r}")
    if version <= SCHEMA_VERSION:
        return
    writer = writer or "a newer version"
    raise UsageError(
        f"{what} has schema {version} (written by autotune {writer}), "
        f"newer than schema {SCHEMA_VERSION} of this autotune {autotune_version()}",
        f"upgrade autotune on this worker to {writer} or later",
    )
