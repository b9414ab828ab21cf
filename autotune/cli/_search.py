"""`autotune search`: run or continue a throughput search.

Its flags are the run options as declared (`autotune.options.OPTIONS`: one typer option per field
of `RunConfig` and `MeasureSettings` that has a flag), plus the command line's own ``--store-retry-s``
and ``--debug``; what was given reaches `RunConfig` through `autotune.options.run_config`.
"""

from __future__ import annotations

import inspect
import typing
from typing import Annotated, Any

from autotune.cli._options import DebugOpt, StoreRetryOpt, apply_store_retry, run_option
from autotune.options import BY_NAME, GROUPS, OPTIONS, Option, run_config


def search_command(**given: Any) -> None:
    """Search the space for the configuration with the highest measured training throughput."""
    debug = given.pop("debug")
    apply_store_retry(given.pop("store_retry_s"))
    from autotune.executors.warm import start_forkserver_for
    from autotune.preflight import check_before_creating
    from autotune.view import RichReporter
    from autotune.workloads.hub import require_reachable_model

    config = run_config(None, **{name: _from_command_line(name, value) for name, value in given.items()})
    # A hub id without a hub, an unreachable Ray head or a compile cache that cannot be a folder
    # fails before torch is imported (the driver checks again for its other callers).
    require_reachable_model(config.model)
    check_before_creating(config)
    start_forkserver_for(config)  # before the imports below: both processes import side by side
    from autotune.driver.search import search

    with RichReporter() as reporter:
        search(config, reporter=reporter, debug=debug)


def _command_line_type(option: Option) -> Any:
    """The type typer parses the flag as: a ``Literal`` as text (`RunConfig` checks it), a tuple
    as a repeatable flag."""
    if option.choices:
        return str
    if typing.get_origin(option.type) is tuple:
        return list[str] | None
    return option.type


def _from_command_line(name: str, value: Any) -> Any:
    """A flag's value as the option's type holds it (a repeated flag's list, or None, as a tuple)."""
    return tuple(value or ()) if typing.get_origin(BY_NAME[name].type) is tuple else value


def _parameters() -> list[inspect.Parameter]:
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [
        inspect.Parameter(
            option.name,
            keyword,
            default=None if option.default == () else option.default,
            annotation=Annotated[_command_line_type(option), run_option(option.name, panel=True)],
        )
        for option in sorted(OPTIONS, key=lambda option: list(GROUPS).index(option.group))
        if option.flag is not None
    ]
    parameters.append(inspect.Parameter("store_retry_s", keyword, default=None, annotation=StoreRetryOpt))
    parameters.append(inspect.Parameter("debug", keyword, default=False, annotation=DebugOpt))
    return parameters


search_command.__signature__ = inspect.Signature(_parameters())  # type: ignore[attr-defined]
