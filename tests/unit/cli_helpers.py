"""Calling the CLI through its real parser, as a user would, from unit tests."""

from __future__ import annotations

import pytest

from autotune.cli import main


def run(*argv: str) -> int | str | None:
    """Run ``autotune ARGV`` in this process; its exit code (None or 0: success)."""
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    return info.value.code
