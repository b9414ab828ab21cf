"""Sizes as users write them: a memory cap (``20GiB``, ``90%``) parsed (`parse_memory_cap`) and
turned into bytes in one place (`cap_bytes`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from autotune.errors import UsageError

_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


@dataclass(frozen=True)
class MemoryCap:
    """A memory cap: an absolute size, or a fraction of the device's memory.

    Attributes:
        kind: ``"bytes"`` or ``"fraction"``.
        value: bytes for ``"bytes"``; a number in (0, 1] for ``"fraction"``.
        text: what the user wrote, for messages and the store.
    """

    kind: Literal["bytes", "fraction"]
    value: float
    text: str

    def resolve(self, device_total_bytes: int) -> int:
        """The cap in bytes on a device with `device_total_bytes` of memory."""
        if self.kind == "bytes":
            return int(self.value)
        return int(self.value * device_total_bytes)


def cap_bytes(text: str | None, device_memory_bytes: int, *, study: str | None = None) -> int | None:
    """A memory cap as written (``20GiB``, ``90%``; None: no cap) in bytes on a device of
    `device_memory_bytes`: the one place a cap becomes bytes. For a stored `study` (its name), a
    fraction needs the device memory the study recorded.

    Raises:
        UsageError: not a cap, or a fraction and the study does not record its device's memory.
    """
    if text is None:
        return None
    cap = parse_memory_cap(text)
    if study is not None and cap.kind == "fraction" and device_memory_bytes <= 0:
        raise UsageError(
            f"memory_cap={text!r}: study {study!r} does not record its device's memory",
            "give the cap as a size, like 20GiB",
            field="memory_cap",
        )
    return cap.resolve(device_memory_bytes)


def parse_memory_cap(text: str) -> MemoryCap:
    """Parse ``20GiB``, ``20GB``, ``20000MiB``, ``90%`` or ``0.9`` (a fraction of the device).

    Raises:
        UsageError: the text is not one of those forms.
    """
    raw = text.strip()
    hint = "write a size like 20GiB, 20GB or 20000MiB, or a share of the device like 90% or 0.9"
    if raw.endswith("%"):
        try:
            percent = float(raw[:-1])
        except ValueError:
            raise UsageError(f"invalid memory cap {text!r}", hint) from None
        if not 0 < percent <= 100:
            raise UsageError(f"invalid memory cap {text!r}: a percentage must be in (0, 100]", hint)
        return MemoryCap("fraction", percent / 100, raw)
    match = _SIZE.match(raw)
    if match is None:
        raise UsageError(f"invalid memory cap {text!r}", hint)
    number, unit = float(match.group(1)), match.group(2).lower()
    if not unit:
        if 0 < number <= 1:
            return MemoryCap("fraction", number, raw)
        raise UsageError(f"invalid memory cap {text!r}: a bare number is a fraction in (0, 1]", hint)
    if unit not in _UNITS:
        raise UsageError(f"invalid memory cap {text!r}: unknown unit {match.group(2)!r}", hint)
    size = number * _UNITS[unit]
    if size < 1:
        raise UsageError(f"invalid memory cap {text!r}: must be positive", hint)
    return MemoryCap("bytes", size, raw)
