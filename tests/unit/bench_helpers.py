"""Rendering a benchmark's RESULTS.md section in a test: its text with the table padding that
tabulate adds collapsed, so that a test names a row as ``| a | b |``, and its claims."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any


def section(module: ModuleType, data: dict[str, Any], claims: list[str] | None = None, name: str = "") -> str:
    """`module`'s section of `data` (``render_NAME`` with `name`), its claims added to `claims`."""
    suffix = f"_{name}" if name else ""
    text = getattr(module, f"render{suffix}")(data)
    if claims is not None:
        claims.extend(getattr(module, f"claims{suffix}")(data))
    return re.sub(r" {2,}", " ", text)
