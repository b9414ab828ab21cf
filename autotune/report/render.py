"""The report's jinja2 templates (package data under ``templates/``), rendered with autoescape on.

Every value a template shows is escaped unless it is `Markup`: study names, knob names and trial
messages come from the store and may hold ``<`` or ``&``. Only the figures' divs, which plotly
writes, enter as `Markup`. Values are escaped as `html.escape` escapes them (a quote as ``&#x27;``
rather than markupsafe's ``&#39;``), so the page spells escaped text as the rest of autotune does.
"""

from __future__ import annotations

import functools
import html
from typing import Any


def render(template: str, **context: Any) -> str:
    """`template` (a file name under ``templates/``) rendered with `context`."""
    return _environment().get_template(template).render(**context)


def markup(text: str) -> Any:
    """`text` marked safe: a template shows it as it is (HTML that autotune or plotly wrote)."""
    from markupsafe import Markup

    return Markup(text)


@functools.cache
def _environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("autotune.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        finalize=_escape,
    )


def _escape(value: Any) -> Any:
    """`value` escaped by `html.escape` (`Markup` as it is): autoescape leaves the result alone."""
    from markupsafe import Markup

    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value)))
