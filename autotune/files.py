"""Reading the small files options name (a base config, a peft config): one place for their
errors. Light: no torch."""

from __future__ import annotations

from typing import Any

from autotune.errors import UsageError


def read_mapping(path: str, field: str, holds: str, hint: str) -> dict[str, Any]:
    """A JSON (``.json``) or YAML file of a mapping, for option `field` (whose mapping `holds`
    what it names).

    Raises:
        UsageError: unreadable file (`hint` the fix), not JSON/YAML, or not a mapping.
    """
    import json

    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = "no such file" if isinstance(exc, FileNotFoundError) else str(exc)
        raise UsageError(f"cannot read {field} {path}: {reason}", hint, field=field) from None
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        raise UsageError(
            f"{field} {path} is not valid JSON/YAML", "fix the file's syntax", field=field
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f"{field} {path} must hold a mapping of {holds}", hint, field=field)
    return dict(data)
