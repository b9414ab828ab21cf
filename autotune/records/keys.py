"""How a record's field names its stored user-attr key (``key`` in the field's metadata), and how
flat user attrs are read into a record and written out of it. Pure: no optuna, no torch."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import field, fields
from typing import Any, TypeVar


def key(name: str) -> Any:
    """A record field stored under user-attr key `name`."""
    return field(default=None, metadata={"key": name})


def keyed(name: str, factory: Any) -> Any:
    return field(default_factory=factory, metadata={"key": name})


R = TypeVar("R")
P = TypeVar("P", bound="ByName")


class ByName:
    """A dataclass kept as a dict under its field names (`to_dict`) and read back from one
    (`from_dict`: the keys it knows; a key an older or newer writer added is left out)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[P], data: Mapping[str, Any]) -> P:
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{name: value for name, value in data.items() if name in known})


@functools.cache
def _keys(cls: type) -> tuple[tuple[str, str], ...]:
    """(field name, stored key) of the fields of `cls` that have a key."""
    return tuple((f.name, f.metadata["key"]) for f in fields(cls) if "key" in f.metadata)


def values(cls: type, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `cls` that flat `attrs` hold, each read from its ``key``."""
    return {name: attrs[key] for name, key in _keys(cls) if key in attrs}


def read(cls: type[R], attrs: Mapping[str, Any]) -> R:
    """A record of `cls` from flat attrs: each field from its ``key`` (absent: its default)."""
    return cls(**values(cls, attrs))


def write(record: Any) -> dict[str, Any]:
    """The flat attrs of a record: its fields that are set, under their keys."""
    return {
        f.metadata["key"]: getattr(record, f.name)
        for f in fields(record)
        if "key" in f.metadata and getattr(record, f.name) is not None
    }
