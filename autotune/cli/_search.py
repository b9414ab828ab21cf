"""`autotune search`: run or continue a throughput search.

Its flags are the run options as declared (`autotune.options.OPTIONS`: one typer option per field
of `RunConfig` and `MeasureSettings` that has a flag), plus the command line's own ``--store-retry-s``
and ``--debug``; what was given reaches `RunConfig` through `autotune.options.run_config`. The old
flags of deprecated names (`autotune.options.deprecated_flags`: ``--max-steps``) still work, hidden
from ``--help``, each with a one-line warning on stderr naming the flag to use.
"""

from __future__ import annotations

import inspect
import typing
from typing import Annotated, Any

import typer

from autotune.cli._options import DebugOpt, StoreRetryOpt, apply_store_retry, run_option
from autotune.options import (
    ALIASES,
    BY_NAME,
    GROUPS,
    OPTIONS,
    Option,
    deprecated_flags,
    flag_deprecation,
    run_config,
)


def search_command(**given: Any) -> None:
    """Search the space for the configuration with the highest measured training throughput."""
    context: typer.Context = given.pop("context")
    old = {alias: given.pop(alias) for alias in deprecated_flags().values()}
    given = _with_old_flags(context, given, old)
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
    start_forkserver_for(
        config.model, config.isolation
    )  # before the imports below: both processes import side by side
    from autotune.driver.search import search

    with RichReporter() as reporter:
        search(config, reporter=reporter, debug=debug)


def _with_old_flags(context: typer.Context, given: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """`given` with the values of the deprecated flags in `old` (by their names) under their
    options' names, each one warned of on stderr.

    Raises:
        UsageError: an option given by its flag and its old flag both.
    """
    from autotune.cli._render import print_error
    from autotune.options.declare import resolve_aliases

    given = dict(given)
    old = {alias: value for alias, value in old.items() if value is not None}
    for alias in old:
        name = ALIASES[alias].option
        source = context.get_parameter_source(name)
        if source is None or source.name == "DEFAULT":  # its default, not the user's
            given.pop(name)
    for alias in resolve_aliases({**given, **old}, warn=None):
        print_error(f"warning: {flag_deprecation(alias)}")
    given.update({ALIASES[alias].option: value for alias, value in old.items()})
    return given


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
    parameters = [inspect.Parameter("context", keyword, annotation=typer.Context)]
    parameters += [
        inspect.Parameter(
            option.name,
            keyword,
            default=None if option.default == () else option.default,
            annotation=Annotated[_command_line_type(option), run_option(option.name, panel=True)],
        )
        for option in sorted(OPTIONS, key=lambda option: list(GROUPS).index(option.group))
        if option.flag is not None
    ]
    parameters += [
        inspect.Parameter(
            alias,
            keyword,
            default=None,
            annotation=Annotated[
                _command_line_type(BY_NAME[ALIASES[alias].option]) | None,
                typer.Option(flag, hidden=True, show_default=False),
            ],
        )
        for flag, alias in deprecated_flags().items()
    ]
    parameters.append(inspect.Parameter("store_retry_s", keyword, default=None, annotation=StoreRetryOpt))
    parameters.append(inspect.Parameter("debug", keyword, default=False, annotation=DebugOpt))
    return parameters


search_command.__signature__ = inspect.Signature(_parameters())  # type: ignore[attr-defined]
