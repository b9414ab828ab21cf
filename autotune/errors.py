"""The one exception tree of autotune. The CLI turns these into one line plus a hint."""

from __future__ import annotations


class AutotuneError(Exception):
    """Base class of every error autotune raises on purpose.

    Args:
        message: what is wrong, naming the bad value.
        hint: what to do about it (ideally a command), shown after the message.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(AutotuneError):
    """The user asked for something invalid: a bad flag value, space file or model name (exit code 2)."""

    exit_code = 2


class SpaceError(UsageError):
    """A search space file is invalid."""


class WorkloadError(UsageError):
    """The model or data cannot be resolved."""


class StoreError(AutotuneError):
    """The study store cannot be opened or holds something unexpected."""
