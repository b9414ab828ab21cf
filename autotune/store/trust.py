"""The pools' trust policy: what a stored run configuration may make a worker run."""

from __future__ import annotations

from typing import Any

from autotune.errors import UsageError


def refuse_stored_remote_code(stored: dict[str, Any], allowed: bool) -> None:
    """Refuse to run code that a stored run configuration asks for: a pool member takes its run
    configuration from the store, and whoever can write the store must not choose code for it.
    ``trust_remote_code`` (the model's, the tokenizer's and the dataset's own Python from the hub)
    runs only where this worker's own command line said ``--trust-remote-code`` (`allowed`).

    Raises:
        UsageError: the stored configuration asks for remote code and `allowed` is False.
    """
    if stored.get("trust_remote_code") and not allowed:
        raise UsageError(
            f"the study's run configuration runs code from the hub repository of {stored.get('model')!r} "
            "(trust_remote_code=True), which this worker was not allowed to run",
            "read that code, then start the worker with trust_remote_code=True",
            field="trust_remote_code",
        )
