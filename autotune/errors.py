"""The one exception tree of autotune. The CLI turns these into one line plus a hint."""

from __future__ import annotations


def first_line(exc: BaseException, *, empty: str | None = None) -> str:
    """The first line of an exception's message that says something, stripped: what a one-line
    report of it shows. `empty` (by default the exception's type name) when the message is blank."""
    lines = str(exc).strip().splitlines()
    if lines:
        return lines[0].strip()
    return type(exc).__name__ if empty is None else empty


class AutotuneError(Exception):
    """Base class of every error autotune raises on purpose.

    Args:
        message: what is wrong, naming the bad value; a run option by its field name
            (``train_steps``), as a caller of `autotune.search` or `autotune.tune` spells it.
        hint: what to do about it (ideally a command), shown after the message.
        field: the run option(s) the message and hint name (`RunConfig` or `MeasureSettings`
            fields), by which a caller tells what was refused; the CLI prints each one's flag in
            its place (`autotune.options.command_line_text`).
    """

    exit_code = 1

    def __init__(
        self, message: str, hint: str | None = None, *, field: str | tuple[str, ...] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.fields: tuple[str, ...] = (field,) if isinstance(field, str) else tuple(field or ())

    @property
    def field(self) -> str | None:
        """The (first) run option the error is about; None when it names none."""
        return self.fields[0] if self.fields else None

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(AutotuneError):
    """The user asked for something invalid: a bad option value, space file or model name (exit code 2)."""

    exit_code = 2


class SpaceError(UsageError):
    """A search space file is invalid."""


class WorkloadError(UsageError):
    """The model or data cannot be resolved."""


class Unreachable(AutotuneError):
    """A service the run names (a Ray head) does not answer at its address: what the world refused,
    not bad input (exit code 1)."""


class StoreError(AutotuneError):
    """The study store cannot be opened or holds something unexpected."""


class RayTokenError(AutotuneError):
    """A Ray cluster refuses this process: it requires a token that was not found, was not sent
    (``RAY_AUTH_MODE``), or is not its own (exit code 1)."""


class StoreFull(StoreError):
    """A store write failed because the disk or the database is full: reported at once, never
    retried (no wait cures it; someone has to free space)."""


class SearchFailed(AutotuneError):
    """Every trial of a search failed the same way: the one error, not an empty answer (exit code
    1: what the machine or the model refused).

    Args:
        reason: the failure's reason (one of `autotune.store.outcomes`).
        trials: how many trials failed so.
    """

    def __init__(self, message: str, hint: str | None = None, *, reason: str, trials: int) -> None:
        super().__init__(message, hint)
        self.reason = reason
        self.trials = trials
