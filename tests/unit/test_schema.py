"""One schema version for what a study stores, one check: the study's records and its run
configuration are refused alike when a newer autotune wrote them; older ones read."""

from __future__ import annotations

import pytest

from autotune.errors import UsageError
from autotune.options import RunConfig
from autotune.records import study_attrs, study_record
from autotune.schema import SCHEMA_VERSION, check_schema


def test_records_and_run_configuration_carry_the_one_version() -> None:
    assert study_attrs()["schema_version"] == SCHEMA_VERSION
    assert RunConfig().to_dict()["schema"] == SCHEMA_VERSION


def test_a_newer_study_is_refused_in_one_line_with_the_fix() -> None:
    with pytest.raises(
        UsageError, match=rf"study 's' has schema {SCHEMA_VERSION + 1} \(written by autotune a newer"
    ):
        study_record("s", {"schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(UsageError, match="invalid schema 'x'"):
        check_schema("study 's'", "x")


def test_older_versions_read() -> None:
    for version in range(SCHEMA_VERSION + 1):
        check_schema("study 's'", version)
    assert study_record("s", {}).schema_version == 0
